"""A lingering drain yields to the worker's other tasks: in a `celery worker -c 1` (prefork),
a plain task sent while a pooled or bucket drain lingers on its empty structure runs at once,
not when the linger (40 s) ends. Without the yield it waits out the linger."""

import time

import pytest

pytestmark = pytest.mark.timeout(180)

#: Seconds the plain task may wait: a logical bound, a quarter of the drains' linger.
BOUND = 10


def run_calls_then_a_plain_task(app, redis, prefix, wait_for, kinds):
    """Send one call of each kind, wait until they ran (their drains now linger on empty
    structures, holding the worker's slots), then check a plain task runs within BOUND."""
    for kind in kinds:
        getattr(app, kind).delay(0)
    wait_for(
        lambda: redis.llen(f"{prefix}:ran") == len(kinds),
        timeout=90,
        message=f"the {' and '.join(kinds)} calls ran",
    )
    time.sleep(0.5)
    app.plain.delay(time.time())
    wait_for(
        lambda: redis.llen(f"{prefix}:plain") == 1,
        timeout=BOUND,
        message="the plain task ran beside the lingering drains",
    )
    assert float(redis.lindex(f"{prefix}:plain", 0)) < BOUND


@pytest.mark.parametrize("kind", ["pooled", "metered"])
def test_a_plain_task_does_not_wait_behind_a_lingering_drain(
    kind, celery_procs, neighbour_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    celery_procs("tests.faults.neighbour_app", "worker", "--pool=prefork", "--concurrency=1")
    try:
        run_calls_then_a_plain_task(
            neighbour_app, redqueue_redis, redqueue_prefix, wait_for, [kind]
        )
        getattr(neighbour_app, kind).delay(1)  # a fresh drain serves the next call
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:ran") == 2,
            timeout=60,
            message=f"the second {kind} call ran",
        )
    except AssertionError:
        print(worker_logs())
        raise


def start_gevent_worker(celery_procs):
    """A ``-P gevent -c 2`` worker with prefetch 1: two drains fill both greenlets and both
    prefetch slots."""
    pytest.importorskip("gevent")
    celery_procs(
        "tests.faults.neighbour_app",
        "worker",
        "--pool=gevent",
        "--concurrency=2",
        "--prefetch-multiplier=1",
    )


def test_a_plain_task_does_not_wait_behind_lingering_drains_under_gevent(
    celery_procs, neighbour_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """Under ``-P gevent -c 2`` with prefetch 1, both greenlets and both prefetch slots held by
    lingering drains (a pooled and a bucket one): the plain task sent then still runs at once."""
    start_gevent_worker(celery_procs)
    try:
        run_calls_then_a_plain_task(
            neighbour_app, redqueue_redis, redqueue_prefix, wait_for, ["pooled", "metered"]
        )
    except AssertionError:
        print(worker_logs())
        raise


def test_plain_tasks_keep_pace_beside_busy_drains_under_gevent(
    celery_procs, neighbour_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """Under ``-P gevent -c 2`` with prefetch 1, plain tasks sent while a pool and a bucket get
    calls all the time: half of them run within ``BOUND / 10`` s (a drain acknowledged late holds
    a prefetch slot, and the worker's consumer then stops asking the broker for seconds at a
    time: plain tasks waited 3 to 15 s there)."""
    start_gevent_worker(celery_procs)
    try:
        run_calls_then_a_plain_task(
            neighbour_app, redqueue_redis, redqueue_prefix, wait_for, ["pooled", "metered"]
        )
        sends = 60
        for i in range(sends):  # 20 calls/s of each kind for 3 s
            neighbour_app.pooled.delay(2 + i)
            neighbour_app.metered.delay(2 + i)
            neighbour_app.plain.delay(time.time())
            time.sleep(0.05)
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:plain") == 1 + sends,
            timeout=120,
            message="every plain task ran",
        )
        waits = sorted(float(w) for w in redqueue_redis.lrange(f"{redqueue_prefix}:plain", 1, -1))
        assert waits[len(waits) // 2] < BOUND / 10, waits
    except AssertionError:
        print(worker_logs())
        raise
