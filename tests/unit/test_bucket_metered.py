"""LeakyBucket for metered APIs against a real Redis: costs, reported costs, a total rate,
backoff, concurrency, pause and resume, the noisy-neighbour figures."""

import itertools
import math
import time

import pytest

from celery_redqueue import ConfigurationError, InvalidArgumentError, KeyBackoff, retry_after
from celery_redqueue.structures.bucket import LeakyBucket


def drain_for(bucket, seconds, commit=True, until=None):
    """Dequeued one bucket for ``seconds``, or until ``until`` reservations came (then
    ``seconds`` is only a generous bound: a busy machine slows the loop, never the pacing);
    returns the reservations (committed at once)."""
    got = []
    end = time.monotonic() + seconds
    while time.monotonic() < end and (until is None or len(got) < until):
        poll = bucket.dequeue()
        if poll.reservation:
            got.append(poll.reservation)
            if commit:
                bucket.commit(poll.reservation)
        elif poll.wait is None:
            break
        else:
            time.sleep(min(poll.wait, 0.01))
    return got


def test_costs_are_paced_and_hold_in_every_sliding_window(make_bucket):
    bucket = make_bucket(default_rate="1000/s", cost_rate="20/s")
    costs = [1, 3, 2, 5, 1, 4, 2, 2, 3, 1] * 3
    bucket.enqueue_many([("a", i, c) for i, c in enumerate(costs)])
    got = drain_for(bucket, 60, until=12)  # 25 units before the 12th: past the first second
    assert [r.cost for r in got] == [float(c) for c in costs[:12]]  # backlogged all along
    # GCRA on the server clock: a call goes once the units before it have run out (50 ms a
    # unit), never sooner: paced, not a second's budget at once.
    for r, after in itertools.pairwise(got):
        assert after.released_at - r.released_at >= r.cost * 0.05 - 1e-6, (r, after)
    # So every sliding second holds at most the budget plus one call's cost (its last).
    assert most_in_sliding(got) <= 20 + max(costs), got


def test_a_cost_no_period_allows_is_refused_and_nothing_is_stored(make_bucket):
    bucket = make_bucket(cost_rate="100/m", cost_burst=10)
    with pytest.raises(InvalidArgumentError, match="never be released"):
        bucket.enqueue("a", 1, cost=111)
    with pytest.raises(InvalidArgumentError):
        bucket.enqueue("a", 1, cost=-1)
    bucket.enqueue("a", 1, cost=110)
    bucket.set_cost_rate("small", "10/m")
    with pytest.raises(Exception, match="exceeds what its cost rate allows"):
        bucket.enqueue("small", 1, cost=50)
    assert bucket.stats().enqueued == 1
    with pytest.raises(InvalidArgumentError, match="cost_rate"):
        make_bucket("plain").enqueue("a", 1, cost=3)


def test_a_reported_cost_corrects_the_budget(make_bucket):
    bucket = make_bucket(default_rate="1000/s", cost_rate="10/s")
    bucket.enqueue_many([("a", 1, 1), ("a", 2, 1)])
    first = bucket.dequeue().reservation
    assert bucket.commit(first, cost=20)  # it cost 20 units, not 1: two seconds' worth
    stats = bucket.key_stats("a")
    assert stats.next_eligible == pytest.approx(first.released_at + 2.0, abs=1e-3)
    assert bucket.dequeue().reservation is None
    # A refund while the call is its key's latest release gives its units back at once: the
    # next call (8 + 5 > 10) need not wait out the 800 ms of the first one's estimate.
    bucket = make_bucket("refunds", default_rate="1000/s", cost_rate="10/s")
    bucket.enqueue("b", 1, cost=8)
    bucket.enqueue("b", 2, cost=5)
    held = bucket.dequeue().reservation
    assert held.key == "b" and bucket.commit(held, cost=0)
    time.sleep(0.01)  # the call rate's 1 ms
    assert bucket.dequeue().reservation.key == "b"


def test_total_rate_holds_across_keys_and_keeps_them_fair(make_bucket):
    bucket = make_bucket(default_rate="100/s", total_rate="10/s")
    bucket.set_rate("slow", "1/s")
    bucket.enqueue_many([(k, i) for i in range(40) for k in ("a", "b", "slow")])
    got = drain_for(bucket, 2.05)
    times = sorted(r.released_at for r in got)
    for i, t in enumerate(times):
        assert len([x for x in times[i:] if x < t + 1.0]) <= 10
    by_key = {k: sum(r.key == k for r in got) for k in ("a", "b", "slow")}
    assert abs(by_key["a"] - by_key["b"]) <= 1, by_key  # equal shares below the total
    assert 2 <= by_key["slow"] <= 3, by_key  # its own rate, not less


def test_sharded_total_rate_is_split_between_shards(redqueue_redis, redqueue_prefix):
    bucket = LeakyBucket(redqueue_redis, "t", shards=2, prefix=redqueue_prefix, total_rate="10/s")
    assert [s.limits.total_interval_ms for s in bucket.shards] == [200.0, 200.0]
    assert bucket.settings()["total_rate"] == "10/s"


def test_backoff_pauses_the_key_and_does_not_count_a_receive(make_bucket):
    bucket = make_bucket(default_rate="100/s", max_receives=1, cost_rate="100/s")
    bucket.enqueue_many([("a", 1, 5), ("a", 2, 5), ("b", 3, 5), ("b", 4, 5)])
    first = bucket.dequeue().reservation
    assert first.key == "a" and first.receives == 1
    assert bucket.backoff(first, 0.5)
    stats = bucket.key_stats("a")
    assert stats.paused_until is not None and stats.backoffs == 1 and stats.depth == 2
    got = drain_for(bucket, 2.0)
    a_times = [r.released_at for r in got if r.key == "a"]
    assert [r.payload for r in got if r.key == "b"] == [3, 4]  # the other key went on
    assert a_times and min(a_times) - first.released_at >= 0.5
    again = next(r for r in got if r.key == "a")
    assert again.payload == 1 and again.receives == 1  # back at the head, receive not counted
    assert bucket.stats().dead == 0 and bucket.stats().processed == 4


def take(bucket, n):
    """The next ``n`` reservations, waiting out the call rate's milliseconds; fewer when the
    bucket says nothing may go (the concurrency limit)."""
    got = []
    deadline = time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        poll = bucket.dequeue()
        if poll.reservation:
            got.append(poll.reservation)
        elif poll.wait is None:
            break
        else:
            time.sleep(poll.wait)
    return got


def test_concurrency_limits_in_flight_per_key_and_the_reaper_frees_a_slot(make_bucket):
    bucket = make_bucket(default_rate="1000/s", concurrency=2, visibility_timeout=1.0)
    bucket.enqueue_many([("a", i) for i in range(5)] + [("b", 9)])
    held = take(bucket, 4)
    assert sorted(r.key for r in held) == ["a", "a", "b"]  # a has two in flight: no third
    bucket.commit(next(r for r in held if r.key == "a"))
    assert [r.key for r in take(bucket, 2)] == ["a"]
    time.sleep(1.1)  # the holders died: their reservations expire
    assert bucket.reap().returned == 3
    again = take(bucket, 4)
    assert sorted(r.key for r in again) == ["a", "a", "b"]  # the reaped slots, no more


def test_set_concurrency_changes_one_keys_limit_at_runtime(make_bucket):
    bucket = make_bucket(default_rate="1000/s", concurrency=2, max_drains=4)
    bucket.enqueue_many([("a", i) for i in range(8)] + [("b", i) for i in range(4)])
    held = take(bucket, 6)
    assert sorted(r.key for r in held) == ["a", "a", "b", "b"]
    sent = []
    bucket.drain_sender = lambda: sent.append(1)
    # Raised: the key at its old limit may go at once (a drain job is asked for), up to 4.
    assert bucket.set_concurrency("a", 4) and sent == [1]
    assert not bucket.set_concurrency("a", 4)  # the same again: nothing changed
    more = take(bucket, 6)
    assert [r.key for r in more] == ["a", "a"]  # a: 4 in flight; b still at 2
    # Lowered: calls in flight finish; none goes until the key is under the new limit.
    assert bucket.set_concurrency("a", 1)
    of_a = [r for r in held + more if r.key == "a"]
    for r in of_a[:3]:
        bucket.commit(r)
    assert [r.key for r in take(bucket, 3)] == []  # a: 1 in flight, its limit
    bucket.commit(of_a[3])
    assert [r.key for r in take(bucket, 3)] == ["a"]
    # Cleared: the bucket's own limit again (2 for a).
    assert bucket.set_concurrency("a", None)
    assert [r.key for r in take(bucket, 3)] == ["a"]
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigurationError, match="concurrency"):
            bucket.set_concurrency("a", bad)
    with pytest.raises(ConfigurationError, match="bucket_drain_concurrency"):
        bucket.set_concurrency("a", 5)  # 4 drain jobs at most: it could never reach 5
    with pytest.raises(ConfigurationError, match="ordered"):
        make_bucket(ordered=True).set_concurrency("a", 2)


def test_a_key_limit_works_on_a_bucket_without_concurrency(make_bucket):
    bucket = make_bucket(default_rate="1000/s", max_drains=2)
    bucket.enqueue_many([("a", i) for i in range(4)])
    assert bucket.set_concurrency("a", 1)
    held = take(bucket, 3)
    assert len(held) == 1
    bucket.commit(held[0])  # its settle makes the key eligible again
    assert len(take(bucket, 3)) == 1


def test_ordered_is_concurrency_one(make_bucket):
    assert make_bucket(ordered=True).limits.concurrency == 1
    assert make_bucket(concurrency=1).ordered
    with pytest.raises(ConfigurationError, match="concurrency"):
        make_bucket(ordered=True, concurrency=2)
    with pytest.raises(ConfigurationError, match="concurrency"):
        make_bucket(concurrency=0)


def test_pause_and_resume_by_hand(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([("a", 1), ("b", 2)])
    assert bucket.pause("a")
    assert bucket.paused() == [("a", math.inf)]
    assert bucket.key_stats("a").paused_until == math.inf
    bucket.enqueue("a", 3)  # still accepts calls
    got = drain_for(bucket, 0.3)
    assert [r.key for r in got] == ["b"]
    assert bucket.dequeue().empty  # nothing may go while a is paused
    sent = []
    bucket.drain_sender = lambda: sent.append(1)
    assert bucket.resume("a") and sent == [1]
    assert not bucket.resume("a")
    assert [r.payload for r in drain_for(bucket, 0.3)] == [1, 3]
    assert bucket.paused_count() == 0


def test_timed_pause_runs_out_by_itself(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue("a", 1)
    bucket.pause("a", 0.3)
    poll = bucket.dequeue()
    assert poll.reservation is None and 0.1 < poll.wait <= 0.3
    time.sleep(poll.wait)
    assert bucket.dequeue().reservation.payload == 1
    # A pause that ran out is over for a resume and the counts too (no poll forgets it).
    assert not bucket.resume("a")
    assert bucket.paused() == [] and bucket.paused_count() == 0


def test_noisy_neighbour_figures(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([("hot", i) for i in range(30)] + [("cold", 1), ("cold", 2)])
    bucket.enqueue("waiting", 0)
    bucket.pause("waiting")
    drain_for(bucket, 0.5)
    busiest = bucket.busiest(2)
    assert [row.key for row in busiest] == ["hot", "cold"]
    assert busiest[0].share == pytest.approx(30 / 32, abs=0.01)
    assert bucket.key_stats("hot").release_share == pytest.approx(30 / 32, abs=0.01)
    time.sleep(0.3)
    waiting = bucket.longest_waiting(5)
    assert [row.key for row in waiting] == ["waiting"] and waiting[0].oldest_age >= 0.3


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after("7").seconds == 7.0
    assert KeyBackoff(2).seconds == 2.0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 28 <= retry_after(date).seconds <= 31
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT").seconds == 0.0
    assert retry_after("nonsense", default=5).seconds == 5.0
    with pytest.raises(InvalidArgumentError):
        KeyBackoff(-1)


def most_in_sliding(reservations, period=1.0, costs=None):
    """The most units released in any half-open sliding window of ``period`` seconds (server
    times; a window starting at each release is enough). 1 us of slack for float rounding."""
    rows = sorted(
        (r.released_at, r.cost if costs is None else costs[r.payload]) for r in reservations
    )
    return max(
        (sum(c for s, c in rows[i:] if s < t + period - 1e-6) for i, (t, _) in enumerate(rows)),
        default=0,
    )


def wait_for_server_fraction(client, low, high):
    """Wait until the server clock is between ``low`` and ``high`` into its second."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        seconds, micros = client.time()
        if low <= micros / 1e6 < high:
            return seconds + micros / 1e6
        time.sleep(0.005)
    raise AssertionError("the server clock never got there")


def poll_until_taken(bucket, seconds=5.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        poll = bucket.dequeue()
        if poll.reservation:
            return poll.reservation
        time.sleep(0.002)
    raise AssertionError("nothing was released")


def test_a_late_refund_never_lets_a_later_window_exceed_the_cost_rate(make_bucket):
    # The first call is refunded after the second went: the refund must not free units in the
    # windows the second one already used, or the third goes with it.
    bucket = make_bucket(default_rate="1000/s", cost_rate="10/s")
    bucket.enqueue_many([("a", i, 10) for i in range(3)])
    first = poll_until_taken(bucket)
    second = poll_until_taken(bucket)
    assert bucket.commit(first, cost=0)  # the upstream refused it, say: it cost nothing
    third = poll_until_taken(bucket)
    bucket.commit(second)
    assert most_in_sliding([first, second, third]) <= 10


def test_units_in_every_sliding_window_stay_within_the_cost_rate(make_bucket):
    # Backlogged with mixed costs, some refunds reported at once (burst 0).
    bucket = make_bucket(default_rate="1000/s", cost_rate="20/s")
    costs = [1, 3, 2, 5, 1, 4, 2, 6, 3, 1] * 4
    actual = [c // 2 if i % 2 == 0 else c for i, c in enumerate(costs)]
    bucket.enqueue_many([("a", i, c) for i, c in enumerate(costs)])
    got = []
    end = time.monotonic() + 2.5
    while time.monotonic() < end:
        poll = bucket.dequeue()
        if poll.reservation:
            got.append(poll.reservation)
            # Even calls report half their estimate; odd ones cost what they were charged.
            bucket.commit(poll.reservation, cost=actual[poll.reservation.payload])
        else:
            time.sleep(0.002)
    # What the upstream saw: the budget plus at most one call's cost in any sliding second.
    assert most_in_sliding(got, costs=actual) <= 20 + max(costs)
    assert len(got) >= 10


def test_an_idle_key_sent_two_periods_at_a_window_edge_is_paced(make_bucket, redqueue_redis):
    # Two seconds' worth of 60-token calls, stored 0.7 s into an aligned second: per aligned
    # window, one second's budget would go before the edge and the next right after it.
    bucket = make_bucket(default_rate="1000/s", cost_rate="300/s")
    wait_for_server_fraction(redqueue_redis, 0.7, 0.75)
    bucket.enqueue_many([("idle", i, 60) for i in range(10)])
    got = drain_for(bucket, 60, until=6)
    assert len(got) == 6
    assert most_in_sliding(got) <= 300  # equal costs: exact (a call every 200 ms)


def test_ahead_releases_a_costly_call_at_its_cost_slot(make_bucket, monkeypatch):
    monkeypatch.setattr("celery_redqueue.structures.bucket.AHEAD", 1.5)
    bucket = make_bucket(default_rate="1000/s", cost_rate="10/s")
    bucket.enqueue_many([("a", i, 5) for i in range(2)])
    first = bucket.dequeue().reservation
    second = bucket.dequeue(listen=1.5, ahead=True).reservation
    # Released at the slot its cost schedule gives (5 units of 100 ms), not before.
    assert second.released_at == pytest.approx(first.released_at + 0.5, abs=1e-6)
    assert time.time() >= second.released_at  # this host's clock is the Redis server's


def test_ahead_releases_a_key_due_within_listen_at_its_slot(make_bucket, monkeypatch):
    monkeypatch.setattr("celery_redqueue.structures.bucket.AHEAD", 2.0)  # the lead's cap
    bucket = make_bucket(default_rate="2/s")  # 500 ms apart: wide margins on a busy machine
    bucket.enqueue_many([("a", i) for i in range(3)])
    first = bucket.dequeue().reservation
    assert bucket.dequeue(listen=1.0).reservation is None  # due in 500 ms: wait and poll
    second = bucket.dequeue(listen=1.0, ahead=True).reservation
    # Released at its slot, the schedule's, not at the poll's time; returned no sooner.
    assert second.released_at == pytest.approx(first.released_at + 0.5, abs=1e-6)
    assert time.time() >= second.released_at  # this host's clock is the Redis server's
    poll = bucket.dequeue(listen=0.1, ahead=True)  # due in 500 ms: beyond the listen
    assert poll.reservation is None and 0 < poll.wait <= 0.5
    third = bucket.dequeue(listen=1.0, ahead=True).reservation
    assert third.released_at == pytest.approx(second.released_at + 0.5, abs=1e-6)
    # Beyond the cap, the wait is told the cap short: a caller waiting it out comes back
    # within reach of the slot.
    monkeypatch.setattr("celery_redqueue.structures.bucket.AHEAD", 0.03)
    bucket.enqueue("a", 3)
    poll = bucket.dequeue(listen=1.0, ahead=True)
    assert poll.reservation is None and poll.wait <= 0.5 - 0.03


def test_weights_share_releases_under_a_total_rate(make_bucket):
    bucket = make_bucket(default_rate="1000/s", total_rate="200/s")
    bucket.set_weight("b", 2)
    bucket.set_weight("c", 3)
    bucket.enqueue_many([(key, i) for i in range(40) for key in "abc"])
    got = drain_for(bucket, 60, until=60)
    first = [r.key for r in got]  # all three busy all along
    assert [first.count(k) for k in "abc"] == [10, 20, 30]
    for bad in (0.5, 0, -1, True, "2", math.inf):
        with pytest.raises(ConfigurationError, match="weight"):
            bucket.set_weight("a", bad)
    bucket.set_weight("c", None)
    assert bucket.client.hget(bucket.keys("rates"), "c\0weight") is None


def test_a_fractional_weight_carries_over(make_bucket):
    bucket = make_bucket(default_rate="1000/s", total_rate="200/s")
    bucket.set_weight("b", 2.5)
    bucket.enqueue_many([(key, i) for i in range(40) for key in "ab"])
    first = [r.key for r in drain_for(bucket, 60, until=35)]  # ten turns: 10 of a, 25 of b
    assert [first.count(k) for k in "ab"] == [10, 25]
