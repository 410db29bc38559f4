"""The Celery app that `celery worker` subprocesses of the fault suite run.

Configured from the environment (REDQUEUE_TEST_URL, REDQUEUE_TEST_PREFIX). Beat is off: the
fault suite checks that calls alone get their drain jobs sent.
"""

import time

from celery_redqueue import PoolTask
from tests.process_app import PREFIX, client, make_app

app = make_app("fault_app")
app.conf.redqueue_beat = False


@app.task(base=PoolTask, shared=False, pool_size=1000, pool_batch_size=1, pool_drain_interval=None)
def fragile(i):
    """Records each call; call "hang" never returns (the test kills its worker)."""
    client().rpush(f"{PREFIX}:started", str(i))
    if i == "hang":
        time.sleep(600)
    client().rpush(f"{PREFIX}:ran", str(i))
