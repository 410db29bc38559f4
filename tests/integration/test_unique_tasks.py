"""`celery_redqueue.unique` on plain ``@app.task`` tasks, in real `celery worker` subprocesses
(4 prefork processes): at most one body of a key at a time, every call counted once, and a key
whose holder was SIGKILLed inside its body is free once its lease ran out, not before."""

import os
import signal

import pytest

from celery_redqueue import UniqueLockedError

APP = "tests.integration.unique_app"
CALLS = 50


@pytest.fixture
def unique_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    from tests.faults.conftest import _imported

    yield from _imported(APP, redqueue_server_url, redqueue_prefix, monkeypatch)


@pytest.fixture
def worker(celery_procs, wait_for):
    proc = celery_procs(
        APP, "worker", "--loglevel=INFO", "--without-mingle", "--concurrency=4", "-P", "prefork"
    )
    wait_for(
        lambda: b" ready." in proc.log_path.read_bytes() or proc.poll() is not None,
        timeout=60,
        message="the worker to be ready",
    )
    assert proc.poll() is None, proc.log_path.read_text()
    return proc


def _ran(redis, prefix, name):
    return [x.decode() for x in redis.lrange(f"{prefix}:{name}:ran", 0, -1)]


def test_running_mode_runs_one_body_of_a_key_at_a_time(
    unique_app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    task = unique_app.running
    for i in range(CALLS):
        task.delay(i)
    locks = task.unique_locks()
    wait_for(
        lambda: locks.stats().acquired + locks.stats().refused == CALLS and not locks.held(),
        timeout=120,
        message="every call to run or be refused",
    )
    stats = locks.stats()
    ran = _ran(redqueue_redis, redqueue_prefix, "running")
    assert int(redqueue_redis.get(f"{redqueue_prefix}:running:most")) == 1
    assert stats.acquired == stats.released == len(ran) >= 1
    assert stats.refused == CALLS - len(ran)
    assert stats.lost == stats.expired == 0
    assert len({entry.split(":")[0] for entry in ran}) >= 1


def test_until_done_refuses_duplicates_at_the_call_site(
    unique_app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    task = unique_app.until_done
    sent, refused = [], []
    for i in range(CALLS):
        try:
            sent.append(task.delay(i).id)
        except UniqueLockedError as exc:
            assert exc.key == "one"
            assert exc.holder  # the task id of the call that holds the key
            refused.append(exc.holder)
    assert sent and len(sent) + len(refused) == CALLS
    assert set(refused) <= set(sent)
    locks = task.unique_locks()
    wait_for(
        lambda: (
            len(_ran(redqueue_redis, redqueue_prefix, "until_done")) == len(sent)
            and not locks.held()
        ),
        timeout=120,
        message="every sent call to run",
    )
    stats = locks.stats()
    assert int(redqueue_redis.get(f"{redqueue_prefix}:until_done:most")) == 1
    assert stats.refused == len(refused)
    # Each sent call: its queued lock at the call site, taken over by its worker (counted again).
    assert stats.acquired == 2 * len(sent)
    assert stats.released == len(sent)
    assert stats.lost == stats.expired == 0


def test_a_sigkilled_holder_frees_its_key_after_its_lease_only(
    unique_app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    task = unique_app.hang
    first = task.delay("k").id
    started = f"{redqueue_prefix}:hang:started"
    wait_for(lambda: redqueue_redis.llen(started) == 1, timeout=60, message="the body to start")
    pid = int(redqueue_redis.lindex(started, 0).decode().split(":")[0])
    locks = task.unique_locks()
    assert locks.holder("job='k'").task_id == first
    os.kill(pid, signal.SIGKILL)

    second = []

    def call_again():
        try:
            second.append(task.delay("k").id)
        except UniqueLockedError as exc:
            assert exc.holder == first
            # While the dead body's lease lasts, no second body started.
            assert redqueue_redis.llen(started) == 1
            return False
        return True

    # ttl is 3 s: the key is free once the lease runs out (a few seconds of slack).
    wait_for(call_again, timeout=3 + 10, interval=0.2, message="the key to be freed")
    wait_for(
        lambda: (
            redqueue_redis.lrange(f"{redqueue_prefix}:hang:done", 0, -1) == [second[0].encode()]
        ),
        timeout=60,
        message="the second call to run",
    )
    stats = locks.stats()
    assert stats.expired == 1
    assert stats.refused >= 0
