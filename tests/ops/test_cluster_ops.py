"""The operator tools' reads and actions on a real three-master Redis Cluster."""

from prometheus_client.parser import text_string_to_metric_families

from celery_redqueue import CappedPool, LeakyBucket, LeasedResources
from celery_redqueue.ops.metrics import render
from celery_redqueue.ops.reading import Operations
from celery_redqueue.redis.client import make_client


def test_overview_keys_resources_and_requeue_on_a_cluster(cluster_url, redqueue_prefix):
    client = make_client(cluster_url)
    try:
        pools = [
            CappedPool(
                client,
                f"jobs-{i}",
                100,
                prefix=redqueue_prefix,
                delivery="at_least_once",
                max_receives=1,
            )
            for i in range(4)  # different names: different slots, different nodes
        ]
        for pool in pools:
            pool.add_many(range(5))
            pool.ack(pool.pop(2), failures={0: "boom"})
        bucket = LeakyBucket(client, "crawl", prefix=redqueue_prefix)
        bucket.enqueue_many([("a", 1), ("a", 2), ("b", 3)])
        LeasedResources(client, "creds", ["x", "y"], prefix=redqueue_prefix).acquire(30)

        ops = Operations(client, redqueue_prefix)
        views = {v["id"]: v for v in ops.overview()["structures"]}
        assert all("error" not in v for v in views.values()), views
        assert [views[f"pool:jobs-{i}"]["figures"].dead for i in range(4)] == [1, 1, 1, 1]
        assert views["lease:creds"]["leases"]["leased"] == 1

        keys = ops.keys(ops.find("crawl"), top=5)
        assert [(k["key"], k["depth"]) for k in keys] == [("a", 2), ("b", 1)]
        assert [k["key"] for k in ops.keys(ops.find("crawl"), query="b")] == ["b"]
        resources = ops.resources(ops.find("creds"))
        assert sorted(r["state"] for r in resources) == ["free", "held"]

        target = ops.find("pool:jobs-3")
        ref = ops.dead_letters(target)["letters"][0]["ref"]
        assert ops.requeue(target, [ref]).startswith("requeued 1")
        assert pools[3].stats().dead == 0

        text = render(ops)[0].decode()
        depth = {
            s.labels["name"]: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "redqueue_depth"
        }
        assert depth == {"jobs-0": 3, "jobs-1": 3, "jobs-2": 3, "jobs-3": 4, "crawl": 3}
    finally:
        client.close()
