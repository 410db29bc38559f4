"""Problems 1 and 2 of issue 8: drain jobs are never stranded.

The drain flag is a short lease that a running drain renews; a delayed call never holds back an
immediate one; a drain send that fails releases the flag in the same call; a drain job that
dies frees its structure within the lease. Beat is off throughout: calls alone must recover.
"""

import os
import signal
import threading
import time

import pytest
import redis as redis_py

from celery_redqueue import BucketTask, PoolTask

pytestmark = pytest.mark.timeout(180)


def ran(client, key):
    return [x.decode() for x in client.lrange(key, 0, -1)]


def test_problem_1_a_delayed_call_never_holds_back_an_immediate_one_in_a_pool(
    app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    done = f"{redqueue_prefix}:done"

    @app.task(base=PoolTask, pool_drain_interval=None)
    def t(i):
        redqueue_redis.rpush(done, i)

    with worker(app):
        assert t.apply_async((1,), countdown=600).delayed
        t.delay(2)
        wait_for(lambda: ran(redqueue_redis, done) == ["2"], message="call 2")
        # The drain that ran call 2 found only the delayed call: it must not keep the flag.
        wait_for(lambda: t.pool.stats().drains == 0, timeout=10, message="flag freed")
        third = t.delay(3)
        assert third.drain_needed  # the old pop kept the flag until the countdown (+300 s)
        assert third.drain_sent
        wait_for(lambda: ran(redqueue_redis, done) == ["2", "3"], message="call 3")
    assert t.pool.stats().delayed == 1  # call 1 still waits for its countdown


def test_problem_1_a_delayed_call_never_holds_back_an_immediate_one_in_a_bucket(
    app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    done = f"{redqueue_prefix}:done"

    @app.task(base=BucketTask, bucket_key="k", bucket_rate="100/s", bucket_drain_interval=None)
    def t(k, i):
        redqueue_redis.rpush(done, i)

    with worker(app):
        assert t.apply_async(("a", 1), countdown=600).delayed
        t.delay("a", 2)
        wait_for(lambda: ran(redqueue_redis, done) == ["2"], message="call 2")
        wait_for(lambda: t.bucket.stats().in_flight == 0, timeout=10, message="commit of 2")
        third = t.delay("b", 3)
        assert third.drain_needed
        assert third.drain_sent
        wait_for(lambda: ran(redqueue_redis, done) == ["2", "3"], message="call 3")
    assert t.bucket.stats().delayed == 1


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_problem_2_a_drain_send_that_fails_releases_the_flag(
    kind, split_app, broker_server, worker, redqueue_redis, redqueue_prefix, wait_for, caplog
):
    """Broker down: the call is stored, returns its receipt saying no drain was sent, and logs
    a warning; once the broker is back the next call sends a drain and both are served."""
    done = f"{redqueue_prefix}:done"
    if kind == "pool":

        @split_app.task(base=PoolTask, pool_drain_interval=None)
        def t(k, i):
            redqueue_redis.rpush(done, i)

        structure = t.pool
    else:

        @split_app.task(base=BucketTask, bucket_key="k", bucket_drain_interval=None)
        def t(k, i):
            redqueue_redis.rpush(done, i)

        structure = t.bucket

    broker_server.stop()
    receipt = t.delay("a", 1)  # the broker is down: must not raise, the call is stored
    assert receipt and receipt.drain_needed and not receipt.drain_sent
    assert receipt.drain_error
    assert "could not send a drain job" in caplog.text
    assert not redqueue_redis.exists(structure.keys("drains"))  # released in the same call

    broker_server.start()
    back = time.monotonic()
    with worker(split_app):
        second = t.delay("a", 2)
        assert second.drain_needed and second.drain_sent
        wait_for(lambda: sorted(ran(redqueue_redis, done)) == ["1", "2"], message="both calls")
    print(f"{kind}: served {time.monotonic() - back:.2f}s after the broker came back")


def test_problem_2_a_killed_drain_frees_the_pool_within_its_lease(
    spawn_worker, fault_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """SIGKILL the worker in the middle of a drain (no beat): a new worker and the next calls
    are served once the dead drain's lease runs out (10 s by default), not after minutes."""
    fragile = fault_app.fragile
    started, ran_key = f"{redqueue_prefix}:started", f"{redqueue_prefix}:ran"
    first = spawn_worker("--pool=prefork", "--concurrency=1", "--loglevel=INFO")
    try:
        assert fragile.delay("hang").drain_needed
        wait_for(
            lambda: b"hang" in redqueue_redis.lrange(started, 0, -1),
            timeout=60,
            message="the hanging call",
        )
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        killed = time.monotonic()
        assert fragile.pool.stats().drains  # the dead drain still holds the drain flag
        spawn_worker("--pool=prefork", "--concurrency=1", "--loglevel=INFO")
        calls = 0
        # Keep calling, as producers do: the first call after the lease ran out sends a drain.
        while not redqueue_redis.llen(ran_key):
            assert time.monotonic() - killed < 60, "no call was served within 60 s"
            fragile.delay(calls)
            calls += 1
            time.sleep(0.5)
        recovered = time.monotonic() - killed
        wait_for(lambda: redqueue_redis.llen(ran_key) == calls, timeout=60, message="all calls")
    except AssertionError:
        print(worker_logs())
        raise
    print(f"served {recovered:.2f}s after the drain was killed")
    assert recovered < 30  # a logical bound: the lease (10 s) plus start-up, not minutes


def test_problem_2_a_redis_restart_mid_drain_strands_nothing(
    data_app, data_server, worker, redqueue_redis, redqueue_prefix, wait_for, ended_jobs
):
    """Redis (AOF on) restarts while a drain runs: the drain job fails with
    RedisUnavailableError, and once Redis is back the next calls are served within the drain
    lease, without beat; the old flag (300 s, kept by the AOF) held the pool for minutes."""
    done, started = f"{redqueue_prefix}:done", f"{redqueue_prefix}:started"
    redis_down = threading.Event()

    @data_app.task(base=PoolTask, pool_batch_size=1, pool_drain_interval=None)
    def t(i):
        redqueue_redis.rpush(started, i)
        if i == 0:
            redis_down.wait(30)  # Redis goes down meanwhile: this drain's ack fails
        redqueue_redis.rpush(done, i)

    data = redis_py.Redis.from_url(data_server.url)
    with worker(data_app):
        assert t.delay(0).drain_needed
        for i in range(1, 5):
            t.delay(i)
        wait_for(lambda: redqueue_redis.llen(started), timeout=60, message="the first call")
        data_server.stop()
        redis_down.set()
        # The drain's ack meets a Redis that is down, and the drain job fails.
        wait_for(lambda: t.name in ended_jobs, timeout=60, message="the drain job to end")
        data_server.start()
        back = time.monotonic()
        calls = 5
        while int(redqueue_redis.llen(done)) < 6:  # call 0 (its ack failed), 1..4, and one more
            assert time.monotonic() - back < 60, "nothing was served within 60 s"
            t.delay(calls)
            calls += 1
            time.sleep(0.5)
        recovered = time.monotonic() - back
        wait_for(lambda: t.pool.stats().depth == 0, timeout=60, message="the pool to empty")
    data.close()
    print(f"served {recovered:.2f}s after Redis came back")
    assert recovered < 30
