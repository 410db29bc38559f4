"""The Celery app of the watchdog's fault tests (issue 29): no beat anywhere, no beat drains
(``pool_drain_interval=None``), so only the workers' watchdog can send a drain nobody sent.
Configured from the environment like tests.faults.fault_app; REDQUEUE_TEST_BROKER_URL (when
set) puts the broker on a server of its own, which the test stops and starts again."""

import os
import time

from celery_redqueue import BucketTask, PoolCall, PoolTask, StreamTask
from tests.process_app import PREFIX, URL, client, make_app

app = make_app("watchdog_app")
app.conf.redqueue_beat = False
if os.environ.get("REDQUEUE_TEST_BROKER_URL"):
    app.conf.broker_url = os.environ["REDQUEUE_TEST_BROKER_URL"]
    # A failing publish gives up quickly (the default retries take seconds).
    app.conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0}
    app.conf.broker_connection_timeout = 2
app.conf.result_backend = URL
app.conf.result_backend_transport_options = {"global_keyprefix": f"{PREFIX}:res:"}


def record(key, value):
    client().rpush(f"{PREFIX}:{key}", str(value))


@app.task(
    base=PoolTask,
    shared=False,
    pool_size=1000,
    pool_drain_interval=None,
    pool_drain_linger=120,  # the drain keeps its flag while it waits for more calls
)
def lingering(i):
    """Records each call."""
    record("ran", i)


@app.task(base=PoolTask, shared=False, pool_size=1000, pool_drain_interval=None)
def plain(i):
    """Records each call."""
    record("ran", i)


@app.task(
    base=BucketTask,
    shared=False,
    bucket_key=lambda tenant, i: tenant,
    bucket_rate="1000/s",
    bucket_drain_interval=None,
)
def metered(tenant, i):
    """Records each call."""
    record("ran", i)


@app.task(
    base=StreamTask,
    shared=False,
    stream_name="events",
    stream_group="tally",
    stream_drain_interval=None,
)
def tally(event):
    """Records each event."""
    record("ran", event)


@app.task(
    base=PoolTask,
    shared=False,
    pool_size=1000,
    pool_batch=True,
    pool_batch_size=100,
    pool_batch_wait=20,  # a batch gathers: the drain looks again in 5 s (a countdown job)
    pool_drain_interval=None,
)
def gathered(calls: list[PoolCall]):
    """Records each call of the batch."""
    for call in calls:
        record("ran", call.args[0])


@app.task(
    base=PoolTask,
    shared=False,
    pool_size=1000,
    pool_batch_size=10,
    pool_results=True,  # at most once (the default delivery)
    pool_visibility_timeout=3,
    pool_drain_interval=None,
)
def lossy(i):
    """Records each call; call "hang" never returns (the test kills its worker)."""
    record("started", i)
    if i == "hang":
        time.sleep(600)
    record("ran", i)
    return i
