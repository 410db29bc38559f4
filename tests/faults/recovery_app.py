"""The Celery app of the recovery fault tests' `celery worker` subprocesses (issue 18, 3a):
beat's reaper on (every second), no beat drains. Configured from the environment like
tests.faults.fault_app."""

from celery_redqueue import PoolTask
from tests.process_app import PREFIX, client, make_app

app = make_app("recovery_app")
app.conf.redqueue_reaper_interval = 1.0


@app.task(
    base=PoolTask,
    shared=False,
    pool_size=1000,
    pool_drain_interval=None,
    pool_drain_linger=120,  # the drain keeps its flag while it waits for more calls
)
def lingering(i):
    """Records each call."""
    client().rpush(f"{PREFIX}:ran", str(i))
