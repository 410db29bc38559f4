"""Sharded pools and buckets on a real Redis: one logical structure over N hash tags."""

import itertools
import time

import pytest
from redis.crc import key_slot

from celery_redqueue.errors import ConfigurationError, ReservationError
from celery_redqueue.ops.reading import Operations
from celery_redqueue.structures.bucket import LeakyBucket
from celery_redqueue.structures.catalog import open_structure, registered
from celery_redqueue.structures.pool import CappedPool
from celery_redqueue.structures.sharding import (
    SAME_WAKE,
    SLOTS,
    key_shard,
    shard_names,
    validate_shards,
)
from celery_redqueue.tasks.heartbeat import Heartbeat


def make_pool(client, prefix, capacity=30, shards=3, **options):
    return CappedPool(client, "events", capacity, shards=shards, prefix=prefix, **options)


def test_shard_names_spread_over_the_slot_space_and_are_stable():
    names = shard_names("pool", "events", 3)
    assert names == shard_names("pool", "events", 3)
    slots = [key_slot(f"pool:{n}".encode()) for n in names]
    assert [s * 3 // SLOTS for s in slots] == [0, 1, 2]
    assert all(n.startswith(f"events#{i}.") for i, n in enumerate(names))


def test_shards_are_checked():
    with pytest.raises(ConfigurationError, match="shards"):
        CappedPool(None, "events", 2, shards=3)
    with pytest.raises(ConfigurationError, match="shards"):
        LeakyBucket(None, "crawl", shards=0)
    with pytest.raises(ConfigurationError):
        CappedPool(None, "ev{x}", 10, shards=2)


def test_as_many_shards_as_the_capacity_each_hold_one_call(redqueue_redis, redqueue_prefix):
    # The capacity splits as evenly as it divides, so shards == capacity leaves each shard one
    # entry, and one shard more would leave one with none (nothing could ever be stored there).
    assert validate_shards("pool_shards", 3, 3) == 3
    with pytest.raises(ConfigurationError, match=r"pool_shards=4 is more than the capacity 3"):
        validate_shards("pool_shards", 4, 3)
    with pytest.raises(ConfigurationError, match=r"shards=4 is more than the capacity 3"):
        make_pool(redqueue_redis, redqueue_prefix, capacity=3, shards=4)
    pool = make_pool(redqueue_redis, redqueue_prefix, capacity=3, shards=3)
    assert [s.capacity for s in pool.shards] == [1, 1, 1]
    pool.add_many(range(300))
    assert [s.stats().entries for s in pool.shards] == [1, 1, 1]
    stats = pool.stats()
    assert (stats.offered, stats.entries) == (300, 3)
    assert stats.offered == stats.accepted + stats.rejected


def test_capacity_splits_and_each_shard_keeps_a_bottom_k_sample(redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix, capacity=31)
    assert [s.capacity for s in pool.shards] == [11, 10, 10]
    pool.add_many(range(3000))
    per_shard = [s.stats() for s in pool.shards]
    # Every shard received about a third (its share of the capacity) and kept its capacity.
    assert all(800 < s.offered < 1200 for s in per_shard)
    assert [s.entries for s in per_shard] == [11, 10, 10]
    stats = pool.stats()
    assert stats.offered == 3000 and stats.entries == 31 and stats.capacity == 31
    assert stats.offered == stats.accepted + stats.rejected
    kept = []
    while batch := pool.pop(7):
        kept += [item.payload for item in batch.items]
        pool.ack(batch)
    assert len(kept) == 31
    # A uniform sample of 0..2999: neither the first nor the last calls are favoured.
    assert 700 < sum(kept) / len(kept) < 2300
    stats = pool.stats()
    assert stats.accepted == stats.processed + stats.evicted + stats.depth + stats.in_flight


def test_the_registry_lists_the_logical_pool_once_and_reopens_it(redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix, policy="newest", delivery="at_least_once")
    pool.add("x")
    found = registered(redqueue_redis, redqueue_prefix)
    assert [(kind, name) for kind, name, _ in found] == [("pool", "events")]
    settings = found[0][2]
    assert settings["shards"] == 3 and settings["capacity"] == 30
    again = open_structure(redqueue_redis, redqueue_prefix, "pool", "events", settings)
    assert isinstance(again, CappedPool) and again.shards
    assert [s.keys.base for s in again.shards] == [s.keys.base for s in pool.shards]
    assert again.shards[0].at_least_once and again.policy == "newest"
    assert len(again) == 1


def test_coalescing_and_dedupe_meet_on_one_shard(redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix, coalesce=True)
    pool.add_many(["a"] * 50 + ["b"] * 20)
    assert pool.stats().entries == 2
    counts = {}
    while batch := pool.pop(10):
        counts.update({item.payload: item.count for item in batch.items})
        pool.ack(batch)
    assert counts == {"a": 50, "b": 20}

    plain = CappedPool(
        redqueue_redis, "dedupe", 30, shards=3, prefix=redqueue_prefix, dedupe_window=60
    )
    results = [plain.add(i, dedupe_id="same") for i in range(20)]
    assert results[0].kept and all(r.duplicate for r in results[1:])


def test_drains_sweep_round_robin_and_an_empty_sweep_frees_every_flag(
    redqueue_redis, redqueue_prefix
):
    pool = make_pool(redqueue_redis, redqueue_prefix, capacity=3000)
    results = pool.add_many(range(300))
    assert sum(r.drain_needed for r in results) == 1  # one drain job sweeps every shard
    assert all(redqueue_redis.exists(s.keys("drains")) for s in pool.shards)
    shards_seen = []
    popped = 0
    while batch := pool.pop(10):
        shards_seen.append(batch.id.split(":")[0])
        popped += batch.calls
        assert pool.ack(batch)
    assert popped == 300
    # While every shard has work, consecutive batches come from different shards.
    assert all(a != b for a, b in itertools.pairwise(shards_seen[:21]))
    assert not any(redqueue_redis.exists(s.keys("drains")) for s in pool.shards)
    assert pool.add("late").drain_needed  # not stranded: the next call sends a drain
    assert pool.stats().processed == 300


def test_delayed_calls_on_several_shards_ask_for_one_wake_up(redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix)
    started = time.monotonic()
    results = pool.add_many(range(12), delay=0.3)
    # The shards' stores are separate scripts: a stall between them (a busy machine) puts
    # their due times further apart than SAME_WAKE, and then the earlier shard rightly gets a
    # job of its own. The one-wake-up figures hold only for a burst that was one burst.
    one_burst = time.monotonic() - started < SAME_WAKE
    assert all(r.delayed for r in results)
    wakes = [r.wake_in for r in results if r.wake_in is not None]
    assert len(wakes) == 1 and 0 < wakes[0] <= 0.3
    # Only one shard keeps a scheduled wake-up: the job sent for it re-plans the others.
    assert sum(bool(redqueue_redis.exists(s.keys("wake"))) for s in pool.shards) == 1
    batch = pool.pop(100)
    assert not batch and batch.wait is not None and batch.wait <= 0.3
    if one_burst:
        # The job the producer sent covers the earliest shard; later ones released claims.
        assert not batch.schedule
        assert sum(bool(redqueue_redis.exists(s.keys("wake"))) for s in pool.shards) == 1
    time.sleep(0.35)
    got = []
    while batch := pool.pop(100):
        got += [i.payload for i in batch.items]
        pool.ack(batch)
    assert sorted(got) == list(range(12))


def test_dead_letters_reap_and_heartbeat_per_shard(redqueue_redis, redqueue_prefix):
    pool = make_pool(
        redqueue_redis,
        redqueue_prefix,
        capacity=300,
        delivery="at_least_once",
        max_receives=1,
        visibility_timeout=0.2,
    )
    pool.add_many(range(60))
    failed = 0
    while batch := pool.pop(10):
        failed += len(batch.items)
        pool.ack(batch, failures={i: f"ValueError: {i}" for i in range(len(batch.items))})
    assert failed == 60 and pool.stats().dead == 60
    letters = pool.dead_letters(0, 99)
    assert len(letters) == 60 and [x.at for x in letters] == sorted(x.at for x in letters)
    assert sum(len(s.dead_letters(0, 99)) > 0 for s in pool.shards) == 3
    assert pool.requeue_dead(letters[:5]) == 5
    assert pool.requeue_dead(limit=10) == 10
    assert pool.purge_dead() == 45
    assert pool.stats().depth == 15 and pool.stats().purged == 45

    # A held batch is renewed on its own shard; the drain flag on every shard.
    batch = pool.pop(5)
    beat = Heartbeat()
    beat.hold(pool)
    beat.hold(pool, batch.id)
    held = {h.structure.keys.base: h for h in beat._held.values()}
    assert set(held) == {s.keys.base for s in pool.shards}
    shard = pool.shards[int(batch.id.split(":")[0])]
    assert list(held[shard.keys.base].ids) == [batch.id.split(":", 1)[1]]
    assert pool.renew([batch.id]) == []
    beat.drop(pool, batch.id)
    beat.drop(pool)
    assert beat._held == {}

    time.sleep(0.3)  # past the batch timeout: the reaper takes it back
    result = pool.reap()
    assert result.returned + result.dead_lettered == batch.calls > 0  # from one shard
    assert pool.renew([batch.id]) == [batch.id]
    stats = pool.stats()
    assert (
        stats.accepted
        == (stats.processed + stats.failed + stats.evicted + stats.depth + stats.in_flight)
        + stats.lost
        + stats.dead
        + stats.purged
    )


def test_figures_sum_the_shards(redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix, capacity=300)
    pool.add_many(range(90))
    batch = pool.pop(10)
    pool.ack(batch)
    figures = pool.figures()
    assert figures.offered == 90 and figures.depth == 80 and figures.processed == 10
    assert figures.rate_in == pytest.approx(90 / 60)
    assert sum(figures.history.seconds_in) == 90
    assert figures.oldest_age is not None


def test_bucket_keys_live_on_one_shard_and_keep_their_rate(redqueue_redis, redqueue_prefix):
    bucket = LeakyBucket(
        redqueue_redis, "crawl", shards=3, prefix=redqueue_prefix, default_rate="1000/s"
    )
    keys = [f"site{i}.example" for i in range(12)]
    assert len({key_shard(bucket, k) for k in keys}) == 3
    bucket.set_rate("site0.example", "10/s")
    home = bucket.shards[key_shard(bucket, "site0.example")]
    for shard in bucket.shards:
        assert bool(redqueue_redis.hexists(shard.keys("rates"), "site0.example")) == (shard is home)
    assert bucket.key_stats("site0.example").interval == pytest.approx(0.1)
    bucket.enqueue_many([(k, n) for k in keys for n in range(3)])
    assert bucket.key_stats("site3.example").depth == 3
    released = {}
    shards_seen = []
    deadline = time.monotonic() + 10
    while sum(len(v) for v in released.values()) < 36 and time.monotonic() < deadline:
        poll = bucket.dequeue()
        if poll.reservation is None:
            time.sleep(min(poll.wait or 0.01, 0.05))
            continue
        res = poll.reservation
        shards_seen.append(res.id.split(":")[0])
        released.setdefault(res.key, []).append(res.released_at)
        assert bucket.commit(res)
    assert {k: len(v) for k, v in released.items()} == {k: 3 for k in keys}
    # site0 at 10/s: each release at least one interval after the one before (server time).
    times = released["site0.example"]
    assert all(b - a >= 0.1 - 0.002 for a, b in itertools.pairwise(times))
    assert len(set(shards_seen[:6])) == 3
    stats = bucket.stats()
    assert stats.enqueued == 36 and stats.processed == 36 and stats.depth == 0
    assert [(k, n) for k, n, _ in registered(redqueue_redis, redqueue_prefix)] == [
        ("bucket", "crawl")
    ]


def test_bucket_reservations_route_to_their_shard(redqueue_redis, redqueue_prefix):
    bucket = LeakyBucket(
        redqueue_redis,
        "jobs",
        shards=2,
        prefix=redqueue_prefix,
        default_rate="1000/s",
        visibility_timeout=0.2,
        max_receives=2,
    )
    bucket.enqueue_many([(f"k{i}", i) for i in range(6)])
    held = [bucket.dequeue().reservation for _ in range(6)]
    assert all(held)
    assert bucket.retry_later(held[0]) and bucket.dead_letter(held[1], "ValueError: no")
    assert bucket.renew([held[2].id]) == []
    with pytest.raises(ReservationError):
        bucket.shards[0].commit(held[3].id)  # a shard does not take the logical id
    with pytest.raises(ConfigurationError):
        bucket.commit("9:1.1")
    time.sleep(0.3)
    assert bucket.reap().returned == 4  # held[2..5] expired; held[0] was released
    assert len(bucket.dead_letters()) == 1
    assert bucket.requeue_dead() == 1
    stats = bucket.stats()
    assert stats.depth == 6 and stats.in_flight == 0


def test_operations_see_the_logical_structures(redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix, delivery="at_least_once", max_receives=1)
    pool.add_many(range(9))
    batch = pool.pop(3)
    pool.ack(batch, failures={0: "ValueError: x"})
    bucket = LeakyBucket(redqueue_redis, "crawl", shards=3, prefix=redqueue_prefix)
    bucket.enqueue_many([(f"k{i}", i) for i in range(6)] + [("k0", 99)])
    ops = Operations(redqueue_redis, redqueue_prefix)
    assert [t.id for t in ops.targets(fresh=True)] == ["bucket:crawl", "pool:events"]
    view = ops.view(ops.find("pool:events"))
    assert view["figures"].offered == 9 and view["settings"]["shards"] == 3
    page = ops.dead_letters(ops.find("pool:events"))
    assert page["total"] == 1 and page["letters"][0]["error"] == "ValueError: x"
    rows = ops.keys(ops.find("bucket:crawl"), top=3)
    assert rows[0] == {**rows[0], "key": "k0", "depth": 2} and len(rows) == 3
    assert [r["key"] for r in ops.keys(ops.find("bucket:crawl"), query="k5")] == ["k5"]
    ops.set_rate(ops.find("bucket:crawl"), "k1", "3/s")
    assert bucket.key_stats("k1").interval == pytest.approx(1 / 3)


def test_shards_land_on_distinct_cluster_masters(cluster_url, redqueue_prefix):
    from celery_redqueue.redis.client import make_client

    client = make_client(cluster_url)
    try:
        pool = CappedPool(client, "events", 3000, shards=3, prefix=redqueue_prefix)
        nodes = {client.get_node_from_key(s.keys("items")).name for s in pool.shards}
        assert len(nodes) == 3
        pool.add_many(range(300))
        assert pool.add("one more").kept
        taken = 0
        while batch := pool.pop(50):
            taken += batch.calls
            pool.ack(batch)
        assert taken == 301 and pool.stats().processed == 301
        assert pool.figures().offered == 301

        bucket = LeakyBucket(
            client, "crawl", shards=3, prefix=redqueue_prefix, default_rate="1000/s"
        )
        bucket.enqueue_many([(f"k{i}", i) for i in range(30)])
        done = 0
        deadline = time.monotonic() + 10
        while done < 30 and time.monotonic() < deadline:
            reservation = bucket.dequeue().reservation
            if reservation is None:
                time.sleep(0.01)
                continue
            assert bucket.commit(reservation)
            done += 1
        assert bucket.stats().processed == 30
        found = {(k, n) for k, n, _ in registered(client, redqueue_prefix)}
        assert found == {("pool", "events"), ("bucket", "crawl")}
    finally:
        client.close()


@pytest.mark.parametrize("cls", [CappedPool, LeakyBucket])
def test_every_public_method_says_how_it_runs_on_shards(cls):
    # A new method is written once; its decorator (a sharding verb) says how it runs on the
    # shards. One without would run on the logical structure's own keys, which hold nothing.
    shard_free = {
        # No Redis, or nothing of a shard's own: the same on the logical structure.
        "add", "add_many", "enqueue", "enqueue_many", "encode", "encoded_call",
        "heartbeat_interval", "renew_call", "register_once", "requeue_dead", "purge_dead",
        # Routed by hand in sharding.Sharded.
        "heartbeat_shards", "listen", "dead_page", "dead_letters", "figures",
        # Routed by hand in its own body (it reads each shard and merges the rows).
        "debounced",
    }  # fmt: skip
    unrouted = [
        name
        for name in dir(cls)
        if not name.startswith("_")
        and callable(getattr(cls, name))
        and not isinstance(getattr(cls, name), type)
        and not hasattr(getattr(cls, name), "__sharding__")
        and name not in shard_free
    ]
    assert unrouted == []


def test_one_shard_is_the_plain_structure_and_records_no_shards(redqueue_redis, redqueue_prefix):
    pool = CappedPool(redqueue_redis, "plain", 10, shards=1, prefix=redqueue_prefix)
    bucket = LeakyBucket(redqueue_redis, "plain", prefix=redqueue_prefix)
    assert pool.shards is None and bucket.shards is None
    pool.add(1)
    bucket.enqueue("k", 1)
    assert all(
        "shards" not in settings for _, _, settings in registered(redqueue_redis, redqueue_prefix)
    )
    assert pool.keys.base.endswith("{pool:plain}")


def test_resuming_a_key_of_a_sharded_bucket_sends_its_drain_job(redqueue_redis, redqueue_prefix):
    bucket = LeakyBucket(redqueue_redis, "crawl", shards=3, prefix=redqueue_prefix)
    sent = []
    bucket.drain_sender = lambda: sent.append(1)
    bucket.enqueue("site.example", 1)
    bucket.pause("site.example")
    bucket.release_drain()  # the drain job the enqueue asked for was never sent
    assert bucket.resume("site.example") and sent == [1]


def test_a_sharded_ack_tells_the_callers_batch_a_retry_needs_a_drain(
    redqueue_redis, redqueue_prefix
):
    pool = make_pool(redqueue_redis, redqueue_prefix, delivery="at_least_once")
    pool.add(1)
    batch = pool.pop(10)
    pool.release_drain()  # no drain job holds the pool any more
    assert pool.ack(batch, failures={0: "ValueError: x"})
    assert batch.drain_needed  # the retried call waits: the caller sends a drain job
