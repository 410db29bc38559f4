"""The dashboard and the metrics over sharded pools and buckets: one logical structure each."""

from celery_redqueue.ops.metrics import render
from celery_redqueue.ops.reading import Operations
from celery_redqueue.structures.bucket import LeakyBucket
from celery_redqueue.structures.pool import CappedPool

from .conftest import TOKEN
from .test_web import page_headers, request


def test_dashboard_shows_and_tends_sharded_structures(dashboard, redqueue_redis, redqueue_prefix):
    base, _ = dashboard
    pool = CappedPool(
        redqueue_redis,
        "jobs",
        300,
        shards=3,
        prefix=redqueue_prefix,
        delivery="at_least_once",
        max_receives=1,
    )
    pool.add_many(range(30))
    batches = 0  # a batch comes from one shard: how many depends on the shards' shares
    while batch := pool.pop(5):
        pool.ack(batch, failures={0: "ValueError: bad"})
        batches += 1
    bucket = LeakyBucket(redqueue_redis, "crawl", shards=3, prefix=redqueue_prefix)
    bucket.enqueue_many([(f"k{i}.example", i) for i in range(9)] + [("k7.example", 9)])

    _, _, overview = request(base + "api/overview")
    views = {v["id"]: v for v in overview["structures"]}
    assert set(views) == {"pool:jobs", "bucket:crawl"}  # no shard on its own
    assert views["pool:jobs"]["figures"]["dead"] == batches
    assert views["pool:jobs"]["counters"]["accepted"] == 30
    assert views["bucket:crawl"]["figures"]["depth"] == 10

    _, _, detail = request(base + "api/structure?id=pool:jobs&dead_count=4")
    letters = detail["dead_letters"]
    assert letters["total"] == batches and len(letters["letters"]) == 4
    assert sum(detail["history"]["minutes_in"]) == 30
    _, _, keys = request(base + "api/structure?id=bucket:crawl")
    assert keys["keys"][0]["key"] == "k7.example" and keys["keys"][0]["depth"] == 2
    assert len(keys["keys"]) == 9

    headers = page_headers(base, TOKEN)
    body = {"action": "requeue", "id": "pool:jobs", "all": True}
    status, _, answer = request(base + "api/action", body, headers)
    assert status == 200, answer
    assert pool.stats().dead == 0 and pool.stats().depth == batches
    body = {"action": "set_rate", "id": "bucket:crawl", "key": "k3.example", "rate": "4/s"}
    status, _, answer = request(base + "api/action", body, page_headers(base, TOKEN))
    assert status == 200, answer
    assert bucket.key_stats("k3.example").interval == 0.25


def test_metrics_count_each_sharded_structure_once(redqueue_redis, redqueue_prefix):
    pool = CappedPool(redqueue_redis, "jobs", 30, shards=3, prefix=redqueue_prefix)
    pool.add_many(range(12))
    text = render(Operations(redqueue_redis, redqueue_prefix))[0].decode()
    depth = [line for line in text.splitlines() if line.startswith("redqueue_depth{")]
    assert depth == ['redqueue_depth{kind="pool",name="jobs"} 12.0']
