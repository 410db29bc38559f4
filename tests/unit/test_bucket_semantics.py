"""Queue semantics of LeakyBucket: delays, dedupe, the processed-guard, dead-letter tools."""

import time

import pytest


def test_delayed_item_joins_its_key_when_due(make_bucket):
    bucket = make_bucket(default_rate="1000/s", visibility_timeout=0.1)
    first = bucket.enqueue("order-9", "cancel if unpaid", delay=0.4)
    assert first.delayed and first.wake_in == pytest.approx(0.4, abs=0.01)
    assert bucket.stats().delayed == 1 and bucket.stats().depth == 0
    poll = bucket.dequeue()
    assert poll.reservation is None and 0.3 < poll.wait <= 0.4
    time.sleep(poll.wait + 0.02)
    reservation = bucket.dequeue().reservation
    assert (reservation.key, reservation.payload, reservation.receives) == (
        "order-9",
        "cancel if unpaid",
        1,
    )
    # The reservation clock started at release, not at enqueue: the 0.4 s delay, longer than
    # the 0.1 s reservation timeout, has not made anything expire.
    assert bucket.reap().returned == 0
    assert bucket.commit(reservation)
    assert bucket.stats().delayed == 0


def test_duplicates_are_refused_within_the_window(make_bucket):
    bucket = make_bucket(dedupe_window=0.3)
    assert bucket.enqueue("k", "sms", dedupe_id="order-1:sms").kept
    again = bucket.enqueue("k", "sms", dedupe_id="order-1:sms")
    assert again.duplicate and not again.kept
    time.sleep(0.35)
    assert bucket.enqueue("k", "sms", dedupe_id="order-1:sms").kept
    stats = bucket.stats()
    assert (stats.duplicates, stats.enqueued) == (1, 2)


def test_processed_guard_skips_a_completed_redelivery(make_bucket):
    bucket = make_bucket(default_rate="1000/s", visibility_timeout=0.05, processed_guard=60)
    bucket.enqueue_many([("order-1", "apply points"), ("order-1", "send receipt")])
    slow = bucket.dequeue().reservation
    time.sleep(0.08)
    assert bucket.reap().returned == 1  # the body is still running somewhere
    assert bucket.commit(slow) is False  # finished late, but recorded
    time.sleep(0.01)
    nxt = bucket.dequeue().reservation
    assert nxt.payload == "send receipt"  # the returned copy of "apply points" was skipped
    stats = bucket.stats()
    assert (stats.guard_skipped, stats.processed) == (1, 1)


def test_dead_letters_requeue_one_and_purge_the_rest(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([("a", 1), ("b", 2), ("c", 3)])
    for _ in range(3):
        time.sleep(0.002)
        reservation = bucket.dequeue().reservation
        bucket.dead_letter(reservation, f"ValueError: {reservation.payload}")
    letters = bucket.dead_letters()
    assert [(x.key, x.payload, x.error) for x in letters] == [
        ("a", 1, "ValueError: 1"),
        ("b", 2, "ValueError: 2"),
        ("c", 3, "ValueError: 3"),
    ]
    assert bucket.requeue_dead([letters[1]]) == 1
    assert bucket.key_stats("b").dead == 0 and bucket.key_stats("b").depth == 1
    again = bucket.dequeue().reservation
    assert (again.key, again.payload, again.receives) == ("b", 2, 1)
    assert bucket.purge_dead() == 2
    stats = bucket.stats()
    assert (stats.dead, stats.purged, stats.requeued) == (0, 2, 1)
    assert bucket.dead_letters() == []


# Regressions found in review: each of these failed before its fix.


def test_ordered_key_goes_on_after_the_reaper_dead_letters_its_item(make_bucket):
    bucket = make_bucket(
        ordered=True, max_receives=1, visibility_timeout=0.05, default_rate="1000/s"
    )
    bucket.enqueue_many([("order-7", "placed"), ("order-7", "paid")])
    assert bucket.dequeue().reservation.payload == "placed"
    time.sleep(0.1)
    assert bucket.reap().dead_lettered == 1
    assert bucket.dequeue().reservation.payload == "paid"


def test_reaper_asks_for_a_drain_even_while_the_dead_drains_flag_lives(make_bucket):
    bucket = make_bucket(visibility_timeout=0.05, default_rate="1000/s")
    bucket.enqueue("k", 1)
    bucket.dequeue()  # its drain dies; the flag it refreshed lives for minutes
    time.sleep(0.1)
    assert bucket.reap().drain_needed


def test_a_refused_item_does_not_burn_its_dedupe_id(make_bucket):
    bucket = make_bucket(max_depth=1, dedupe_window=60, default_rate="1000/s")
    bucket.enqueue("k", "filler")
    refused = bucket.enqueue("k", "sms", dedupe_id="order-1:sms")
    assert not refused.kept and not refused.duplicate
    bucket.commit(bucket.dequeue().reservation)
    assert bucket.enqueue("k", "sms", dedupe_id="order-1:sms").kept
