"""What every Celery app the tests run in ``celery worker``/``celery beat`` subprocesses shares:
the server and key prefix from the environment (REDQUEUE_TEST_URL, REDQUEUE_TEST_PREFIX, set by
the ``proc_env`` fixture), the app's settings, and a Redis client for bodies to record into."""

import functools
import os

import redis
from celery import Celery

from celery_redqueue.testing import celery_test_config

URL = os.environ["REDQUEUE_TEST_URL"]
PREFIX = os.environ["REDQUEUE_TEST_PREFIX"]


def make_app(name: str) -> Celery:
    """A Celery app on the test server, its keys under the test's prefix."""
    app = Celery(name)
    # a module imported again by a later test must not leave its tasks on every app finalized
    # afterwards (Celery's shared=True default does, and warns about duplicate names)
    app.task = functools.partial(app.task, shared=False)  # type: ignore[method-assign]
    app.conf.update(celery_test_config(URL, PREFIX))
    app.conf.beat_schedule_filename = os.environ.get(
        "REDQUEUE_TEST_BEAT_FILE", "celerybeat-schedule"
    )
    return app


@functools.cache
def client() -> redis.Redis:
    """The process's client for recording what ran (a forked child gets fresh connections from
    redis-py's pool)."""
    return redis.Redis.from_url(URL)
