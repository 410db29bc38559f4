"""CappedPool against a real Redis: policies, accounting, sampling, coalescing, the drain flag."""

import multiprocessing
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from celery_redqueue import (
    CappedPool,
    ConfigurationError,
    RedisUnavailableError,
    SerializationError,
)


def drain_all(pool, n=100):
    seen = []
    while True:
        batch = pool.pop(n)
        if not batch:
            return seen
        seen.extend(item.payload for item in batch.items)
        pool.ack(batch)


def test_reject_keeps_oldest_and_refuses_new(make_pool, assert_identities):
    pool = make_pool(capacity=3, policy="reject")
    results = pool.add_many(range(10))
    assert [r.kept for r in results] == [True] * 3 + [False] * 7
    assert drain_all(pool) == [0, 1, 2]
    stats = pool.stats()
    assert (stats.offered, stats.accepted, stats.rejected, stats.processed) == (10, 3, 7, 3)
    assert_identities(stats)


def test_newest_keeps_newest_and_evicts_oldest(make_pool, assert_identities):
    pool = make_pool(capacity=3, policy="newest")
    results = pool.add_many(range(10))
    assert all(r.kept for r in results)
    assert [r.evicted for r in results] == [False] * 3 + [True] * 7
    assert drain_all(pool) == [7, 8, 9]
    stats = pool.stats()
    assert (stats.accepted, stats.evicted, stats.processed) == (10, 7, 3)
    assert_identities(stats)


def test_sample_never_exceeds_capacity_and_counts_exactly(make_pool, assert_identities):
    pool = make_pool(capacity=50)
    for start in range(0, 2000, 100):
        pool.add_many(range(start, start + 100))
        stats = pool.stats()
        assert stats.entries <= 50
        assert_identities(stats)
    kept = drain_all(pool)
    assert len(kept) == 50 and len(set(kept)) == 50
    stats = pool.stats()
    assert stats.offered == 2000 and stats.processed == 50
    assert stats.rejected + stats.evicted == 1950
    assert_identities(stats)


def chi_square_over_deciles(kept, offered):
    counts = [0] * 10
    for value in kept:
        counts[value * 10 // offered] += 1
    expected = len(kept) / 10
    return sum((c - expected) ** 2 / expected for c in counts)


# 9 degrees of freedom: P(chi2 > 33.7) = 1e-4, so a uniform sample fails 1 run in 10,000.
CHI2_CRITICAL = 33.7


@pytest.mark.parametrize(
    "policy, uniform", [("sample", True), ("newest", False), ("reject", False)]
)
def test_sample_policy_keeps_a_uniform_sample(make_pool, policy, uniform):
    """Sample must spread its 500 survivors evenly over 10,000 offers; newest/oldest must not."""
    offered = 10_000
    pool = make_pool(name=f"u-{policy}", capacity=500, policy=policy)
    for start in range(0, offered, 1000):
        pool.add_many(range(start, start + 1000))
    kept = drain_all(pool, n=500)
    assert len(kept) == 500
    statistic = chi_square_over_deciles(kept, offered)
    assert (statistic < CHI2_CRITICAL) is uniform, statistic


def test_sample_pops_in_random_order(make_pool):
    pool = make_pool(capacity=1000)
    pool.add_many(range(1000))
    popped = drain_all(pool, n=1000)
    assert sorted(popped) == list(range(1000))
    assert popped != list(range(1000))


def test_coalescing_merges_equal_payloads_and_counts_calls(make_pool, assert_identities):
    pool = make_pool(capacity=2, coalesce=True, policy="reject")
    results = pool.add_many(["a", "b", "a", {"k": 1, "j": 2}, "a", {"j": 2, "k": 1}])
    assert [r.merged for r in results] == [False, False, True, False, True, False]
    assert [r.kept for r in results] == [True, True, True, False, True, False]
    batch = pool.pop(10)
    assert sorted((i.payload, i.count) for i in batch.items) == [("a", 3), ("b", 1)]
    b_index = next(i for i, item in enumerate(batch.items) if item.payload == "b")
    pool.ack(batch, failures={b_index: "ValueError: b"})
    stats = pool.stats()
    assert (stats.offered, stats.accepted, stats.rejected) == (6, 4, 2)
    assert (stats.processed, stats.failed, stats.entries) == (3, 1, 0)
    assert_identities(stats)


def test_coalescing_eviction_counts_every_merged_call(make_pool, assert_identities):
    pool = make_pool(capacity=1, coalesce=True, policy="newest")
    pool.add_many(["old", "old", "old", "new"])
    stats = pool.stats()
    assert (stats.evicted, stats.depth, stats.entries) == (3, 1, 1)
    assert_identities(stats)
    assert [(i.payload, i.count) for i in pool.pop(5).items] == [("new", 1)]


def test_equal_payloads_stay_apart_without_coalescing(make_pool):
    pool = make_pool(capacity=10, policy="newest")
    pool.add_many(["x", "x", "x"])
    assert drain_all(pool) == ["x", "x", "x"]


def test_drain_flag_is_armed_once_and_cleared_only_by_an_empty_pop(make_pool):
    pool = make_pool(capacity=100)
    first = pool.add_many(range(10))
    assert [r.drain_needed for r in first] == [True] + [False] * 9
    assert not pool.add("more").drain_needed
    batch = pool.pop(100)
    assert len(batch) == 11
    # A call arriving while the last batch is processed sees the flag and sends nothing...
    assert not pool.add("late").drain_needed
    pool.ack(batch)
    # ...and the drain's next pop finds it: nothing is stranded.
    late = pool.pop(100)
    assert [i.payload for i in late.items] == ["late"]
    pool.ack(late)
    assert not pool.pop(100)
    assert pool.stats().drains == 0
    assert pool.add("next").drain_needed


def _produce(url, prefix, worker, count, broker_key):
    client = redis.Redis.from_url(url)
    pool = CappedPool(client, "race", 20, prefix=prefix)
    for i in range(count):
        if i % 3:
            result = pool.add({"w": worker, "i": i})
        else:
            result = pool.add_many([{"w": worker, "i": i, "m": 1}])[0]
        if result.drain_needed:
            client.rpush(broker_key, "drain")
        if i % 50 == 0:
            time.sleep(0.001)


def test_concurrent_producers_never_strand_a_call(
    redqueue_server_url, redqueue_redis, redqueue_prefix, assert_identities
):
    """Producers in four processes, one consumer that only runs when a drain job was 'sent'.

    The broker is simulated by a Redis list of drain tokens: the consumer works only after
    taking a token, exactly like a drain job. When everything settles the pool must be empty;
    a call stranded by the flag race would stay in it.
    """
    broker_key = f"{redqueue_prefix}:fake-broker"
    pool = CappedPool(redqueue_redis, "race", 20, prefix=redqueue_prefix)
    observed = []
    stop = threading.Event()

    def consume():
        client = redis.Redis.from_url(redqueue_server_url)
        local = CappedPool(client, "race", 20, prefix=redqueue_prefix)
        while not stop.is_set():
            if client.blpop([broker_key], timeout=0.2) is None:
                continue
            while True:
                batch = local.pop(7)
                if not batch:
                    break
                local.ack(batch, failures={0: "x"} if len(batch) % 2 else None)
                observed.append(local.stats())

    consumer = threading.Thread(target=consume)
    consumer.start()
    ctx = multiprocessing.get_context("spawn")
    producers = [
        ctx.Process(
            target=_produce, args=(redqueue_server_url, redqueue_prefix, w, 1500, broker_key)
        )
        for w in range(4)
    ]
    for p in producers:
        p.start()
    while any(p.is_alive() for p in producers):
        assert_identities(pool.stats())
        assert pool.stats().entries <= 20
        time.sleep(0.01)
    for p in producers:
        p.join()
        assert p.exitcode == 0
    deadline = time.monotonic() + 30
    while redqueue_redis.llen(broker_key) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    stop.set()
    consumer.join()
    stats = pool.stats()
    assert stats.offered == 6000
    assert stats.depth == 0 and stats.entries == 0 and stats.in_flight == 0
    assert stats.processed + stats.failed > 0
    assert_identities(stats)
    for snapshot in observed:
        assert_identities(snapshot)


def test_fan_out_is_bounded_by_max_drains(make_pool):
    pool = make_pool(capacity=1000, max_drains=3)
    pool.add_many(range(1000))
    fan_outs = 0
    for _ in range(5):
        batch = pool.pop(10)
        fan_outs += batch.fan_out
    assert fan_outs == 2  # the first drain plus two more make three
    assert pool.stats().drains == 3


def test_reaper_counts_a_dead_drains_batch_as_lost(make_pool, assert_identities):
    pool = make_pool(capacity=10, visibility_timeout=0.05)
    pool.add_many(range(4))
    batch = pool.pop(3)
    time.sleep(0.1)
    assert pool.reap().lost == 3
    assert pool.ack(batch) is False  # too late: already counted as lost
    stats = pool.stats()
    assert (stats.lost, stats.processed, stats.in_flight, stats.depth) == (3, 0, 0, 1)
    assert_identities(stats)


@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.parametrize("policy", ["sample", "newest"])
def test_a_reap_asked_for_lost_calls_returns_their_payloads(make_pool, policy, shards):
    """Issue 29: whoever waits on a lost call must be told, so the reaper can name them."""
    pool = make_pool(capacity=100, visibility_timeout=0.05, policy=policy, shards=shards)
    pool.add_many([{"call": i} for i in range(6)])
    popped = [item.payload for _ in range(3) for item in pool.pop(2).items]
    left = len(pool)
    time.sleep(0.1)
    result = pool.reap(lost_calls=True)
    assert result.lost == len(popped)
    assert sorted(result.lost_calls, key=str) == sorted(popped, key=str)
    assert len(pool) == left  # nothing else touched
    # Asked again, or not asked at all: nothing is named twice, nothing when not asked.
    assert pool.reap(lost_calls=True).lost_calls == ()
    popped = pool.pop(10)
    time.sleep(0.1)
    quiet = pool.reap()
    assert quiet.lost == popped.calls and quiet.lost_calls == ()


@pytest.mark.parametrize("policy", ["sample", "newest", "reject"])
def test_a_reap_names_the_calls_a_returned_batch_could_not_keep(make_pool, policy):
    """At least once, a returned call competes for room: what the full pool does not keep (the
    returned call refused, or the call it pushed out) is named like a lost call."""
    pool = make_pool(capacity=2, policy=policy, delivery="at_least_once", visibility_timeout=0.05)
    pool.add_many(["a", "b"])
    pool.pop(2)
    pool.add_many(["c", "d"])
    time.sleep(0.1)
    result = pool.reap(lost_calls=True)
    stats = pool.stats()
    assert stats.evicted == len(result.lost_calls) == 2
    left = []
    while batch := pool.pop(10):  # a returned call is popped alone
        left += [item.payload for item in batch.items]
    assert sorted(left + list(result.lost_calls)) == ["a", "b", "c", "d"]


def test_a_lost_batch_with_an_unreadable_record_is_counted_without_its_calls(
    make_pool, redqueue_redis
):
    pool = make_pool(capacity=10, visibility_timeout=0.05)
    pool.add_many(range(3))
    batch = pool.pop(3)
    redqueue_redis.hset(pool.keys("inflight_items"), batch.id, b"not msgpack")
    time.sleep(0.1)
    result = pool.reap(lost_calls=True)
    assert (result.lost, result.lost_calls) == (3, ())
    assert pool.stats().lost == 3


@pytest.mark.parametrize("shards", [1, 2])
def test_a_pool_naming_evictions_names_each_call_it_pushed_out(make_pool, shards):
    pool = make_pool(capacity=4, policy="newest", name_evicted=True, shards=shards)
    receipts = [pool.add({"call": i}) for i in range(10)]
    receipts += pool.add_many([{"call": i} for i in range(10, 14)])
    named = [p["call"] for r in receipts for p in r.evicted_calls]
    assert all(bool(r.evicted_calls) == r.evicted for r in receipts)
    left = []
    while batch := pool.pop(10):  # a sharded pool pops one shard at a time
        left += [item.payload["call"] for item in batch.items]
    # Every call is either still in the pool or named once by the call that pushed it out.
    assert sorted(named + left) == list(range(14)) and len(named) == pool.stats().evicted
    assert len(left) == 4


def test_a_pool_not_naming_evictions_keeps_its_lean_store(make_pool):
    pool = make_pool(capacity=1, policy="newest")
    pool.add(1)
    receipt = pool.add(2)
    assert receipt.evicted and receipt.evicted_calls == ()


def test_reaper_leaves_live_batches_alone(make_pool):
    pool = make_pool(capacity=10)
    pool.add_many(range(4))
    batch = pool.pop(3)
    assert pool.reap().lost == 0
    assert pool.ack(batch) is True
    assert pool.stats().processed == 3


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "10"])
def test_bad_capacity_is_refused(redqueue_redis, capacity):
    with pytest.raises(ConfigurationError, match="capacity"):
        CappedPool(redqueue_redis, "p", capacity)


def test_bad_policy_and_names_are_refused(redqueue_redis):
    with pytest.raises(ConfigurationError, match="policy"):
        CappedPool(redqueue_redis, "p", 10, policy="oldest")
    with pytest.raises(ConfigurationError, match="must not contain"):
        CappedPool(redqueue_redis, "a{b}", 10)
    with pytest.raises(ConfigurationError, match="prefix"):
        CappedPool(redqueue_redis, "p", 10, prefix="x{y}")


def test_unserializable_payload_raises_and_stores_nothing(make_pool):
    pool = make_pool()
    with pytest.raises(SerializationError):
        pool.add(object())
    with pytest.raises(SerializationError):
        pool.add_many([1, 2, object()])
    assert pool.stats().offered == 0
    assert pool.stats().entries == 0


def test_unreachable_redis_raises_a_package_error():
    # No retries: redis-py 8 retries a refused connection with jittered backoff (6-19 s here).
    client = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    pool = CappedPool(client, "p", 10)
    with pytest.raises(RedisUnavailableError):
        pool.add(1)
    with pytest.raises(RedisUnavailableError):
        pool.stats()


def test_keys_share_one_hash_tag(make_pool, redqueue_redis, redqueue_prefix):
    pool = make_pool(name="events", coalesce=True)
    pool.add("x")
    pool.pop(1)
    keys = {k.decode() for k in redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")}
    keys.discard(f"{redqueue_prefix}:registry")  # the registry lists structures, outside them
    assert keys and all(k.startswith(f"{redqueue_prefix}:{{pool:events}}:") for k in keys)


@pytest.mark.parametrize("policy", ["reject", "newest", "sample"])
@pytest.mark.parametrize("coalesce", [False, True])
def test_single_calls_count_as_a_batch_does(make_pool, assert_identities, policy, coalesce):
    # Calls with no dedupe id and no delay run pool_add's lean case, one by one or as a batch;
    # a call with a dedupe id its general path. All must keep, evict, merge, refuse and count alike,
    # and ask for one drain job.
    single = make_pool("single", capacity=3, policy=policy, coalesce=coalesce)
    batch = make_pool("batch", capacity=3, policy=policy, coalesce=coalesce)
    general = make_pool("general", capacity=3, policy=policy, coalesce=coalesce, dedupe_window=60)
    payloads = [i % 4 for i in range(10)]
    one_by_one = [single.add(p) for p in payloads]
    together = batch.add_many(payloads)
    through_pool_add = [general.add(p, dedupe_id=f"id-{i}") for i, p in enumerate(payloads)]
    pools = (single, batch, general)
    for results in (one_by_one, together, through_pool_add):
        assert sum(r.drain_needed for r in results) == 1 and results[0].drain_needed
    if policy != "sample":  # sample keeps by random score: the same counts, not the same calls
        outcomes = [
            [(r.kept, r.evicted, r.merged) for r in rs] for rs in (together, through_pool_add)
        ]
        assert outcomes[0] == outcomes[1] == [(r.kept, r.evicted, r.merged) for r in one_by_one]
        assert sorted(drain_all(single)) == sorted(drain_all(batch)) == sorted(drain_all(general))
    names = ("offered", "accepted", "rejected", "evicted", "depth", "processed")
    if policy == "sample":  # which calls a random score keeps or evicts differs run to run
        names = ("offered", "processed")
    a, b, c = (pool.stats() for pool in pools)
    assert {n: getattr(a, n) for n in names} == {n: getattr(b, n) for n in names}
    assert {n: getattr(a, n) for n in names} == {n: getattr(c, n) for n in names}
    assert a.offered == 10 and a.accepted + a.rejected == 10
    for stats in (a, b, c):
        assert_identities(stats)


def test_gather_waits_for_a_batch_and_schedules_one_look(make_pool, redqueue_redis):
    pool = make_pool(capacity=100)
    assert pool.gather(3, 10.0).wait == 0  # an empty pool: pop (the pop ends the drain)
    pool.add_many(range(2))
    first = pool.gather(3, 10.0, check_every=2.0)
    assert 0 < first.wait <= 2.0 and first.schedule
    # The flag is held over the wait (calls arriving meanwhile send no drain job), and a second
    # drain that asks finds the look scheduled already.
    assert redqueue_redis.pttl(pool.keys("drains")) > 2000
    assert redqueue_redis.exists(pool.keys("wake"))
    again = pool.gather(3, 10.0, check_every=2.0)
    assert 0 < again.wait <= 2.0 and not again.schedule
    pool.add(2)
    assert pool.gather(3, 10.0).wait == 0  # min_calls reached: pop now
