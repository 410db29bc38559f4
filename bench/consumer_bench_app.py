"""The Celery app of ``bench/consumer_bench.py``'s `celery worker` subprocesses (and its
producer): a plain task and a pooled task whose bodies record their call-to-body latency.

Configured from the environment: BENCH_URL and BENCH_PREFIX. Drain jobs any process sends
through the broker are counted in the hash ``<prefix>:drain-messages`` (field: the task).
"""

import os
import time

import redis
from celery import Celery
from celery.signals import before_task_publish

from celery_redqueue import PoolTask
from celery_redqueue.tasks.wire import DRAIN_HEADER
from celery_redqueue.testing import celery_test_config

URL = os.environ["BENCH_URL"]
PREFIX = os.environ["BENCH_PREFIX"]
client = redis.Redis.from_url(URL)

app = Celery("consumer_bench")
app.conf.update(celery_test_config(URL, PREFIX))
app.conf.redqueue_beat = False


@before_task_publish.connect
def _count(sender=None, headers=None, **_):
    if headers and headers.get(DRAIN_HEADER):
        client.hincrby(f"{PREFIX}:drain-messages", str(sender), 1)


@app.task(ignore_result=True)
def plain(sent):
    client.rpush(f"{PREFIX}:latency", time.time() - sent)


@app.task(base=PoolTask, pool_size=1_000_000, pool_drain_interval=None)
def pooled(sent):
    client.rpush(f"{PREFIX}:latency", time.time() - sent)
