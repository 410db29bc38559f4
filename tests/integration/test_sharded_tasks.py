"""Sharded pooled and bucket tasks (pool_shards / bucket_shards) with real Celery workers."""

import itertools
import time
from collections import defaultdict

import pytest

from celery_redqueue import BucketTask, ConfigurationError, PoolTask, bucket_task, pool_task
from celery_redqueue.structures.bucket import LeakyBucket
from celery_redqueue.structures.pool import CappedPool
from celery_redqueue.structures.sharding import key_shard

from .conftest import running_worker


def test_sharded_pool_task_drains_every_shard(app, redqueue_redis, wait_for):
    done = []

    @app.task(base=PoolTask, pool_size=3000, pool_shards=3, pool_batch_size=20)
    def record(i):
        done.append(i)

    receipts = [record.delay(i) for i in range(300)]
    assert all(r.kept for r in receipts)
    pool = record.pool
    assert isinstance(pool, CappedPool) and pool.shards
    assert all(s.stats().offered > 0 for s in pool.shards)
    with running_worker(app):
        wait_for(lambda: pool.stats().processed == 300, message="300 processed")
        # After the last call, every shard's drain flag was released by an empty pop.
        wait_for(lambda: pool.stats().drains == 0, message="every flag released")
        assert record.delay("late").drain_needed
        wait_for(lambda: pool.stats().processed == 301, message="the late call drained")
    assert sorted(done[:-1]) == list(range(300)) and done[-1] == "late"
    stats = pool.stats()
    assert stats.offered == stats.accepted == stats.processed == 301


def test_sharded_bucket_task_keeps_each_key_rate_exact(app, redqueue_redis, wait_for):
    released = defaultdict(list)

    @app.task(base=BucketTask, bind=True, bucket_key="site", bucket_rate="20/s", bucket_shards=3)
    def fetch(self, site, n):
        released[site].append(self.reservation.released_at)

    bucket = fetch.bucket
    assert isinstance(bucket, LeakyBucket) and bucket.shards
    sites = [f"site{i}.example" for i in range(6)]
    assert len({key_shard(bucket, s) for s in sites}) == 3
    fetch.bucket.set_rate("site0.example", "10/s")
    for n in range(8):
        for site in sites:
            fetch.delay(site, n)
    with running_worker(app, concurrency=1):
        wait_for(lambda: bucket.stats().processed == 48, timeout=60, message="48 released")
    assert {site: len(times) for site, times in released.items()} == dict.fromkeys(sites, 8)
    for site, times in released.items():
        interval = 0.1 if site == "site0.example" else 0.05
        # Server times of the releases: any k+1 releases of one key span k intervals (burst 0),
        # 1 ms for the server clock's rounding.
        for a, b in itertools.pairwise(sorted(times)):
            assert b - a >= interval - 0.001, (site, b - a)


def test_reaper_reaps_sharded_structures_once(app, redqueue_redis, redqueue_prefix):
    @app.task(
        base=PoolTask,
        pool_size=30,
        pool_shards=3,
        pool_visibility_timeout=0.05,
        pool_delivery="at_least_once",
    )
    def job(i):
        pass

    job.add_many([((i,), {}) for i in range(9)])
    batches = [job.pool.pop(100) for _ in range(3)]
    assert sum(b.calls for b in batches) == 9
    other = LeakyBucket(
        redqueue_redis,
        "used-elsewhere",
        shards=2,
        prefix=redqueue_prefix,
        visibility_timeout=0.05,
        default_rate="100/s",
    )
    other.enqueue_many([("a", 1), ("b", 2), ("c", 3)])
    assert all(other.dequeue().reservation for _ in range(3))
    time.sleep(0.1)
    app.finalize()
    result = app.tasks["celery_redqueue.reap"].apply().get()
    assert result == {job.name: 9, "bucket:used-elsewhere": 3}
    assert job.pool.stats().depth == 9 and other.stats().depth == 3


@pytest.mark.parametrize(
    "decorator, options, name",
    [
        (pool_task, {"pool_shards": 0}, "pool_shards"),
        (pool_task, {"pool_shards": 5, "pool_size": 4}, "pool_shards"),
        (pool_task, {"pool_shards": "3"}, "pool_shards"),
        (bucket_task, {"bucket_shards": -1, "bucket_key": "x"}, "bucket_shards"),
        (bucket_task, {"bucket_shard": 2, "bucket_key": "x"}, "bucket_shards"),
    ],
)
def test_bad_shard_options_fail_at_decoration(decorator, options, name):
    with pytest.raises(ConfigurationError, match=name):

        @decorator(**options)
        def f(x):
            pass


def test_cli_lists_and_tends_the_logical_structures(proc_env, redqueue_redis, redqueue_prefix):
    from .test_cli import redqueue

    pool = CappedPool(
        redqueue_redis,
        "events",
        300,
        shards=3,
        prefix=redqueue_prefix,
        delivery="at_least_once",
        max_receives=1,
    )
    pool.add_many(range(30))
    failed = 0
    while batch := pool.pop(4):
        pool.ack(batch, failures={0: f"ValueError: bad {failed}"})
        failed += 1
    bucket = LeakyBucket(redqueue_redis, "crawl", shards=3, prefix=redqueue_prefix)
    bucket.enqueue_many([(f"k{i}", i) for i in range(9)] + [("k4", 10), ("k4", 11)])

    listing = redqueue(proc_env, "list").stdout
    rows = [line.split()[0] for line in listing.splitlines()[1:] if line.strip()]
    assert rows == ["bucket:crawl", "pool:events"]  # no shard listed on its own
    stats = redqueue(proc_env, "stats", "pool:events").stdout
    assert "MISMATCH" not in stats and "offered          30" in stats
    assert "MISMATCH" not in redqueue(proc_env, "stats", "bucket:crawl").stdout
    letters = redqueue(proc_env, "dead", "pool:events").stdout
    assert all(f"ValueError: bad {i}" in letters for i in range(failed))
    keys = redqueue(proc_env, "keys", "bucket:crawl").stdout
    assert keys.splitlines()[1].split()[0] == "k4"
    assert "requeued 2" in redqueue(proc_env, "requeue", "pool:events", "--limit", "2").stdout
    assert pool.stats().dead == failed - 2 and pool.stats().depth == 2


@pytest.mark.timeout(120)
def test_heartbeat_renews_the_batch_and_drain_lease_on_their_shard(app, redqueue_redis, wait_for):
    runs = []

    @app.task(
        base=PoolTask,
        pool_size=30,
        pool_shards=3,
        pool_delivery="at_least_once",
        pool_visibility_timeout=1,
        pool_drain_lease=1,
        pool_drain_interval=None,
    )
    def slow(i):
        runs.append(i)
        time.sleep(3.5 if i == 1 else 0)

    pool = slow.pool
    with running_worker(app):
        assert slow.delay(1).drain_needed
        wait_for(lambda: runs == [1], message="the slow call started")
        time.sleep(2.2)  # past both timeouts: only the heartbeat keeps them
        assert pool.reap().returned == 0
        (home,) = [s for s in pool.shards if s.stats().in_flight == 1]
        assert redqueue_redis.exists(home.keys("drains"))  # the drain flag, renewed
        wait_for(lambda: pool.stats().processed == 1, timeout=60, message="the call done")
    stats = pool.stats()
    assert runs == [1] and (stats.redelivered, stats.late, stats.in_flight) == (0, 0, 0)


def test_sharded_tasks_on_a_cluster_spread_over_its_masters(app, cluster_url, wait_for):
    app.conf.redqueue_url = cluster_url
    seen = []

    @app.task(base=PoolTask, pool_shards=3, pool_delivery="at_least_once")
    def record(i):
        seen.append(("pool", i))

    @app.task(
        base=BucketTask, bucket_key=lambda i: f"k{i % 6}", bucket_rate="1000/s", bucket_shards=3
    )
    def fetch(i):
        seen.append(("bucket", i))

    for structure in (record.pool, fetch.bucket):
        client = structure.client
        assert len({client.get_node_from_key(s.keys("items")).name for s in structure.shards}) == 3
    record.add_many([((i,), {}) for i in range(60)])
    for i in range(30):
        fetch.delay(i)
    record.apply_async((99,), countdown=0.2)
    with running_worker(app, pool="threads", concurrency=2):
        wait_for(lambda: record.pool.stats().processed == 61, timeout=60)
        wait_for(lambda: fetch.bucket.stats().processed == 30, timeout=60)
    assert sorted(i for kind, i in seen if kind == "pool") == [*range(60), 99]
    assert sorted(i for kind, i in seen if kind == "bucket") == list(range(30))
    assert record.pool.figures().processed == 61
    assert all(s.stats().processed > 0 for s in record.pool.shards)


def test_a_buffer_stores_on_every_shard_in_a_round_trip_each(app, redqueue_redis, redqueue_prefix):
    from .conftest import broker_depth
    from .test_buffer import script_calls

    @app.task(base=PoolTask, pool_size=3000, pool_shards=3)
    def record(i):
        pass

    @app.task(base=BucketTask, bucket_key="k", bucket_rate="1000/s", bucket_shards=3)
    def fetch(k, i):
        pass

    record.pool.add("warm-up: registers the pool")
    record.pool.clear()
    before = script_calls(redqueue_redis)
    with record.buffer() as held:
        receipts = [record.delay(i) for i in range(60)]
    assert len(held) == 0 and all(r.kept for r in receipts)
    assert script_calls(redqueue_redis) - before == 3  # one pool_add per shard
    assert record.pool.stats().accepted == 60
    with fetch.buffer():
        for i in range(30):
            fetch.delay(f"key{i % 6}", i)
    assert fetch.bucket.stats().enqueued == 30
    # One drain job per task: one sweeps every shard.
    assert broker_depth(redqueue_redis, redqueue_prefix) == 2
