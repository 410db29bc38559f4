"""A Celery app with stream consumers, for tests that run `celery worker` and `celery beat` as
subprocesses (tests/integration/test_stream_tasks.py). Configured from the environment:
REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.
"""

import time

from celery_redqueue import StreamTask
from tests.process_app import PREFIX, client, make_app

app = make_app("stream_proc_app")
app.conf.redqueue_reaper_interval = 1.0


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
        client().rpush(f"{PREFIX}:hang-deliveries", label.event.receives)
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
