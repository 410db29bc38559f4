"""Pooled and bucket tasks whose structures live on a Redis Cluster (the broker stays a plain
Redis, as is usual: Celery's Redis transport does not speak Cluster)."""

from celery_redqueue import BucketTask, PoolTask

from .conftest import running_worker


def test_tasks_drain_structures_on_a_cluster(app, cluster_url, wait_for):
    app.conf.redqueue_url = cluster_url
    seen = []

    @app.task(base=PoolTask, pool_policy="newest", pool_delivery="at_least_once")
    def record(i):
        seen.append(("pool", i))

    @app.task(base=BucketTask, bucket_key=lambda i: f"k{i % 3}", bucket_rate="1000/s")
    def fetch(i):
        seen.append(("bucket", i))

    record.add_many([((i,), {}) for i in range(50)])
    for i in range(30):
        fetch.delay(i)
    record.apply_async((99,), countdown=0.2)
    with running_worker(app, pool="threads", concurrency=2):
        wait_for(lambda: record.pool.stats().processed == 51, timeout=60)
        wait_for(lambda: fetch.bucket.stats().processed == 30, timeout=60)
    assert sorted(i for kind, i in seen if kind == "pool") == [*range(50), 99]
    assert sorted(i for kind, i in seen if kind == "bucket") == list(range(30))
    assert record.pool.figures().processed == 51
