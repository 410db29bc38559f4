"""A lingering drain yields to the worker's other tasks: in a `celery worker -c 1` (prefork),
a plain task sent while a pooled or bucket drain lingers on its empty structure runs at once,
not when the linger (40 s) ends. Without the yield it waits out the linger."""

import time

import pytest

pytestmark = pytest.mark.timeout(180)

#: Seconds the plain task may wait: a logical bound, a quarter of the drains' linger.
BOUND = 10


@pytest.mark.parametrize("kind", ["pooled", "metered"])
def test_a_plain_task_does_not_wait_behind_a_lingering_drain(
    kind, celery_procs, neighbour_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    celery_procs("tests.faults.neighbour_app", "worker", "--pool=prefork", "--concurrency=1")
    try:
        getattr(neighbour_app, kind).delay(0)
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:ran") == 1,
            timeout=90,
            message=f"the {kind} call ran",
        )
        time.sleep(0.5)  # its drain now lingers on an empty structure, holding the process
        neighbour_app.plain.delay(time.time())
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:plain") == 1,
            timeout=BOUND,
            message="the plain task ran beside the lingering drain",
        )
        waited = float(redqueue_redis.lindex(f"{redqueue_prefix}:plain", 0))
        assert waited < BOUND
        getattr(neighbour_app, kind).delay(1)  # a fresh drain serves the next call
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:ran") == 2,
            timeout=60,
            message=f"the second {kind} call ran",
        )
    except AssertionError:
        print(worker_logs())
        raise


def test_a_plain_task_does_not_wait_behind_lingering_drains_under_gevent(
    celery_procs, neighbour_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """Under ``-P gevent -c 2`` with prefetch 1, both greenlets and both prefetch slots held by
    lingering drains (a pooled and a bucket one): the plain task sent then still runs at once."""
    pytest.importorskip("gevent")
    celery_procs(
        "tests.faults.neighbour_app",
        "worker",
        "--pool=gevent",
        "--concurrency=2",
        "--prefetch-multiplier=1",
    )
    try:
        neighbour_app.pooled.delay(0)
        neighbour_app.metered.delay(0)
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:ran") == 2,
            timeout=90,
            message="the pooled and the bucket call ran",
        )
        time.sleep(0.5)  # both drains now linger on empty structures, holding both slots
        neighbour_app.plain.delay(time.time())
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:plain") == 1,
            timeout=BOUND,
            message="the plain task ran beside the lingering drains",
        )
        waited = float(redqueue_redis.lindex(f"{redqueue_prefix}:plain", 0))
        assert waited < BOUND
    except AssertionError:
        print(worker_logs())
        raise
