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
* ``redqueue_celery_config``: those settings as a dict, to return from pytest-celery's
  ``celery_config`` fixture (then its ``celery_app`` fixture is that app).

The fixtures live in :mod:`.fixtures`; this module imports without pytest installed, so
:mod:`.embedded` serves demos and development too.
"""

from __future__ import annotations

from typing import Any


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


try:
    from .fixtures import (
        redqueue_celery_app,
        redqueue_celery_config,
        redqueue_prefix,
        redqueue_redis,
        redqueue_server_url,
    )
except ModuleNotFoundError as exc:  # pragma: no cover - without pytest there is no plugin
    if exc.name != "pytest":
        raise
else:
    __all__ = [
        "celery_test_config",
        "delete_prefix",
        "redqueue_celery_app",
        "redqueue_celery_config",
        "redqueue_prefix",
        "redqueue_redis",
        "redqueue_server_url",
    ]
