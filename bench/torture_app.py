"""The Celery app of the crash-safety suite (bench/torture.py): one task per delivery mode and
per feature under test (by-name calls, metered buckets, gathering, per-call results), each body
appending its call id to a history file outside Redis (so a Redis that loses its data cannot
lose the history too).

Configured from the environment: TORTURE_REDQUEUE_URL (the structures' Redis, maybe through the
reply-dropping proxy), TORTURE_BROKER_URL (a Redis of its own: "broker down" stops it),
TORTURE_RESULTS_URL (the result backend: the structures' Redis, never through the proxy),
TORTURE_PREFIX, TORTURE_HISTORY (a directory; one file per process).
"""

from __future__ import annotations

import os
import time

from celery import Celery

from celery_redqueue import BucketTask, PoolTask, StreamTask, publish

PREFIX = os.environ.get("TORTURE_PREFIX", "torture")
HISTORY = os.environ.get("TORTURE_HISTORY", ".")
#: Short holds, so that recovery after a kill takes seconds; bodies renew them (heartbeat).
HOLD = 3.0

app = Celery("torture_app")
app.conf.update(
    broker_url=os.environ.get("TORTURE_BROKER_URL", "redis://127.0.0.1:6379/0"),
    # A by-name call's message is acknowledged after its store: one a SIGKILLed worker held
    # comes back after the broker's visibility timeout (1 h by default), so make it short.
    broker_transport_options={"global_keyprefix": f"{PREFIX}:broker:", "visibility_timeout": 8},
    broker_connection_retry_on_startup=True,
    result_backend=os.environ.get("TORTURE_RESULTS_URL"),
    result_backend_transport_options={"global_keyprefix": f"{PREFIX}:results:"},
    redqueue_url=os.environ.get("TORTURE_REDQUEUE_URL", "redis://127.0.0.1:6379/0"),
    redqueue_key_prefix=PREFIX,
    redqueue_reaper_interval=1.0,
    worker_hijack_root_logger=False,
    beat_schedule_filename=os.path.join(HISTORY, "celerybeat-schedule"),
)


def record(kind: str, call_id: str) -> None:
    """Append one line to this process's history file (O_APPEND: whole lines, never mixed)."""
    path = os.path.join(HISTORY, f"history-{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{kind} {call_id}\n".encode())
    finally:
        os.close(fd)
    time.sleep(0.002)  # a body takes a moment: kills land inside bodies too


common = {"shared": False}
pool_options = {
    "pool_size": 100_000,
    "pool_batch_size": 10,
    "pool_visibility_timeout": HOLD,
    "pool_drain_lease": HOLD,
    "pool_drain_interval": 2.0,
    "pool_max_receives": 50,
}


@app.task(base=PoolTask, pool_delivery="at_least_once", **pool_options, **common)
def pool_alo(call_id: str) -> None:
    record("pool", call_id)


@app.task(base=PoolTask, pool_delivery="at_most_once", **pool_options, **common)
def pool_amo(call_id: str) -> None:
    record("pool_amo", call_id)


#: What the two bucket kinds share: one key per last digit, fast enough not to slow the run.
bucket_options = {
    "bucket_key": lambda call_id: call_id[-1],
    "bucket_rate": "2000/s",
    "bucket_visibility_timeout": HOLD,
    "bucket_drain_lease": HOLD,
    "bucket_drain_interval": 2.0,
    "bucket_max_receives": 50,
}


@app.task(base=BucketTask, **bucket_options, **common)
def bucket(call_id: str) -> None:
    record("bucket", call_id)


@app.task(
    base=StreamTask,
    stream_name="torture",
    stream_group="g",
    stream_visibility_timeout=HOLD,
    stream_drain_lease=HOLD,
    stream_drain_interval=2.0,
    stream_max_receives=50,
    **common,
)
def stream(event: dict[str, str]) -> None:
    record("stream", event["id"])


@app.task(base=PoolTask, pool_delivery="at_least_once", **pool_options, **common)
def by_name(call_id: str) -> None:
    """Called only by name (``app.send_task``): the worker that takes the message stores it."""
    record("by_name", call_id)


@app.task(
    base=BucketTask,
    bucket_cost=lambda call_id: 1 + int(call_id[-1]) % 3,
    bucket_cost_rate="3000/s",
    bucket_concurrency=2,
    **bucket_options,
    **common,
)
def metered(call_id: str) -> None:
    """Costs, two calls of a key in flight at most, and pauses (the producer pauses keys)."""
    record("metered", call_id)


@app.task(
    base=PoolTask,
    pool_delivery="at_least_once",
    pool_batch=True,
    pool_batch_wait=0.5,
    pool_batch_min=20,
    **{**pool_options, "pool_batch_size": 50},
    **common,
)
def gather(calls: list) -> None:  # type: ignore[type-arg]
    """A batch body that gathers: a drain waits up to 0.5 s for 20 calls."""
    for call in calls:
        record("gather", call.args[0])


@app.task(
    base=PoolTask,
    pool_delivery="at_most_once",
    pool_results=True,
    **pool_options,
    **common,
)
def results(call_id: str) -> str:
    """At most once with per-call results: every waiter gets an answer (the value, or
    CallLostError for a call lost with its worker)."""
    record("results", call_id)
    return call_id


def stream_publish(call_id: str) -> None:
    """The producer's side of the stream task."""
    publish(app, "torture", {"id": call_id})
