"""The Celery app of the drain-yield tests' `celery worker` subprocesses: a pooled and a bucket
task whose drains linger for a long time, and a plain Celery task beside them."""

import time

from celery_redqueue import BucketTask, PoolTask
from tests.process_app import PREFIX, client, make_app

app = make_app("neighbour_app")
app.conf.redqueue_drain_yield = True

#: Seconds a drain lingers on an empty structure: far longer than the tests' bound.
LINGER = 40


@app.task(
    base=PoolTask,
    shared=False,
    pool_drain_interval=None,
    pool_drain_linger=LINGER,
    pool_drain_time_budget=2 * LINGER,
)
def pooled(i):
    client().rpush(f"{PREFIX}:ran", f"pooled {i}")


@app.task(
    base=BucketTask,
    shared=False,
    bucket_key=lambda i: "k",
    bucket_rate="100/s",
    bucket_drain_interval=None,
    bucket_drain_linger=LINGER,
    bucket_drain_time_budget=2 * LINGER,
)
def metered(i):
    client().rpush(f"{PREFIX}:ran", f"metered {i}")


@app.task(shared=False)
def plain(sent):
    client().rpush(f"{PREFIX}:plain", str(time.time() - sent))
