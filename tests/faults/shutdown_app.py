"""The Celery app of the soft-shutdown tests' `celery worker` subprocesses: an at-least-once
pooled task whose drain would hold its worker far longer than the tests' bound (a long time
budget and linger), each call slow until the test sets the ``fast`` key."""

import os
import time

from celery_redqueue import PoolTask
from tests.process_app import PREFIX, client, make_app

app = make_app("shutdown_app")

#: Seconds a call takes until the test sets ``<prefix>:fast``.
SLOW = 0.25
#: The pool's visibility timeout: a call a killed drain held waits this long.
VISIBILITY = 120


@app.task(
    base=PoolTask,
    shared=False,
    pool_delivery="at_least_once",
    pool_batch_size=10,
    pool_drain_interval=None,
    pool_drain_linger=600,
    pool_drain_time_budget=600,
    pool_visibility_timeout=VISIBILITY,
)
def slow(i):
    if not client().exists(f"{PREFIX}:fast"):
        time.sleep(SLOW)
    client().rpush(f"{PREFIX}:ran", f"{i} {os.environ.get('SHUTDOWN_WORKER', '?')}")
