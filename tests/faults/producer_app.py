"""A Celery app whose tasks produce pooled calls, for `celery worker` subprocesses of every
pool kind (prefork, threads, gevent): the held connections of the producer path under each.

Configured from the environment: REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.
"""

import os

from celery.signals import worker_init

from celery_redqueue import PoolTask
from tests.process_app import PREFIX, client, make_app

app = make_app("producer_app")


@app.task(base=PoolTask, pool_size=100_000, pool_batch_size=100, pool_drain_interval=0.5)
def sink(tag):
    """Records each call it runs, where the test can read it."""
    client().rpush(f"{PREFIX}:sunk", tag)


@app.task
def produce(batch, n):
    """A task that makes pooled calls: in a prefork child, a thread or a greenlet."""
    for i in range(n):
        sink.delay(f"{batch}:{i}")
    client().rpush(f"{PREFIX}:produced", f"{os.getpid()}:{batch}")


@worker_init.connect
def _produce_before_the_pool_starts(**_):
    # The main process holds a connection before prefork forks its children.
    sink.delay("parent")
