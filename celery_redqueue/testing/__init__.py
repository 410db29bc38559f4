"""Pytest fixtures for projects that use celery-redqueue: a real Redis, never a fake one.

Enable them with ``pytest -p celery_redqueue.testing`` or ``pytest_plugins =
["celery_redqueue.testing"]`` in a conftest.

* ``redqueue_server_url`` (session): one server per test session, started from a binary found by
  ``celery_redqueue.embedded.find_server_binary()``; ``REDQUEUE_TEST_REDIS_URL`` replaces it
  with a server of your own.
* ``redqueue_prefix``: a key prefix unique to the test; afterwards every key under it is deleted
  (by SCAN of that prefix only, never FLUSHALL, so a shared server is safe).
* ``redqueue_redis``: a client for the server.
* ``redqueue_celery_app``: a Celery app whose broker and redqueue structures both live under the
  test's prefix on that server.
* ``redqueue_celery_config``: those settings as a dict, to return from pytest-celery's
  ``celery_config`` fixture (then its ``celery_app`` fixture is that app).

The fixtures live in `fixtures`; this module imports without pytest installed, so
``celery_redqueue.embedded`` serves demos and development too.
"""

from __future__ import annotations

from .isolation import celery_test_config, delete_prefix

try:
    from .fixtures import (
        redqueue_celery_app,
        redqueue_celery_config,
        redqueue_prefix,
        redqueue_redis,
        redqueue_server_url,
    )
    from .hooks import (  # noqa: F401 (the plugin's hooks)
        pytest_configure,
        pytest_runtest_makereport,
        pytest_unconfigure,
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
