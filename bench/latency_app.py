"""The Celery app of bench/latency_bench.py: a plain task, a bucket task and a pooled task whose
bodies record how long their call took to reach them.

Configured from the environment: LATENCY_URL (broker and structures), LATENCY_PREFIX, and
LATENCY_CONSUMER=1 to run the worker with the continuous consumer (``redqueue_consumer``).
"""

from __future__ import annotations

import functools
import os
import time

import redis
from celery import Celery
from celery.signals import task_prerun

from celery_redqueue import BucketTask, PoolTask

URL = os.environ.get("LATENCY_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("LATENCY_PREFIX", "latency")

app = Celery("latency_app")
app.conf.update(
    broker_url=URL,
    broker_transport_options={"global_keyprefix": f"{PREFIX}:broker:"},
    broker_connection_retry_on_startup=True,
    result_backend=None,
    redqueue_url=URL,
    redqueue_key_prefix=PREFIX,
    redqueue_beat=False,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=1,
)
if os.environ.get("LATENCY_CONSUMER") == "1":
    app.conf.redqueue_consumer = True


@functools.cache
def client() -> redis.Redis:
    return redis.Redis.from_url(URL)


def reached(kind: str, sent_at: float) -> None:
    """Record the call-to-body latency (one clock: producer and worker share the machine)."""
    client().rpush(f"{PREFIX}:latency:{kind}", repr(time.time() - sent_at))


@app.task(ignore_result=True)
def plain(sent_at: float) -> None:
    reached("plain", sent_at)


@app.task(
    base=BucketTask,
    bucket_key=lambda key, sent_at: key,
    bucket_rate="10000/s",  # no key waits: this measures the path, not the rate
    bucket_drain_interval=None,
)
def metered(key: str, sent_at: float) -> None:
    reached("bucket", sent_at)


@app.task(base=PoolTask, pool_size=100_000, pool_drain_interval=None)
def pooled(sent_at: float) -> None:
    reached("pool", sent_at)


@task_prerun.connect
def count_messages(task=None, **_) -> None:  # type: ignore[no-untyped-def]
    """Every task message a worker runs (for redqueue tasks: drain jobs), per task."""
    client().incr(f"{PREFIX}:messages:{task.name}")
