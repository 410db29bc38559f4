"""The lean producer path of pools and buckets keeps what the per-call path kept: statuses,
counters, the ages index, the flow rings, unique ids, and dedupe ids only where they are used."""

import re
import time

from celery_redqueue.structures.figures import unfold


def assert_identities(stats):
    assert stats.offered == stats.accepted + stats.rejected, stats
    terminal = (
        stats.processed + stats.failed + stats.evicted + stats.lost + stats.dead + stats.purged
    )
    assert stats.accepted == terminal + stats.depth + stats.in_flight, stats


def ring_totals(client, flow_key, kind):
    """Sum of the per-second fields and of the per-minute fields (rolled seconds included) of
    ``kind``; every field must be a number."""
    per_second = per_minute = 0
    for field, value in client.hgetall(flow_key).items():
        name, text = field.decode(), value.decode()
        if not name.startswith(kind + ":"):
            continue
        assert re.fullmatch(r"\d+", text), (name, text)
        if name.startswith(kind + ":m"):
            per_minute += int(text)
        else:
            per_second += int(text)
    return per_second, per_second + per_minute


def test_a_batch_that_fits_is_kept_whole_with_ages_and_flow(make_pool, redqueue_redis):
    pool = make_pool(capacity=100)
    results = pool.add_many(range(50))
    assert all(r.kept and not r.evicted and not r.merged for r in results)
    assert sum(r.drain_needed for r in results) == 1 and results[0].drain_needed
    stats = pool.stats()
    assert (stats.offered, stats.accepted, stats.depth, stats.entries) == (50, 50, 50, 50)
    assert_identities(stats)
    # One ages member per arrival slot, not per call: the batch arrived in one step.
    assert redqueue_redis.zcard(pool.keys("ages")) == 1
    assert sum(map(int, redqueue_redis.hvals(pool.keys("arrivals")))) == 50
    assert pool.figures().oldest_age is not None
    assert ring_totals(redqueue_redis, pool.keys("flow"), "in") == (50, 50)


def test_a_batch_keeps_arrival_order_in_fifo_policies(make_pool):
    pool = make_pool(capacity=10, policy="reject")
    pool.add_many(["a", "b", "c"])
    pool.add("d")
    batch = pool.pop(10)
    assert [item.payload for item in batch.items] == ["a", "b", "c", "d"]


def test_a_batch_that_does_not_fit_is_admitted_call_by_call(make_pool):
    pool = make_pool(capacity=10, policy="newest")
    pool.add_many(range(5))
    results = pool.add_many(range(5, 20))
    assert [r.evicted for r in results] == [False] * 5 + [True] * 10
    stats = pool.stats()
    assert (stats.offered, stats.accepted, stats.evicted, stats.entries) == (20, 20, 10, 10)
    assert_identities(stats)
    batch = pool.pop(100)
    assert [item.payload for item in batch.items] == list(range(10, 20))


def test_ids_stay_unique_across_batches_and_single_calls(make_pool, redqueue_redis):
    pool = make_pool(capacity=100)
    pool.add_many(["same"] * 3)
    pool.add("same")
    pool.add_many(["same"] * 2, delay=60)
    last = int(redqueue_redis.hget(pool.keys("stats"), "seq"))
    batch = pool.pop(100)
    ids = [int(item.id, 16) for item in batch.items]
    assert len(set(ids)) == 4 and max(ids) < last


def test_calls_without_dedupe_ids_leave_the_dedupe_set_alone(make_pool, redqueue_redis):
    pool = make_pool(capacity=100, dedupe_window=0.05)
    pool.add("x")
    pool.add_many(["y", "z"])
    assert not redqueue_redis.exists(pool.keys("dedupe"))
    assert pool.add("a", dedupe_id="order-1").kept
    assert pool.add("a", dedupe_id="order-1").duplicate
    time.sleep(0.1)
    # The next call that records an id forgets the expired ones.
    assert pool.add("b", dedupe_id="order-2").kept
    assert redqueue_redis.zrange(pool.keys("dedupe"), 0, -1) == [b"order-2"]


def test_bucket_ages_point_at_the_head_item(make_bucket, redqueue_redis):
    bucket = make_bucket(max_depth=1, overflow="drop_oldest")
    bucket.enqueue("k", "first")
    first_at = redqueue_redis.zscore(bucket.keys("ages"), "k")
    time.sleep(0.02)
    assert bucket.enqueue("k", "second").evicted_oldest
    second_at = redqueue_redis.zscore(bucket.keys("ages"), "k")
    assert second_at > first_at
    stats = bucket.stats()
    assert (stats.enqueued, stats.evicted, stats.depth) == (2, 1, 1)
    assert ring_totals(redqueue_redis, bucket.keys("flow"), "in") == (2, 2)


def test_bucket_counts_only_what_moved(make_bucket, redqueue_redis):
    bucket = make_bucket(max_depth=1)
    assert bucket.enqueue("k", 1).kept
    assert not bucket.enqueue("k", 2).kept
    raw = {k.decode(): int(v) for k, v in redqueue_redis.hgetall(bucket.keys("stats")).items()}
    counters = unfold(raw)  # the single-item script folds enqueued and depth into one field
    assert counters["enqueued"] == 1 and counters["rejected"] == 1 and counters["depth"] == 1
    assert "delayed" not in counters and "duplicates" not in counters
