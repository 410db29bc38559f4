"""The Celery app that `celery worker` subprocesses of the fault suite run.

Configured from the environment (REDQUEUE_TEST_URL, REDQUEUE_TEST_PREFIX). Beat is off: the
fault suite checks that calls alone get their drain jobs sent.
"""

import os
import time

import redis
from celery import Celery

from celery_redqueue import PoolTask
from celery_redqueue.testing import celery_test_config

URL = os.environ["REDQUEUE_TEST_URL"]
PREFIX = os.environ["REDQUEUE_TEST_PREFIX"]

app = Celery("fault_app")
app.conf.update(celery_test_config(URL, PREFIX))
app.conf.redqueue_beat = False

_client = None


def client():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(URL)
    return _client


@app.task(base=PoolTask, shared=False, pool_size=1000, pool_batch_size=1, pool_drain_interval=None)
def fragile(i):
    """Records each call; call "hang" never returns (the test kills its worker)."""
    client().rpush(f"{PREFIX}:started", str(i))
    if i == "hang":
        time.sleep(600)
    client().rpush(f"{PREFIX}:ran", str(i))
