"""A Celery app for the continuous consumer's tests: `celery worker --redqueue-consumer`
subprocesses, and the test process as a producer (tests/integration/test_consumer.py).

Configured from the environment: REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX. Every drain job
any process of the app sends through the broker is counted in the hash
``<prefix>:drain-messages``, by sender: ``producer`` (the test process) or ``worker``.

Its tasks are ``shared=False``: the test process imports this app, and Celery's default would
bind them into every later app of the session (tests/integration/test_process_apps.py).
"""

import os
import time

from celery.signals import before_task_publish, worker_init

from celery_redqueue import BucketTask, PoolTask, StreamTask
from celery_redqueue.tasks.wire import DRAIN_HEADER
from tests.process_app import PREFIX, client, make_app

app = make_app("consumer_app")
app.conf.redqueue_beat = False  # no beat here: every drain message comes from a call or a drain


#: Who sends: the test process ("producer") or a worker (its main process or its execution pool).
_role = "producer"


@worker_init.connect
def _in_a_worker(**_):
    global _role
    _role = "worker"


@before_task_publish.connect
def _count_drain_messages(sender=None, headers=None, **_):
    if headers and headers.get(DRAIN_HEADER):
        client().hincrby(f"{PREFIX}:drain-messages", _role, 1)


@app.task(
    base=PoolTask,
    shared=False,
    pool_size=100_000,
    pool_batch_size=20,
    pool_drain_interval=None,
    pool_drain_time_budget=0.3,
    pool_drain_concurrency=2,
)
def record(i):
    """Records each call, and the process that ran it. A short time budget: its drains hand
    over often (a drain job each, or the consumer's own next drain)."""
    client().rpush(f"{PREFIX}:ran", f"{os.getpid()}:{i}")


@app.task(
    base=PoolTask,
    shared=False,
    pool_size=100_000,
    pool_batch_size=10,
    pool_delivery="at_least_once",
    pool_visibility_timeout=2.0,
    pool_drain_interval=None,
)
def durable(i):
    """Call 5's first run never finishes (the test kills its worker mid-batch); with a slow
    key set, every call takes that many seconds (a batch still running at shutdown)."""
    if i == 5 and client().incr(f"{PREFIX}:durable-hang") == 1:
        client().rpush(f"{PREFIX}:durable-hanging", i)
        time.sleep(600)
    client().rpush(f"{PREFIX}:durable-started", i)
    time.sleep(float(client().get(f"{PREFIX}:durable-slow") or 0))
    client().rpush(f"{PREFIX}:durable-done", i)


@app.task(
    base=BucketTask,
    shared=False,
    bucket_key=lambda tenant, i: tenant,
    bucket_rate="1000/s",
    bucket_drain_interval=None,
)
def metered(tenant, i):
    client().rpush(f"{PREFIX}:metered", f"{tenant}:{i}")


@app.task(
    base=StreamTask,
    shared=False,
    stream_name="events",
    stream_group="tally",
    stream_drain_interval=None,
)
def tally(event):
    client().rpush(f"{PREFIX}:tally", event)
