"""The Celery app of bench/latency_bench.py: a plain task, a bucket task, a pooled task and a
stream consumer whose bodies record how long their call took to reach them.

Configured from the environment: LATENCY_URL (the structures, and the bench's records),
LATENCY_BROKER_URL (the broker: a Redis of its own, so that its command counts are the
broker's alone), LATENCY_PREFIX, LATENCY_PREFETCH (the worker's prefetch multiplier, 1 unless
set) and LATENCY_DRAIN_YIELD (0: ``redqueue_drain_yield=False``). Every task message any
process of the app publishes (a plain call; a drain job) is counted in the hash
``<prefix>:published`` by task name.
"""

from __future__ import annotations

import functools
import os
import time

import redis
from celery import Celery
from celery.signals import before_task_publish

from celery_redqueue import BucketTask, PoolTask, StreamTask
from celery_redqueue.testing import celery_test_config

URL = os.environ.get("LATENCY_URL", "redis://127.0.0.1:6379/0")
BROKER_URL = os.environ.get("LATENCY_BROKER_URL", URL)
PREFIX = os.environ.get("LATENCY_PREFIX", "latency")
#: The stream the stream consumer reads.
STREAM = "latency-events"

app = Celery("latency_app")
app.conf.update(
    celery_test_config(URL, PREFIX),  # its keys under PREFIX, as the suite's and other benches'
    broker_url=BROKER_URL,  # a separate broker for the pass that measures one
    broker_connection_retry_on_startup=True,
    redqueue_beat=False,
    worker_prefetch_multiplier=int(os.environ.get("LATENCY_PREFETCH", "1")),
    redqueue_drain_yield=os.environ.get("LATENCY_DRAIN_YIELD", "1") != "0",
)


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


@app.task(base=StreamTask, stream_name=STREAM, stream_group="latency", stream_drain_interval=None)
def streamed(sent_at: float) -> None:
    reached("stream", sent_at)


@before_task_publish.connect
def count_published(sender=None, **_) -> None:  # type: ignore[no-untyped-def]
    """Every task message published, by task (a plain call, or a redqueue task's drain job)."""
    client().hincrby(f"{PREFIX}:published", str(sender), 1)
