"""A Celery app for the call-path tests that run Flower and `celery worker` as subprocesses.

Configured from the environment: REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX. Results go to the
test's Redis under its prefix.
"""

from celery_redqueue import BucketTask, PoolTask
from tests.process_app import PREFIX, URL, client, make_app

app = make_app("call_paths_app")
app.conf.result_backend = URL
app.conf.result_backend_transport_options = {"global_keyprefix": f"{PREFIX}:results:"}


@app.task(name="call_paths_app.record", base=PoolTask, pool_drain_interval=None)
def record(i):
    """Records each run where the test can read it; the plain pool (results off)."""
    client().rpush(f"{PREFIX}:ran", f"record:{i}")


@app.task(name="call_paths_app.square", base=PoolTask, pool_results=True, pool_drain_interval=None)
def square(i):
    client().rpush(f"{PREFIX}:ran", f"square:{i}")
    if i < 0:
        raise ValueError(f"no square of {i} here")
    return i * i


@app.task(
    name="call_paths_app.notify",
    base=BucketTask,
    bucket_key="shop",
    bucket_results=True,
    bucket_drain_interval=None,
)
def notify(shop, order):
    client().rpush(f"{PREFIX}:ran", f"notify:{order}")
    return f"{shop}:{order}"
