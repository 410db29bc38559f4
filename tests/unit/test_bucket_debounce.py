"""Debounce on leaky buckets (issue 33): calls with one dedupe id collapse into one delayed
call of their key, the latest payload wins, and it is released with the count of the calls it
merges (`Reservation.count`), at its key's rate like any call."""

import time

import pytest

from celery_redqueue import LeakyBucket
from celery_redqueue.errors import ConfigurationError


def wait_take(bucket, until=10.0):
    end = time.monotonic() + until
    while time.monotonic() < end:
        reservation = bucket.dequeue().reservation
        if reservation:
            return reservation
        time.sleep(0.02)
    return None


def bucket_of(client, prefix, name, **options):
    options.setdefault("default_rate", "100/s")
    return LeakyBucket(client, name, prefix=prefix, **options)


def test_latest_payload_wins_with_the_count(redqueue_redis, redqueue_prefix):
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "d", debounce=0.3)
    receipts = [bucket.enqueue("site-a", i, dedupe_id="doc") for i in range(5)]
    bucket.enqueue("site-b", "other", dedupe_id="other")
    assert receipts[0].delayed and all(r.merged and r.kept for r in receipts[1:])
    stats = bucket.stats()
    assert (stats.delayed, stats.debounced, stats.enqueued) == (2, 4, 0)
    assert bucket.dequeue().reservation is None  # held: nothing due yet
    got = {}
    while len(got) < 2 and (reservation := wait_take(bucket)):
        got[reservation.key] = (reservation.payload, reservation.count)
        bucket.commit(reservation)
    assert got == {"site-a": (4, 5), "site-b": ("other", 1)}
    stats = bucket.stats()
    assert (stats.enqueued, stats.processed, stats.delayed, stats.debounced) == (2, 2, 0, 4)
    assert stats.enqueued == stats.depth + stats.in_flight + stats.processed + stats.dead
    # The record is forgotten once due: the next call starts a new window.
    assert redqueue_redis.hlen(bucket.keys("debounce")) == 0
    assert bucket.enqueue("site-a", 9, dedupe_id="doc").delayed


def test_the_window_restarts_on_each_call(redqueue_redis, redqueue_prefix):
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "w", debounce=1.5)
    calls, end = 0, time.monotonic() + 2.0
    while time.monotonic() < end:  # calls 0.1 s apart: never quiet for 1.5 s
        bucket.enqueue("k", calls, dedupe_id="doc")
        calls += 1
        assert bucket.dequeue().reservation is None  # past the first call's window too
        time.sleep(0.1)
    reservation = wait_take(bucket)
    assert reservation is not None and (reservation.count, reservation.payload) == (
        calls,
        calls - 1,
    )


def test_max_wait_caps_a_never_quiet_key(redqueue_redis, redqueue_prefix):
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "m", debounce=5.0, debounce_max_wait=0.3)
    calls, reservation = 0, None
    end = time.monotonic() + 10
    while not reservation and time.monotonic() < end:
        bucket.enqueue("k", calls, dedupe_id="doc")
        calls += 1
        time.sleep(0.05)
        reservation = bucket.dequeue().reservation
    # Due while calls kept coming (each pushes the 5 s window), with all of them so far.
    assert reservation and (reservation.count, reservation.payload) == (calls, calls - 1)


def test_costs_travel_with_the_latest_call(redqueue_redis, redqueue_prefix):
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "c", debounce=0.1, cost_rate="1000/s")
    bucket.enqueue("k", "a", dedupe_id="doc", cost=5)
    bucket.enqueue("k", "b", dedupe_id="doc", cost=7)
    reservation = wait_take(bucket)
    assert (reservation.payload, reservation.count, reservation.cost) == ("b", 2, 7.0)


def test_a_resent_call_changes_nothing(redqueue_redis, redqueue_prefix):
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "r", debounce=5.0)
    args = [5000, 0, "call-1", "k", bucket.encode("a"), "doc", ""]
    first = bucket._run("bucket_debounce", args)
    again = bucket._run("bucket_debounce", args)
    assert first == again
    assert redqueue_redis.zcard(bucket.keys("scheduled")) == 1
    stats = bucket.stats()
    assert (stats.delayed, stats.debounced) == (1, 0)


def test_a_dead_lettered_debounced_call_keeps_its_count(redqueue_redis, redqueue_prefix):
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "x", debounce=0.1)
    for i in range(3):
        bucket.enqueue("k", i, dedupe_id="doc")
    bucket.dead_letter(wait_take(bucket), "boom")
    (letter,) = bucket.dead_letters()
    assert (letter.payload, letter.count, letter.error) == (2, 3, "boom")
    assert bucket.requeue_dead() == 1
    reservation = wait_take(bucket)
    assert (reservation.payload, reservation.count) == (2, 3)


def test_bad_options_are_refused(redqueue_redis, redqueue_prefix):
    with pytest.raises(ConfigurationError):
        bucket_of(redqueue_redis, redqueue_prefix, "b", debounce_max_wait=1.0)
    with pytest.raises(ConfigurationError):
        bucket_of(redqueue_redis, redqueue_prefix, "b", debounce=-1)
    bucket = bucket_of(redqueue_redis, redqueue_prefix, "b", debounce=1.0)
    with pytest.raises(ConfigurationError):
        bucket.enqueue("k", 1, dedupe_id="doc", delay=1.0)
    assert redqueue_redis.exists(bucket.keys("scheduled")) == 0  # nothing stored


@pytest.mark.parametrize(
    "options",
    [
        {"bucket_debounce": 1.0},
        {"bucket_debounce": 1.0, "bucket_dedupe_key": str, "bucket_results": True},
        {"bucket_debounce_max_wait": 1.0, "bucket_dedupe_key": str},
        {"bucket_debounce": -1.0, "bucket_dedupe_key": str},
        {"bucket_debounce": 1.0, "bucket_dedupe_key": str, "bucket_count_kwarg": "not a name"},
    ],
)
def test_bad_task_options_are_refused_at_decoration(options):
    from celery_redqueue import BucketTask

    with pytest.raises(ConfigurationError):
        type("Bad", (BucketTask,), {"bucket_key": "k", **options})


def test_a_debounced_body_without_count_is_refused_at_decoration():
    from celery_redqueue import BucketTask

    def no_count(doc): ...

    def with_count(doc, count=1): ...

    options = {"bucket_key": "doc", "bucket_debounce": 1.0, "bucket_dedupe_key": str}
    with pytest.raises(ConfigurationError, match="count"):
        type("T", (BucketTask,), {"run": staticmethod(no_count), **options})
    type("T", (BucketTask,), {"run": staticmethod(with_count), **options})
