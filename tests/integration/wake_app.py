"""A Celery app whose drains linger a minute on the wake signal, for
tests/integration/test_wake.py (a `celery worker` subprocess). Configured from the environment:
REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.

The linger (60 s) and the socket timeout (120 s, so one blocking read covers the whole linger)
are far beyond the test's waits: a call served within them was served because it woke the
drain, not because the drain looked again. Its tasks are ``shared=False`` (the test process
imports the app too: see tests/integration/test_process_apps.py).
"""

import os

from celery.signals import task_prerun

from celery_redqueue import BucketTask, PoolTask, StreamTask
from tests.process_app import PREFIX, client, make_app

LINGER = 60.0

app = make_app("wake_app")
app.conf.redqueue_redis_options = {"socket_timeout": 2 * LINGER}
app.conf.redqueue_beat = False


def served(kind: str, item: object) -> None:
    client().rpush(f"{PREFIX}:served:{kind}", f"{os.getpid()}:{item}")


@app.task(
    base=PoolTask,
    shared=False,
    pool_drain_linger=LINGER,
    pool_drain_time_budget=2 * LINGER,  # no handing over to a fresh job during the test
    pool_drain_interval=None,
)
def pooled(i):
    served("pool", i)


@app.task(
    base=BucketTask,
    shared=False,
    bucket_key=lambda key, i: key,
    bucket_rate="1/m",  # a key's second item waits a minute: the drain waits with it
    bucket_drain_linger=LINGER,
    bucket_drain_time_budget=2 * LINGER,
    bucket_drain_interval=None,
)
def metered(key, i):
    served("bucket", f"{key}{i}")


@app.task(
    base=StreamTask,
    shared=False,
    stream_name="wake-events",
    stream_group="wake-readers",
    stream_drain_linger=LINGER,
    stream_drain_time_budget=2 * LINGER,
    stream_drain_interval=None,
)
def reader(event):
    served("stream", event)


@task_prerun.connect
def count_jobs(task=None, **_):
    """Every job a worker runs (drain jobs: calls are stored, never sent), per task."""
    client().incr(f"{PREFIX}:jobs:{task.name}")
