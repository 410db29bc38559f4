"""Queue semantics of CappedPool: at-least-once, dead letters, delays, dedupe, the guard."""

import time

import pytest

from celery_redqueue import ConfigurationError


def test_at_least_once_returns_a_dead_drains_batch(make_pool, assert_identities):
    pool = make_pool(
        capacity=10, policy="reject", delivery="at_least_once", visibility_timeout=0.05
    )
    pool.add_many(["a", "b", "c"])
    batch = pool.pop(2)
    assert [i.receives for i in batch.items] == [1, 1]
    assert_identities(pool.stats())  # in flight, still accounted
    time.sleep(0.1)
    reaped = pool.reap()
    assert (reaped.lost, reaped.returned, reaped.drain_needed) == (0, 2, True)
    assert pool.ack(batch) is False
    # Returned calls are popped alone (one of them may have killed the batch's process).
    pops = [pool.pop(10) for _ in range(3)]
    assert [[(i.payload, i.receives) for i in p.items] for p in pops] == [
        [("a", 2)],
        [("b", 2)],
        [("c", 1)],
    ]
    for again in pops:
        pool.ack(again)
    stats = pool.stats()
    assert (stats.processed, stats.lost, stats.redelivered, stats.depth) == (3, 0, 2, 0)
    assert_identities(stats)


def test_failed_calls_are_retried_then_dead_lettered(make_pool, assert_identities):
    pool = make_pool(capacity=10, policy="reject", delivery="at_least_once", max_receives=3)
    pool.add_many(["poison", "fine"])
    for attempt in range(1, 4):
        batch = pool.pop(10)
        by_payload = {i.payload: (n, i) for n, i in enumerate(batch.items)}
        assert by_payload["poison"][1].receives == attempt
        pool.ack(batch, failures={by_payload["poison"][0]: f"ValueError: bad #{attempt}"})
        assert_identities(pool.stats())
    assert not pool.pop(10)
    (letter,) = pool.dead_letters()
    assert (letter.payload, letter.receives, letter.error) == ("poison", 3, "ValueError: bad #3")
    stats = pool.stats()
    assert (stats.processed, stats.dead, stats.retried) == (1, 1, 2)
    assert_identities(stats)


def test_dead_letters_requeue_and_purge(make_pool, assert_identities):
    pool = make_pool(capacity=10, delivery="at_least_once", max_receives=1)
    pool.add_many([f"x{i}" for i in range(5)])
    batch = pool.pop(10)
    pool.ack(batch, failures={i: "boom" for i in range(5)})
    letters = pool.dead_letters()
    assert sorted(x.payload for x in letters) == [f"x{i}" for i in range(5)]
    one = next(x for x in letters if x.payload == "x3")
    assert pool.requeue_dead([one]) == 1
    assert [i.payload for i in pool.pop(10).items] == ["x3"]
    assert pool.requeue_dead(limit=2) == 2
    assert pool.purge_dead() == 2
    assert pool.dead_letters() == []
    stats = pool.stats()
    assert (stats.dead, stats.purged, stats.depth, stats.in_flight) == (0, 2, 2, 1)
    assert_identities(stats)


def test_delayed_calls_wait_in_the_delayed_set(make_pool, assert_identities):
    pool = make_pool(capacity=10, policy="newest")
    first = pool.add("later", delay=0.3)
    assert first.delayed and not first.kept
    assert first.wake_in == pytest.approx(0.3, abs=0.01)
    assert pool.add("later still", delay=1.0).wake_in is None  # the earlier wake-up covers it
    assert pool.stats().delayed == 2
    batch = pool.pop(10)
    assert not batch and batch.wait == pytest.approx(0.3, abs=0.05)
    time.sleep(batch.wait + 0.05)
    due = pool.pop(10)
    assert [i.payload for i in due.items] == ["later"]
    pool.ack(due)
    stats = pool.stats()
    assert (stats.delayed, stats.offered, stats.processed) == (1, 1, 1)
    assert_identities(stats)


def test_duplicates_inside_the_window_are_refused(make_pool, assert_identities):
    pool = make_pool(capacity=10, dedupe_window=0.3)
    assert pool.add("sms", dedupe_id="order-1:sms")
    second = pool.add("sms again", dedupe_id="order-1:sms")
    assert second.duplicate and not second.kept
    assert pool.add("other", dedupe_id="order-2:sms")
    time.sleep(0.35)
    assert pool.add("sms later", dedupe_id="order-1:sms").kept
    stats = pool.stats()
    assert (stats.duplicates, stats.rejected, stats.accepted) == (1, 1, 3)
    assert_identities(stats)


def test_processed_guard_skips_a_redelivered_completed_entry(make_pool, assert_identities):
    """A drain that finished its bodies but acknowledged after the deadline: the reaper has
    returned the entries, and the guard keeps them from being applied a second time."""
    pool = make_pool(
        capacity=10,
        policy="newest",
        delivery="at_least_once",
        visibility_timeout=0.05,
        processed_guard=60,
    )
    pool.add_many(["points for order 1", "points for order 2"])
    slow = pool.pop(1)
    time.sleep(0.1)
    assert pool.reap().returned == 1
    assert pool.ack(slow) is False  # too late, but its completion is recorded
    rest = pool.pop(10)
    assert [i.payload for i in rest.items] == ["points for order 2"]
    pool.ack(rest)
    stats = pool.stats()
    assert (stats.guard_skipped, stats.processed, stats.depth) == (1, 2, 0)
    assert_identities(stats)


def test_without_the_guard_the_copy_is_delivered_again(make_pool):
    pool = make_pool(capacity=10, delivery="at_least_once", visibility_timeout=0.05)
    pool.add("points")
    slow = pool.pop(1)
    time.sleep(0.1)
    pool.reap()
    pool.ack(slow)
    assert [i.payload for i in pool.pop(1).items] == ["points"]


@pytest.mark.parametrize(
    "options",
    [{"delivery": "exactly_once"}, {"max_receives": 0}, {"dedupe_window": -1}],
)
def test_bad_semantics_options(make_pool, options):
    with pytest.raises(ConfigurationError):
        make_pool(**options)


@pytest.mark.parametrize("delay", [-1, float("nan"), float("inf"), "5"])
def test_bad_delay_stores_nothing(make_pool, make_bucket, delay):
    pool = make_pool()
    with pytest.raises(ConfigurationError, match="delay must be seconds >= 0"):
        pool.add("x", delay=delay)
    assert pool.stats().delayed == 0 and pool.stats().depth == 0
    bucket = make_bucket()
    with pytest.raises(ConfigurationError, match="delay must be seconds >= 0"):
        bucket.enqueue("k", "x", delay=delay)
    assert bucket.stats().delayed == 0 and bucket.stats().depth == 0
    bucket.enqueue("k", "x")
    reservation = bucket.dequeue().reservation
    with pytest.raises(ConfigurationError, match="retry_later delay must be seconds >= 0"):
        bucket.retry_later(reservation, delay=delay)
    assert bucket.stats().in_flight == 1  # still held: nothing was settled


# Regressions found in review: each of these failed before its fix.


def test_a_returned_entry_that_evicts_another_keeps_the_depth_exact(make_pool, assert_identities):
    pool = make_pool(capacity=2, policy="newest", delivery="at_least_once", visibility_timeout=0.05)
    pool.add("a")
    batch = pool.pop(1)
    pool.add_many(["b", "c"])  # full again while "a" is in flight
    pool.ack(batch, failures={0: "retry me"})  # "a" comes back and pushes "b" out
    assert_identities(pool.stats())
    assert pool.stats().depth == pool.stats().entries == 2
    again = pool.pop(1)
    time.sleep(0.1)
    pool.add("d")
    pool.reap()  # the reaper's return path evicts too
    assert_identities(pool.stats())
    assert pool.stats().depth == pool.stats().entries
    assert again


def test_guard_skipping_everything_popped_does_not_strand_the_pool(make_pool):
    pool = make_pool(
        capacity=10,
        policy="newest",
        delivery="at_least_once",
        visibility_timeout=0.05,
        processed_guard=60,
    )
    pool.add("done already")
    slow = pool.pop(1)
    time.sleep(0.1)
    pool.reap()
    pool.ack(slow)  # late: its returned copy will be skipped
    batch = pool.pop(1)  # pops only the skipped copy...
    assert batch.pop_again or [i.payload for i in batch.items] == []
    pool.add_many(["new 1", "new 2"])
    seen = []
    while True:
        batch = pool.pop(1)
        if batch.pop_again:
            continue
        if not batch:
            break
        seen.extend(i.payload for i in batch.items)
        pool.ack(batch)
    assert seen == ["new 1", "new 2"]
    assert pool.stats().drains == 0  # cleared by the truly empty pop


def test_coalescing_pools_refuse_the_processed_guard(make_pool):
    with pytest.raises(ConfigurationError, match="coalescing"):
        make_pool(coalesce=True, processed_guard=60)


class PickyJSON:
    """JSON that cannot read one payload, to make an undecodable entry."""

    def dumps(self, obj):
        import json

        return json.dumps(obj)

    def loads(self, data):
        import json

        if data == b'"poison"':
            raise ValueError("cannot read")
        return json.loads(data)


def test_ack_matches_outcomes_to_entries_by_id(make_pool):
    pool = make_pool(
        capacity=10,
        policy="newest",
        delivery="at_least_once",
        serializer=PickyJSON(),
        max_receives=1,
    )
    pool.add_many(["poison", "good"])
    batch = pool.pop(10)
    assert [i.payload for i in batch.items] == ["good"] and len(batch.undecodable) == 1
    pool.ack(batch)
    stats = pool.stats()
    assert (stats.processed, stats.dead, stats.retried, stats.depth) == (1, 1, 0, 0)
    assert pool.dead_letters()[0].error.startswith("undecodable payload: ")


def test_reaper_asks_for_a_drain_even_while_the_dead_drains_flag_lives(make_pool):
    pool = make_pool(capacity=10, delivery="at_least_once", visibility_timeout=0.05)
    pool.add_many(["a", "b"])
    pool.pop(1)  # the drain dies holding "a"; its flag stays for minutes
    time.sleep(0.1)
    assert pool.stats().drains == 1
    assert pool.reap().drain_needed


def test_a_refused_call_does_not_burn_its_dedupe_id(make_pool):
    pool = make_pool(capacity=1, policy="reject", dedupe_window=60)
    pool.add("filler")
    refused = pool.add("sms", dedupe_id="order-1:sms")
    assert not refused.kept and not refused.duplicate
    pool.ack(pool.pop(1))
    assert pool.add("sms", dedupe_id="order-1:sms").kept


def test_coalesced_failures_reach_the_dead_letters_while_equal_calls_arrive(
    make_pool, assert_identities
):
    pool = make_pool(capacity=10, coalesce=True, delivery="at_least_once", max_receives=2)
    for _ in range(3):
        pool.add("flaky")
        batch = pool.pop(10)
        if not batch:
            break
        pool.add("flaky")  # an equal call arrives while the failing one is in flight
        pool.ack(batch, failures={0: "still failing"})
    assert pool.stats().dead >= 1
    assert_identities(pool.stats())
