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
