import pytest

from celery_redqueue import CappedPool


@pytest.fixture
def make_pool(redqueue_redis, redqueue_prefix):
    """Build pools under the test's prefix."""

    def make(name="p", capacity=10, **kwargs):
        return CappedPool(redqueue_redis, name, capacity, prefix=redqueue_prefix, **kwargs)

    return make
