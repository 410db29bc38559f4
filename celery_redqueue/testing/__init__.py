"""Pytest fixtures for projects that use celery-redqueue: a real Redis, never a fake one.

Enable them with ``pytest -p celery_redqueue.testing`` or ``pytest_plugins =
["celery_redqueue.testing"]`` in a conftest.

* ``redqueue_server_url`` (session): one server per test session, started from a binary found by
  :func:`celery_redqueue.embedded.find_server_binary`; ``REDQUEUE_TEST_REDIS_URL`` replaces it
  with a server of your own.
* ``redqueue_prefix``: a key prefix unique to the test; afterwards every key under it is deleted
  (by SCAN of that prefix only, never FLUSHALL, so a shared server is safe).
* ``redqueue_redis``: a client for the server.
* ``redqueue_celery_app``: a Celery app whose broker and redqueue structures both live under the
  test's prefix on that server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

from .embedded import EmbeddedRedis


def delete_prefix(client: Any, prefix: str) -> int:
    """Delete every key that starts with ``prefix:``; returns how many."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += client.delete(*batch)
            batch.clear()
    if batch:
        deleted += client.delete(*batch)
    return int(deleted)


def celery_test_config(url: str, prefix: str) -> dict[str, Any]:
    """Celery settings that keep broker and redqueue keys under ``prefix`` on ``url``."""
    return {
        "broker_url": url,
        "broker_transport_options": {"global_keyprefix": f"{prefix}:broker:"},
        "result_backend": None,
        "redqueue_url": url,
        "redqueue_key_prefix": prefix,
        "worker_hijack_root_logger": False,
        "broker_connection_retry_on_startup": False,
    }


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
def redqueue_redis(redqueue_server_url: str) -> Iterator[Any]:
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
