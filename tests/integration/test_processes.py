"""`celery worker` (prefork) and `celery beat` as real subprocesses."""

import os
import signal

from celery_redqueue import CappedPool, LeakyBucket


def test_beat_drains_a_pool_that_no_call_announced(
    redqueue_redis, redqueue_prefix, spawn, tmp_path, wait_for
):
    """Items put straight into the pool send no drain job; beat's schedule drains them anyway,
    and a prefork worker with two processes runs them."""
    pool = CappedPool(
        redqueue_redis, "tests.integration.proc_app.record", 1000, prefix=redqueue_prefix
    )
    # A producer that stored calls but whose drain message was lost: the flag is armed, no job.
    results = pool.add_many([[[i], {}] for i in range(100)])
    assert results[0].drain_needed
    spawn("worker", "--pool=prefork", "--concurrency=2", "--loglevel=INFO")
    spawn("beat", "--loglevel=INFO", "--max-interval=1")
    try:
        wait_for(lambda: pool.stats().processed == 100, timeout=90, message="beat-run drain")
    except AssertionError:
        for log in tmp_path.glob("*.log"):
            print(log.name, log.read_text()[-3000:])
        raise
    ran = [x.decode().split(":") for x in redqueue_redis.lrange(f"{redqueue_prefix}:ran", 0, -1)]
    assert sorted(int(i) for _, i in ran) == list(range(100))
    assert pool.stats().depth == 0


def test_worker_killed_mid_item_gets_its_item_back(
    redqueue_redis, redqueue_prefix, spawn, tmp_path, wait_for
):
    """SIGKILL the prefork worker while it runs an item; beat's reaper returns the item once its
    reservation expires, and a new worker completes it."""
    bucket = LeakyBucket(
        redqueue_redis, "tests.integration.proc_app.slow_job", prefix=redqueue_prefix
    )
    bucket.enqueue_many([("jobs", [["hang"], {}]), ("jobs", [["after"], {}])])
    spawn("beat", "--loglevel=INFO", "--max-interval=1")
    worker = spawn("worker", "--pool=prefork", "--concurrency=1", "--loglevel=INFO")
    try:
        wait_for(
            lambda: b"hang" in redqueue_redis.lrange(f"{redqueue_prefix}:started", 0, -1),
            timeout=90,
            message="the first run of the item",
        )
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        assert bucket.stats().in_flight == 1
        spawn("worker", "--pool=prefork", "--concurrency=1", "--loglevel=INFO")
        wait_for(lambda: bucket.stats().processed == 2, timeout=90, message="redelivery")
    except AssertionError:
        for log in tmp_path.glob("*.log"):
            print(log.name, log.read_text()[-3000:])
        raise
    done = [x.decode() for x in redqueue_redis.lrange(f"{redqueue_prefix}:done", 0, -1)]
    assert sorted(done) == ["after", "hang"]
    stats = bucket.stats()
    assert (stats.redelivered, stats.in_flight, stats.dead) == (1, 0, 0)


def test_at_least_once_pool_loses_nothing_when_its_worker_is_killed(
    redqueue_redis, redqueue_prefix, spawn, tmp_path, wait_for
):
    """SIGKILL the worker in the middle of a batch: the reaper (beat) returns the whole batch
    and a new worker runs it; every call completes, none is lost."""
    pool = CappedPool(
        redqueue_redis,
        "tests.integration.proc_app.durable",
        1000,
        policy="newest",
        prefix=redqueue_prefix,
        delivery="at_least_once",
    )
    pool.add_many([[[i], {}] for i in range(20)])
    spawn("beat", "--loglevel=INFO", "--max-interval=1")
    worker = spawn("worker", "--pool=prefork", "--concurrency=1", "--loglevel=INFO")
    try:
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:durable-hanging"),
            timeout=90,
            message="the hanging call",
        )
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        assert pool.stats().in_flight == 10  # the first batch, 0..9, died with its worker
        spawn("worker", "--pool=prefork", "--concurrency=1", "--loglevel=INFO")
        wait_for(lambda: pool.stats().processed == 20, timeout=90, message="redelivery")
    except AssertionError:
        for log in tmp_path.glob("*.log"):
            print(log.name, log.read_text()[-3000:])
        raise
    done = [int(x) for x in redqueue_redis.lrange(f"{redqueue_prefix}:durable-done", 0, -1)]
    assert set(done) == set(range(20))
    stats = pool.stats()
    assert (stats.lost, stats.in_flight, stats.depth, stats.redelivered) == (0, 0, 0, 10)
