"""Problem 10 of issue 8: a long body never runs twice. While it runs, the worker's heartbeat
renews its at-least-once batch or bucket reservation (every third of the timeout), so the
reaper, run here as often as beat would, finds nothing to take back."""

import socket
import threading
import time

import pytest
import redis

from celery_redqueue import BucketTask, PoolTask

pytestmark = pytest.mark.timeout(120)


def reap_while(structure, stop):
    """Run the structure's reaper every 0.2 s, as beat's reaper job would, until ``stop``."""
    while not stop.is_set():
        structure.reap()
        time.sleep(0.2)


def run_reaper(structure):
    stop = threading.Event()
    thread = threading.Thread(target=reap_while, args=(structure, stop), daemon=True)
    thread.start()
    return stop, thread


def at_least_once_task(app, kind, body, visibility_timeout):
    """``body`` declared as an at-least-once pool task or a bucket task (keyed by its argument
    ``i``) with no drain interval; returns the task and its structure."""
    if kind == "pool":
        task = app.task(
            base=PoolTask,
            pool_delivery="at_least_once",
            pool_visibility_timeout=visibility_timeout,
            pool_drain_interval=None,
        )(body)
        return task, task.pool
    task = app.task(
        base=BucketTask,
        bucket_key="i",
        bucket_visibility_timeout=visibility_timeout,
        bucket_drain_interval=None,
    )(body)
    return task, task.bucket


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_problem_10_a_batch_or_reservation_outliving_its_timeout_runs_once(
    app, worker, redqueue_redis, redqueue_prefix, wait_for, identities, kind
):
    runs = f"{redqueue_prefix}:runs"

    def slow(i):
        redqueue_redis.rpush(runs, i)
        time.sleep(7)

    slow, structure = at_least_once_task(app, kind, slow, visibility_timeout=2)
    stop, reaper = run_reaper(structure)
    try:
        with worker(app):
            assert slow.delay("a").drain_needed
            wait_for(
                lambda: structure.stats().processed == 1 or redqueue_redis.llen(runs) > 1,
                timeout=60,
                message="the call",
            )
            time.sleep(1)  # a second run, had the reaper returned it, would start now
    finally:
        stop.set()
        reaper.join()
    assert redqueue_redis.lrange(runs, 0, -1) == [b"a"]  # the old code ran it 5 times
    stats = structure.stats()
    assert (stats.redelivered, stats.late, stats.in_flight) == (0, 0, 0)
    assert identities[kind](stats)


def test_a_renewal_that_finds_its_item_gone_is_logged_and_the_late_commit_counted(
    app, worker, redqueue_redis, redqueue_prefix, wait_for, caplog
):
    """The heartbeat cannot save an item the reaper already took (here: its deadline forced
    into the past): the renewal logs it, and the late commit returns False and is counted."""
    started = f"{redqueue_prefix}:started"
    release = threading.Event()

    @app.task(
        base=BucketTask,
        bucket_key="k",
        bucket_visibility_timeout=1.5,
        bucket_max_receives=1,
        bucket_drain_interval=None,
    )
    def held(k):
        redqueue_redis.rpush(started, k)
        release.wait(30)

    bucket = held.bucket
    with worker(app):
        held.delay("a")
        wait_for(lambda: redqueue_redis.llen(started) == 1, message="the body")
        [res_id] = redqueue_redis.zrange(bucket.keys("inflight"), 0, -1)
        redqueue_redis.zadd(bucket.keys("inflight"), {res_id: 0})
        assert bucket.reap().dead_lettered == 1  # max_receives=1: taken back for good
        wait_for(lambda: "taken back" in caplog.text, timeout=10, message="the renewal's log")
        release.set()
        wait_for(lambda: bucket.stats().late == 1, timeout=30, message="the late commit")
    stats = bucket.stats()
    assert (stats.processed, stats.dead, stats.in_flight) == (0, 1, 0)


@pytest.mark.parametrize("flush_scripts", [False, True])
def test_one_renewal_covers_every_structure_the_process_holds(
    make_pool, make_bucket, redqueue_redis, flush_scripts
):
    """The heartbeat renews a pool batch and a bucket reservation together (one pipelined
    round trip), and falls back to one call each when the server lost its scripts."""
    from celery_redqueue.tasks.heartbeat import Heartbeat

    pool = make_pool(delivery="at_least_once", visibility_timeout=60)
    bucket = make_bucket(visibility_timeout=60)
    pool.add("x")
    batch = pool.pop(10)
    bucket.enqueue("k", "y")
    reservation = bucket.dequeue().reservation
    soon = int(time.time() * 1000) + 1000
    redqueue_redis.zadd(pool.keys("inflight"), {batch.id: soon})
    redqueue_redis.zadd(bucket.keys("inflight"), {reservation.id: soon})
    if flush_scripts:
        redqueue_redis.script_flush()
    beat = Heartbeat()
    beat.renew([(pool, [batch.id]), (bucket, [reservation.id, "999.1"])])
    assert (beat.rounds, beat.failures) == (2, 0)
    assert redqueue_redis.zscore(pool.keys("inflight"), batch.id) > soon + 30_000
    assert redqueue_redis.zscore(bucket.keys("inflight"), reservation.id) > soon + 30_000
    assert not redqueue_redis.zscore(bucket.keys("inflight"), "999.1")  # never re-created


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_a_renewal_racing_the_commit_logs_no_false_taken_back(
    app, worker, redqueue_redis, redqueue_prefix, wait_for, caplog, monkeypatch, kind
):
    """A renewal round that snapshot an id before its body committed reaches Redis after the
    commit (forced here: the round runs right after the real ack/commit, before the drain
    drops the id): the id is gone because it settled, which is no "taken back" warning. Main
    logged one for every such race; a real take-back is still logged (test above)."""
    from celery_redqueue.tasks.heartbeat import heartbeat

    def body(i):
        redqueue_redis.rpush(f"{redqueue_prefix}:ran", i)

    body, structure = at_least_once_task(app, kind, body, visibility_timeout=30)
    settle = "ack" if kind == "pool" else "commit"
    real = getattr(structure, settle)
    raced = []

    def settle_then_renew(held, *args, **kwargs):
        result = real(held, *args, **kwargs)
        beat = heartbeat()
        rounds = beat.rounds
        beat.renew([(structure, [held.id])])  # the round that snapshot the id before
        raced.append(beat.rounds - rounds)
        return result

    monkeypatch.setattr(structure, settle, settle_then_renew)
    with worker(app):
        for i in range(3):
            body.delay(i)
        wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:ran") == 3, message="the calls")
        wait_for(lambda: len(raced) >= 1, message="a settle")
    assert raced and all(n == 1 for n in raced)  # each racing renewal ran and found it gone
    assert "taken back" not in caplog.text


def test_a_watch_stuck_on_an_unreachable_redis_does_not_hold_back_renewals(make_pool, wait_for):
    """A watched structure (its drain failed) whose Redis does not answer blocks its check for
    seconds; the renewals of what the process holds elsewhere go on meanwhile. When the watch
    ran on the renewal thread, a batch with a 1-s timeout expired behind it."""
    from celery_redqueue.tasks.heartbeat import Heartbeat

    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    stuck = redis.Redis(port=silent.getsockname()[1], socket_timeout=4, retry=None)
    checks = []

    def check():
        checks.append(time.monotonic())
        stuck.ping()

    pool = make_pool(delivery="at_least_once", visibility_timeout=1)
    pool.add("x")
    batch = pool.pop(10)
    beat = Heartbeat()
    try:
        beat.watch(object(), check, window=60)
        wait_for(lambda: checks, timeout=10, message="the watch's first check")
        with beat.holding(pool, batch.id):
            time.sleep(2.5)  # past the batch's timeout while the check hangs
            assert pool.reap().returned == 0
        assert beat.rounds >= 3
    finally:
        silent.close()
