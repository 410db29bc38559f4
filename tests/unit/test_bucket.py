"""LeakyBucket against a real Redis: rate bound, fairness, refill, reaper, ordering, errors."""

import itertools
import multiprocessing
import os
import signal
import time

import pytest
import redis

from celery_redqueue import ConfigurationError, LeakyBucket, ReservationError, parse_rate


def _consume(url, prefix, seconds, queue):
    bucket = LeakyBucket(redis.Redis.from_url(url), "rate", prefix=prefix, default_rate="20/s")
    started = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        poll = bucket.dequeue()
        if poll.reservation:
            started.append((poll.reservation.key, poll.reservation.released_at))
            bucket.commit(poll.reservation)
        elif poll.wait is not None:
            time.sleep(min(poll.wait, 0.01))
        else:
            break
    queue.put(started)


def max_in_window(times, window=1.0):
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_concurrent_consumers_never_exceed_the_rate(
    redqueue_server_url, redqueue_prefix, make_bucket
):
    """Three consumer processes race for two keys at 20/s and one at 50/s with burst 2."""
    bucket = make_bucket("rate", default_rate="20/s")
    bucket.set_rate("fast", "50/s", burst=2)
    bucket.enqueue_many([(k, i) for i in range(200) for k in ("a", "b", "fast")])
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    consumers = [
        ctx.Process(target=_consume, args=(redqueue_server_url, redqueue_prefix, 2.5, queue))
        for _ in range(3)
    ]
    for p in consumers:
        p.start()
    started = [item for _ in consumers for item in queue.get(timeout=60)]
    for p in consumers:
        p.join()
    by_key = {}
    for key, at in started:
        by_key.setdefault(key, []).append(at)
    assert set(by_key) == {"a", "b", "fast"}
    for key, interval, burst in (("a", 0.05, 0), ("b", 0.05, 0), ("fast", 0.02, 2)):
        times = sorted(by_key[key])
        # GCRA: in any half-open window of length t at most t/interval + burst items start.
        assert max_in_window(times, 1.0) <= round(1.0 / interval) + burst, key
        assert max_in_window(times, 0.5) <= round(0.5 / interval) + burst, key
        if burst == 0:
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert min(gaps) >= interval - 1e-6, key
        # Backlogged all along, so the key was kept busy (a loose logical floor, not a speed).
        assert len(times) >= 0.5 * 2.5 / interval, key


def test_hot_key_delays_a_cold_key_by_at_most_one_interval(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    for start in range(0, 100_000, 5000):
        bucket.enqueue_many([("hot", i) for i in range(start, start + 5000)])
    hot = bucket.dequeue().reservation
    assert hot.key == "hot"
    bucket.commit(hot)
    bucket.enqueue("cold", "only")
    released = []
    while len(released) < 3:
        poll = bucket.dequeue()
        if poll.reservation:
            released.append(poll.reservation.key)
            bucket.commit(poll.reservation)
        else:
            time.sleep(poll.wait or 0.001)
    assert "cold" in released[:2]


def test_refilled_key_keeps_its_schedule(make_bucket):
    """A key that empties and refills at once must not be 'eligible now' again."""
    bucket = make_bucket(default_rate="2/s")
    bucket.enqueue("k", 1)
    first = bucket.dequeue().reservation
    bucket.commit(first)
    bucket.enqueue("k", 2)
    poll = bucket.dequeue()
    assert poll.reservation is None
    assert 0.3 < poll.wait <= 0.5
    time.sleep(poll.wait)
    second = bucket.dequeue().reservation
    assert second.payload == 2
    assert second.released_at - first.released_at >= 0.5 - 1e-6


def test_key_without_a_rate_uses_the_default(make_bucket):
    bucket = make_bucket(default_rate="100/s")
    bucket.enqueue("unknown-key", {"x": 1})
    reservation = bucket.dequeue().reservation
    assert reservation.payload == {"x": 1}
    assert bucket.key_stats("unknown-key").interval == pytest.approx(0.01)


def _hold_forever(url, prefix, ready):
    bucket = LeakyBucket(
        redis.Redis.from_url(url),
        "reap",
        prefix=prefix,
        visibility_timeout=0.3,
        default_rate="100/s",
    )
    reservation = bucket.dequeue().reservation
    ready.put(reservation.payload)
    time.sleep(600)


def test_killed_consumer_item_comes_back_after_the_reaper(
    redqueue_server_url, redqueue_prefix, make_bucket
):
    bucket = make_bucket("reap", visibility_timeout=0.3, default_rate="100/s")
    bucket.enqueue("only-item-key", "precious")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    consumer = ctx.Process(target=_hold_forever, args=(redqueue_server_url, redqueue_prefix, ready))
    consumer.start()
    assert ready.get(timeout=60) == "precious"
    os.kill(consumer.pid, signal.SIGKILL)
    consumer.join()
    # Reserved by the dead consumer; its key's queue is empty.
    assert bucket.dequeue().reservation is None
    assert bucket.reap().returned == 0  # not expired yet
    time.sleep(0.4)
    reaped = bucket.reap()
    assert (reaped.returned, reaped.dead_lettered) == (1, 0)
    # The key was made eligible again, though its queue had emptied.
    again = bucket.dequeue().reservation
    assert (again.payload, again.receives) == ("precious", 2)
    assert bucket.commit(again)
    stats = bucket.stats()
    assert (stats.processed, stats.in_flight, stats.depth, stats.redelivered) == (1, 0, 0, 1)


def test_commit_after_the_reaper_took_it_back_is_refused(make_bucket):
    bucket = make_bucket(visibility_timeout=0.05, default_rate="100/s")
    bucket.enqueue("k", 1)
    stale = bucket.dequeue().reservation
    time.sleep(0.1)
    bucket.reap()
    fresh = bucket.dequeue().reservation
    assert fresh.receives == 2 and fresh.id != stale.id
    assert bucket.commit(stale) is False
    assert bucket.commit(fresh) is True


def test_past_max_receives_an_item_is_dead_lettered(make_bucket):
    bucket = make_bucket(visibility_timeout=0.05, max_receives=2, default_rate="1000/s")
    bucket.enqueue("k", {"order": 7})
    for _ in range(2):
        assert bucket.dequeue().reservation is not None
        time.sleep(0.08)
        bucket.reap()
    assert bucket.dequeue().reservation is None
    (letter,) = bucket.dead_letters()
    assert (letter.key, letter.payload, letter.receives) == ("k", {"order": 7}, 2)
    assert "expired" in letter.error
    assert bucket.stats().dead == 1 and bucket.key_stats("k").dead == 1


def test_dead_letter_keeps_the_error_text(make_bucket):
    bucket = make_bucket()
    bucket.enqueue("k", "bad")
    reservation = bucket.dequeue().reservation
    assert bucket.dead_letter(reservation, "ValueError: malformed order")
    assert bucket.dead_letters()[0].error == "ValueError: malformed order"


def test_ordered_mode_allows_one_item_in_flight_per_key(make_bucket):
    bucket = make_bucket(ordered=True, default_rate="1000/s")
    bucket.enqueue_many(
        [("order-1", s) for s in ("placed", "paid", "packed")] + [("order-2", "placed")]
    )
    first = bucket.dequeue().reservation
    second = bucket.dequeue().reservation
    assert {first.key, second.key} == {"order-1", "order-2"}
    assert bucket.dequeue().reservation is None  # order-1's next step waits for "placed" to finish
    one = first if first.key == "order-1" else second
    assert one.payload == "placed"
    bucket.commit(one)
    time.sleep(0.002)
    assert bucket.dequeue().reservation.payload == "paid"


def test_retry_later_with_delay_holds_the_key(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([("api", 1), ("api", 2)])
    reservation = bucket.dequeue().reservation
    assert bucket.retry_later(reservation, delay=0.5)
    poll = bucket.dequeue()
    assert poll.reservation is None and poll.wait > 0.3
    time.sleep(poll.wait)
    again = bucket.dequeue().reservation
    assert (again.payload, again.receives) == (1, 2)  # back at the head, order kept


def test_max_depth_reject_and_drop_oldest(make_bucket):
    rejecting = make_bucket("r", max_depth=2)
    assert [bool(r) for r in rejecting.enqueue_many([("k", i) for i in range(4)])] == [
        True,
        True,
        False,
        False,
    ]
    assert rejecting.stats().rejected == 2
    dropping = make_bucket("d", max_depth=2, overflow="drop_oldest", default_rate="1000/s")
    results = dropping.enqueue_many([("k", i) for i in range(4)])
    assert [r.evicted_oldest for r in results] == [False, False, True, True]
    assert dropping.dequeue().reservation.payload == 2
    assert dropping.stats().evicted == 2


@pytest.mark.parametrize(
    "rate, interval_ms",
    [("10/s", 100), ("100/m", 600), ("5/h", 720_000), ("0.5/s", 2000), (4, 250), ("2", 500)],
)
def test_rate_strings(rate, interval_ms):
    assert parse_rate(rate) == pytest.approx(interval_ms)


@pytest.mark.parametrize("rate", ["10/x", "fast", "0/s", "-1/s", "", None, True, "1/s/s"])
def test_bad_rates_are_refused(make_bucket, rate):
    with pytest.raises(ConfigurationError, match="rate"):
        make_bucket(default_rate=rate)
    bucket = make_bucket()
    with pytest.raises(ConfigurationError, match="rate"):
        bucket.set_rate("k", rate)


@pytest.mark.parametrize("rate", [float("inf"), float("nan"), 0.0, 5e-324, "1" + "0" * 400])
def test_non_finite_rates_are_refused_and_store_nothing(make_bucket, rate):
    # inf used to store "0.0 0.0" as the key's rate, and every later enqueue on it raised.
    bucket = make_bucket()
    with pytest.raises(ConfigurationError, match="rate"):
        bucket.set_rate("k", rate)
    with pytest.raises(ConfigurationError, match="burst"):
        bucket.set_rate("k", "10/s", burst=float("inf"))
    assert bucket.client.hgetall(bucket.keys("rates")) == {}
    assert bucket.enqueue("k", 1)
    assert bucket.dequeue().reservation.payload == 1


def test_bad_keys_and_reservations_are_refused(make_bucket):
    bucket = make_bucket()
    other = make_bucket("other")
    for key in ("", None, 5, "a\0b"):
        with pytest.raises(ConfigurationError):
            bucket.enqueue(key, 1)
    assert bucket.stats().enqueued == 0
    other.enqueue("k", 1)
    foreign = other.dequeue().reservation
    with pytest.raises(ReservationError):
        bucket.commit(foreign)
    with pytest.raises(ReservationError):
        bucket.commit("not-an-id")
    assert bucket.commit("123.1") is False  # well-formed but not held
    assert other.commit(foreign) is True
