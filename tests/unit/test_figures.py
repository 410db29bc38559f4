"""Backpressure figures and the registry, against a known workload."""

import time

import pytest

from celery_redqueue.structures.catalog import open_structure, registered


def test_pool_figures_for_a_known_workload(make_pool):
    pool = make_pool(capacity=1000, policy="newest")
    pool.add_many(range(120))
    pool.add("later", delay=60)
    time.sleep(0.2)
    batch = pool.pop(30)
    pool.ack(batch, failures={0: "boom"}, seconds=1.5)  # 30 calls took 1.5 s: 0.05 s each
    figures = pool.figures()
    assert (figures.depth, figures.in_flight, figures.delayed, figures.dead) == (90, 0, 1, 0)
    assert (figures.offered, figures.processed) == (120, 29)
    assert figures.rate_in == pytest.approx(120 / 60)
    assert figures.rate_out == pytest.approx(30 / 60)
    assert figures.seconds_per_item == pytest.approx(0.05)
    assert figures.workers_needed == pytest.approx(2.0 * 0.05)
    assert figures.drain_eta == pytest.approx(90 / 0.5)
    assert 0.2 <= figures.oldest_age < 30


def test_empty_pool_figures(make_pool):
    figures = make_pool().figures()
    assert (figures.depth, figures.rate_in, figures.rate_out) == (0, 0.0, 0.0)
    assert figures.oldest_age is None and figures.seconds_per_item is None
    assert figures.drain_eta == 0.0


def test_bucket_figures_and_per_key_drain_time(make_bucket):
    bucket = make_bucket(default_rate="1000/s")
    bucket.set_rate("slow", "2/s")
    bucket.enqueue_many([("slow", i) for i in range(10)] + [("fast", i) for i in range(10)])
    time.sleep(0.1)
    reservation = bucket.dequeue().reservation
    bucket.commit(reservation, seconds=0.25)
    figures = bucket.figures()
    assert (figures.depth, figures.offered, figures.processed) == (19, 20, 1)
    assert figures.rate_in == pytest.approx(20 / 60)
    assert figures.seconds_per_item == pytest.approx(0.25)
    assert figures.oldest_age >= 0.1
    slow = bucket.key_stats("slow")
    assert slow.drain_eta == pytest.approx(slow.depth * 0.5)


def test_structures_register_themselves(make_pool, make_bucket, redqueue_redis, redqueue_prefix):
    make_pool(name="events", capacity=7, delivery="at_least_once").add(1)
    make_bucket(name="crawl", default_rate="5/s", ordered=True).enqueue("k", 1)
    found = {
        (kind, name): settings
        for kind, name, settings in registered(redqueue_redis, redqueue_prefix)
    }
    assert set(found) == {("pool", "events"), ("bucket", "crawl")}
    assert found["pool", "events"]["capacity"] == 7
    reopened = open_structure(
        redqueue_redis, redqueue_prefix, "bucket", "crawl", found["bucket", "crawl"]
    )
    assert reopened.ordered and reopened.default_interval_ms == pytest.approx(200)
    assert reopened.stats().depth == 1
