import time

import pytest

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.testing.embedded import EmbeddedRedisCluster


@pytest.fixture
def make_pool(redqueue_redis, redqueue_prefix):
    """Build pools under the test's prefix."""

    def make(name="p", capacity=10, **kwargs):
        return CappedPool(redqueue_redis, name, capacity, prefix=redqueue_prefix, **kwargs)

    return make


@pytest.fixture
def make_bucket(redqueue_redis, redqueue_prefix):
    """Build buckets under the test's prefix."""

    def make(name="b", **kwargs):
        return LeakyBucket(redqueue_redis, name, prefix=redqueue_prefix, **kwargs)

    return make


@pytest.fixture(scope="session")
def cluster_url():
    """A three-master Redis Cluster for the whole session, started on first use."""
    with EmbeddedRedisCluster() as cluster:
        yield cluster.url


def _wait_for(predicate, timeout=30.0, interval=0.05, message="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def wait_for():
    """``wait_for(predicate, timeout=30, interval=0.05, message=...)``: poll ``predicate`` until
    it is truthy and return its value; fail after ``timeout`` s. Generous timeouts, never a
    timing assert."""
    return _wait_for


def _assert_identities(stats):
    assert stats.offered == stats.accepted + stats.rejected, stats
    terminal = (
        stats.processed + stats.failed + stats.evicted + stats.lost + stats.dead + stats.purged
    )
    assert stats.accepted == terminal + stats.depth + stats.in_flight, stats


@pytest.fixture(scope="session")
def assert_identities():
    """``assert_identities(pool.stats())``: a pool's accounting identities hold (offered ==
    accepted + rejected; accepted == everything that became of them)."""
    return _assert_identities
