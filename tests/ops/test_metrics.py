"""Prometheus metrics, parsed with prometheus_client's own parser."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from celery_redqueue import CappedPool, LeakyBucket, LeasedResources

from .promtool import promtool


def samples(text):
    """{(sample name, frozenset of labels): value} of an exposition text."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def test_metrics_endpoint_parses_with_conventional_names(
    dashboard, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard
    pool = CappedPool(redqueue_redis, "events", 10, prefix=redqueue_prefix, policy="reject")
    pool.add_many(range(14))  # 4 rejected
    pool.ack(pool.pop(3))
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix)
    # 30 keys, key i holding i + 1 items: only the 10 deepest get per-key series.
    bucket.enqueue_many([(f"k{i:02}", n) for i in range(30) for n in range(i + 1)])
    LeasedResources(redqueue_redis, "creds", ["a", "b", "c"], prefix=redqueue_prefix).acquire(30)

    with urllib.request.urlopen(base + "metrics", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    found = samples(text)
    pool_labels = frozenset({("kind", "pool"), ("name", "events")})
    assert found["redqueue_depth", pool_labels] == 7
    assert found["redqueue_offered_total", pool_labels] == 14
    assert found["redqueue_processed_total", pool_labels] == 3
    assert found["redqueue_dead", pool_labels] == 0
    assert found["redqueue_shed_total", pool_labels | {("reason", "rejected")}] == 4
    assert found["redqueue_shed_total", pool_labels | {("reason", "evicted")}] == 0
    assert found["redqueue_oldest_age_seconds", pool_labels] >= 0
    assert found["redqueue_structure_up", pool_labels] == 1
    bucket_labels = frozenset({("kind", "bucket"), ("name", "crawl")})
    assert found["redqueue_depth", bucket_labels] == sum(range(1, 31))

    key_series = {
        dict(labels)["key"]: value
        for (name, labels), value in found.items()
        if name == "redqueue_key_depth"
    }
    assert key_series == {f"k{i:02}": i + 1 for i in range(20, 30)}
    lease_labels = frozenset({("kind", LeasedResources.kind), ("name", "creds")})
    assert found["redqueue_resources", lease_labels | {("state", "leased")}] == 1
    assert found["redqueue_leases_acquired_total", lease_labels] == 1
    assert found["redqueue_key_depth", bucket_labels | {("key", "k29")}] == 30

    # Every series carries kind and name (the per-key, per-group and lease ones lacked kind),
    # so one selector such as {kind="bucket", name="crawl"} finds all of a structure's series.
    unlabelled = sorted(
        name for name, labels in found if not {"kind", "name"} <= {label for label, _ in labels}
    )
    assert unlabelled == []
    lint = promtool("check", "metrics", stdin=text)
    assert lint.returncode == 0, lint.stdout + lint.stderr
