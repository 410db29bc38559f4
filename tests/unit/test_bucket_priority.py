"""Priority tiers on leaky buckets (issue 32): a call's tier 0-9, higher first within a key and
across keys, each key still at its own limits, and a lower tier never waits past the bound."""

import time

import pytest

from celery_redqueue import LeakyBucket
from celery_redqueue.errors import ConfigurationError, InvalidArgumentError


def tiered(client, prefix, name, **options):
    options.setdefault("default_rate", "1000/s")
    options.setdefault("priority_bound", 60.0)
    return LeakyBucket(client, name, prefix=prefix, **options)


def take(bucket, until=5.0):
    end = time.monotonic() + until
    while time.monotonic() < end:
        reservation = bucket.dequeue().reservation
        if reservation is not None:
            return reservation
        time.sleep(0.002)
    raise AssertionError("nothing released")


def drain(bucket, until=10.0):
    """Every call released, in order: (key, payload)."""
    got, end = [], time.monotonic() + until
    while time.monotonic() < end:
        reservation = bucket.dequeue().reservation
        if reservation is None:
            if bucket.stats().depth == 0:
                return got
            time.sleep(0.002)
            continue
        got.append((reservation.key, reservation.payload))
        bucket.commit(reservation)
    return got


def test_higher_tiers_first_within_a_key(redqueue_redis, redqueue_prefix):
    bucket = tiered(redqueue_redis, redqueue_prefix, "in-key")
    bucket.pause("k")
    for n, tier in enumerate([0, 3, 0, 9, 3, 0, 9]):
        bucket.enqueue("k", f"{tier}-{n}", priority=tier)
    bucket.resume("k")
    assert [p for _, p in drain(bucket)] == ["9-3", "9-6", "3-1", "3-4", "0-0", "0-2", "0-5"]
    stats = bucket.stats()
    assert (stats.enqueued, stats.processed, stats.depth) == (7, 7, 0)
    assert redqueue_redis.zcard(bucket.keys("urgent")) == 0  # nothing left behind
    assert redqueue_redis.hlen(bucket.keys("heads")) == 0


def test_higher_tiers_first_across_keys(redqueue_redis, redqueue_prefix):
    bucket = tiered(redqueue_redis, redqueue_prefix, "across")
    for key in ("a", "b", "c"):
        bucket.pause(key)
    bucket.enqueue_many([("a", "a0"), ("a", "a1")])  # tier 0, eligible longest
    bucket.enqueue("b", "b5", priority=5)
    bucket.enqueue("c", "c8", priority=8)
    for key in ("a", "b", "c"):
        bucket.resume(key)
    assert [p for _, p in drain(bucket)] == ["c8", "b5", "a0", "a1"]


def test_each_key_keeps_its_rate(redqueue_redis, redqueue_prefix):
    bucket = tiered(redqueue_redis, redqueue_prefix, "rate", default_rate="5/s")
    start = time.monotonic()
    for tier in (0, 9, 9, 9):
        bucket.enqueue("k", tier, priority=tier)
    order = drain(bucket)
    assert [p for _, p in order] == [9, 9, 9, 0]
    assert time.monotonic() - start >= 0.55  # 4 calls at 5/s: 3 intervals of 0.2 s


def test_a_lower_tier_waits_no_longer_than_the_bound(redqueue_redis, redqueue_prefix):
    # A key kept busy by tier-9 calls at its rate: its tier-0 call goes once it has waited the
    # bound (0.5 s), not after every tier-9 call.
    bucket = tiered(
        redqueue_redis, redqueue_prefix, "bound", default_rate="20/s", priority_bound=0.5
    )
    bucket.pause("k")
    bucket.enqueue("k", "low", priority=0)
    for n in range(60):
        bucket.enqueue("k", n, priority=9)
    bucket.resume("k")
    order = [p for _, p in drain(bucket, until=20)]
    at = order.index("low")
    # 20/s: the bound is about 10 releases; well before the last of the 60.
    assert 1 <= at <= 30, order


def test_the_reaper_and_a_retry_put_a_call_back_in_its_tier(redqueue_redis, redqueue_prefix):
    bucket = tiered(redqueue_redis, redqueue_prefix, "back", visibility_timeout=0.5)
    bucket.pause("k")
    bucket.enqueue("k", "hi", priority=7)
    bucket.enqueue("k", "lo")
    bucket.resume("k")
    first = take(bucket)
    assert first.payload == "hi"
    assert bucket.retry_later(first)
    assert take(bucket).payload == "hi"  # back at the head of tier 7
    time.sleep(0.7)
    assert bucket.reap().returned == 1
    assert [p for _, p in drain(bucket)] == ["hi", "lo"]


def test_a_key_full_counts_every_tier(redqueue_redis, redqueue_prefix):
    bucket = tiered(redqueue_redis, redqueue_prefix, "cap", max_depth=2)
    assert bucket.enqueue("k", 1, priority=2).kept
    assert bucket.enqueue("k", 2).kept
    assert not bucket.enqueue("k", 3, priority=9).kept
    assert bucket.key_stats("k").depth == 2


def test_priority_needs_a_bound_and_a_tier_in_range(redqueue_redis, redqueue_prefix):
    plain = LeakyBucket(redqueue_redis, "plain", prefix=redqueue_prefix)
    with pytest.raises(InvalidArgumentError, match="priority tiers"):
        plain.enqueue("k", 1, priority=3)
    bucket = tiered(redqueue_redis, redqueue_prefix, "range")
    for bad in (-1, 10, 2.5, True, "3"):
        with pytest.raises(InvalidArgumentError):
            bucket.enqueue("k", 1, priority=bad)
    assert bucket.stats().enqueued == 0
    with pytest.raises(ConfigurationError):
        tiered(redqueue_redis, redqueue_prefix, "b", priority_bound=0)
