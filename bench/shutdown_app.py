"""The Celery app of bench/shutdown_bench.py: a pooled task (at least once), a bucket task and a
stream consumer, each slow (`SLOW` s a call), with drains that would hold their worker for
minutes (time budget and linger 600 s). A body records ``<worker> <time>`` in
``<prefix>:ran:<kind>``; the worker's name is SHUTDOWN_WORKER.

Configured from the environment: SHUTDOWN_URL (structures, broker and records), SHUTDOWN_PREFIX.
"""

from __future__ import annotations

import functools
import os
import time

import redis
from celery import Celery

from celery_redqueue import BucketTask, PoolTask, StreamTask
from celery_redqueue.testing import celery_test_config

URL = os.environ.get("SHUTDOWN_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("SHUTDOWN_PREFIX", "shutdown")
STREAM = "shutdown-events"
#: Seconds each call takes.
SLOW = 0.05
LONG = {"drain_interval": None, "drain_linger": 600.0, "drain_time_budget": 600.0}

app = Celery("shutdown_app")
app.conf.update(
    celery_test_config(URL, PREFIX),  # its keys under PREFIX, as the suite's and other benches'
    broker_connection_retry_on_startup=True,
    redqueue_beat=False,
    worker_prefetch_multiplier=1,
)


def options(kind: str) -> dict[str, object]:
    return {f"{kind}_{name}": value for name, value in LONG.items()}


@functools.cache
def client() -> redis.Redis:
    return redis.Redis.from_url(URL)


def ran(kind: str) -> None:
    time.sleep(SLOW)
    who = os.environ.get("SHUTDOWN_WORKER", "?")
    client().rpush(f"{PREFIX}:ran:{kind}", f"{who} {time.time()!r}")


@app.task(
    base=PoolTask,
    pool_delivery="at_least_once",
    pool_batch_size=20,
    pool_visibility_timeout=120,
    **options("pool"),
)
def pooled(i: int) -> None:
    ran("pool")


@app.task(base=BucketTask, bucket_key=lambda i: "k", bucket_rate="1000/s", **options("bucket"))
def metered(i: int) -> None:
    ran("bucket")


@app.task(
    base=StreamTask, stream_name=STREAM, stream_group="g", stream_batch_size=20, **options("stream")
)
def streamed(i: int) -> None:
    ran("stream")
