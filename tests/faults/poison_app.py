"""The Celery app of the poison-call fault tests' `celery worker` subprocesses (issue 18, 4): one
at-least-once pool with a per-call body, one with a batch body, one stream group. Each body
records every call it starts, and kills its own process on the call "poison". Beat's reaper
runs every second. Configured from the environment like tests.faults.fault_app."""

import os

from celery_redqueue import PoolTask, StreamTask, publish
from tests.process_app import PREFIX, client, make_app

app = make_app("poison_app")
app.conf.redqueue_reaper_interval = 1.0

POISON = "poison"
#: Short holds: a dead batch comes back within seconds.
HOLD = 2.0
pool_options = {
    "shared": False,
    "pool_size": 1000,
    "pool_batch_size": 8,
    "pool_delivery": "at_least_once",
    "pool_visibility_timeout": HOLD,
    "pool_drain_lease": HOLD,
    "pool_drain_interval": None,
    "pool_max_receives": 3,
}


def run(kind, call):
    """Record that ``call`` ran (before its body's work), then die if it is the poison call."""
    client().rpush(f"{PREFIX}:ran:{kind}", call)
    if call == POISON:
        os._exit(1)  # the process dies at once: no ack, no exception handler, no heartbeat


@app.task(base=PoolTask, **pool_options)
def per_call(call):
    run("per_call", call)


@app.task(base=PoolTask, pool_batch=True, **pool_options)
def batch_body(calls):
    for call in calls:
        run("batch_body", call.args[0])


@app.task(
    base=StreamTask,
    shared=False,
    stream_name="poison",
    stream_group="g",
    stream_batch_size=8,
    stream_visibility_timeout=HOLD,
    stream_drain_lease=HOLD,
    stream_drain_interval=None,
    stream_max_receives=3,
)
def stream(event):
    run("stream", event["call"])


def stream_publish(call):
    """The producer's side of the stream task."""
    publish(app, "poison", {"call": call})
