"""Issue 18, problem 3: stranded calls. Whoever finds an expired drain flag over due work (the
reaper, a worker's heartbeat) sends the drain; a stored call is served within its drain lease
plus a few seconds, with no further calls."""

import os
import signal
import threading
import time

import pytest

from celery_redqueue import BucketTask, PoolTask

pytestmark = pytest.mark.timeout(240)


def ran(client, key):
    return [x.decode() for x in client.lrange(key, 0, -1)]


def test_a_call_made_under_a_killed_lingering_drains_flag_is_served_by_the_reaper(
    celery_procs, recovery_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """A drain lingers (its drain flag held, nothing in flight) and is SIGKILLed; a call made
    then finds the flag held and sends no drain. No beat drains (pool_drain_interval=None),
    beat's reaper on: when the flag's lease runs out, the reaper sends the drain. Main's reaper
    only sent one when it took work back, so the call waited for the next call."""
    ran_key = f"{redqueue_prefix}:ran"
    first = celery_procs("tests.faults.recovery_app", "worker", "--pool=prefork", "--concurrency=1")
    lingering = recovery_app.lingering
    try:
        assert lingering.delay(0).drain_needed
        wait_for(lambda: ran(redqueue_redis, ran_key) == ["0"], timeout=60, message="call 0")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert lingering.pool.stats().drains  # the lingering drain holds the drain flag
        receipt = lingering.delay(1)
        assert not receipt.drain_needed  # the flag is held: this call sends nothing
        killed = time.monotonic()
        celery_procs("tests.faults.recovery_app", "worker", "-B", "--pool=solo")
        wait_for(
            lambda: ran(redqueue_redis, ran_key) == ["0", "1"],
            timeout=90,
            message="call 1, with no further call",
        )
    except AssertionError:
        print(worker_logs())
        raise
    print(f"served {time.monotonic() - killed:.2f}s after the call")


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_a_redis_aof_restart_under_a_running_drain_leaves_no_backlog_with_beat_off(
    kind, data_app, data_server, worker, redqueue_redis, redqueue_prefix, wait_for, ended_jobs
):
    """Redis (AOF on) restarts while a drain runs a body with a backlog behind it; the drain
    fails (its ack meets Redis down). Beat is off and no call is made afterwards: the worker's
    heartbeat, watching the structure whose drain failed, sends the drain once the dead drain's
    lease ran out, and reaps the batch whose ack failed. Main left the whole backlog queued."""
    done, started = f"{redqueue_prefix}:done", f"{redqueue_prefix}:started"
    redis_down = threading.Event()
    calls = 200

    def body(i):
        redqueue_redis.rpush(started, i)
        if i == 0:
            redis_down.wait(30)  # Redis goes down meanwhile: this drain's ack fails
        redqueue_redis.rpush(done, i)

    if kind == "pool":
        t = data_app.task(
            base=PoolTask,
            pool_size=1000,
            pool_batch_size=10,
            pool_delivery="at_least_once",
            pool_visibility_timeout=3,
            pool_drain_interval=None,
        )(body)
    else:
        t = data_app.task(
            base=BucketTask,
            bucket_key="i",
            bucket_rate="1000/s",
            bucket_visibility_timeout=3,
            bucket_drain_interval=None,
        )(body)
    structure = t.structure
    with worker(data_app):
        assert t.delay(0).drain_needed
        for i in range(1, calls):
            t.delay(i)
        wait_for(lambda: redqueue_redis.llen(started), timeout=60, message="the first call")
        data_server.stop()
        redis_down.set()
        # The drain's ack meets a Redis that is down, and the drain job fails.
        wait_for(lambda: t.name in ended_jobs, timeout=60, message="the drain job to end")
        data_server.start()
        back = time.monotonic()
        wait_for(
            lambda: set(ran(redqueue_redis, done)) >= {str(i) for i in range(calls)},
            timeout=90,
            message="every call, with no further call",
        )
        recovered = time.monotonic() - back
        wait_for(lambda: structure.stats().in_flight == 0, timeout=60, message="nothing in flight")
    stats = structure.stats()
    assert stats.depth == 0 and stats.processed >= calls
    print(f"{kind}: every call served {recovered:.2f}s after Redis came back")
