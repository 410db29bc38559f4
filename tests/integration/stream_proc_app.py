"""A Celery app with stream consumers, for tests that run `celery worker` and `celery beat` as
subprocesses (tests/integration/test_stream_tasks.py). Configured from the environment:
REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.
"""

import os
import time

import redis
from celery import Celery

from celery_redqueue import StreamTask
from celery_redqueue.testing import celery_test_config

URL = os.environ["REDQUEUE_TEST_URL"]
PREFIX = os.environ["REDQUEUE_TEST_PREFIX"]

app = Celery("stream_proc_app")
app.conf.update(celery_test_config(URL, PREFIX))
app.conf.beat_schedule_filename = os.environ.get("REDQUEUE_TEST_BEAT_FILE", "celerybeat-schedule")
app.conf.redqueue_reaper_interval = 1.0

_client = None


def client():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(URL)
    return _client


@app.task(
    base=StreamTask,
    stream_name="parcels",
    stream_group="label",
    stream_batch_size=1,
    stream_visibility_timeout=2.0,
    stream_drain_lease=2.0,
    stream_drain_interval=1.0,
)
def label(parcel):
    """The first run of "hang" never finishes: the test kills its worker mid-event."""
    client().rpush(f"{PREFIX}:started", parcel)
    if parcel == "hang":
        client().rpush(f"{PREFIX}:hang-deliveries", label.event.deliveries)
        if client().incr(f"{PREFIX}:hang-runs") == 1:
            client().rpush(f"{PREFIX}:hanging", parcel)
            time.sleep(600)
    client().rpush(f"{PREFIX}:label", parcel)


@app.task(
    base=StreamTask,
    stream_name="parcels",
    stream_group="notify",
    stream_visibility_timeout=2.0,
    stream_drain_lease=2.0,
    stream_drain_interval=1.0,
)
def notify(parcel):
    client().rpush(f"{PREFIX}:notify", parcel)
