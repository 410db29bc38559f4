"""A Celery app for tests that run `celery worker` and `celery beat` as subprocesses.

Configured from the environment: REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.
"""

import os
import time

from celery_redqueue import BucketTask, PoolTask
from tests.process_app import PREFIX, client, make_app

app = make_app("proc_app")


@app.task(base=PoolTask, pool_size=1000, pool_batch_size=10, pool_drain_interval=1.0)
def record(i):
    """Records what ran, and in which process, where the test can read it."""
    client().rpush(f"{PREFIX}:ran", f"{os.getpid()}:{i}")


app.conf.redqueue_reaper_interval = 1.0


@app.task(
    base=BucketTask,
    bucket_key=lambda job: "jobs",
    bucket_rate="100/s",
    bucket_visibility_timeout=2.0,
    bucket_drain_interval=1.0,
)
def slow_job(job):
    """The first run of "hang" never finishes: the test kills its worker mid-item."""
    client().rpush(f"{PREFIX}:started", job)
    if job == "hang" and client().incr(f"{PREFIX}:hang-runs") == 1:
        time.sleep(600)
    client().rpush(f"{PREFIX}:done", job)


@app.task(
    base=PoolTask,
    pool_size=1000,
    pool_batch_size=10,
    pool_policy="newest",
    pool_delivery="at_least_once",
    pool_visibility_timeout=2.0,
    pool_drain_interval=1.0,
)
def durable(i):
    """Item 5's first run never finishes: the test kills its worker mid-batch."""
    if i == 5 and client().incr(f"{PREFIX}:durable-hang") == 1:
        client().rpush(f"{PREFIX}:durable-hanging", i)
        time.sleep(600)
    client().rpush(f"{PREFIX}:durable-done", i)
