"""The pytest fixtures of `celery_redqueue.testing` (loaded by that plugin)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from ..embedded import EmbeddedRedis
from .isolation import celery_test_config, delete_prefix


@pytest.fixture(scope="session")
def redqueue_server_url() -> Iterator[str]:
    """URL of the session's Redis server."""
    external = os.environ.get("REDQUEUE_TEST_REDIS_URL")
    if external:
        yield external
        return
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture
def redqueue_redis(redqueue_server_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redqueue_server_url)
    yield client
    client.close()


@pytest.fixture
def redqueue_prefix(redqueue_server_url: str) -> Iterator[str]:
    """A key prefix for this test alone; its keys are deleted afterwards."""
    prefix = f"rqtest:{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redqueue_server_url)
    try:
        delete_prefix(client, prefix)
    finally:
        client.close()


@pytest.fixture
def redqueue_celery_app(redqueue_server_url: str, redqueue_prefix: str) -> Iterator[Celery]:
    """A fresh Celery app on the test server, isolated by the test's prefix."""
    app = Celery(f"redqueue-test-{redqueue_prefix}", set_as_current=False)
    app.conf.update(celery_test_config(redqueue_server_url, redqueue_prefix))
    yield app
    app.close()


@pytest.fixture
def redqueue_celery_config(redqueue_server_url: str, redqueue_prefix: str) -> dict[str, object]:
    """Celery settings on the test server under the test's prefix; for pytest-celery:

    @pytest.fixture
    def celery_config(redqueue_celery_config):
        return redqueue_celery_config
    """
    return celery_test_config(redqueue_server_url, redqueue_prefix)
