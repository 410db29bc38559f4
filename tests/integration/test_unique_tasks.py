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
def start_worker(celery_procs, wait_for):
    """Start a `celery worker` (4 prefork processes unless told) and wait until it is ready."""

    def start(*options):
        options = options or ("--concurrency=4",)
        proc = celery_procs(
            APP, "worker", "--loglevel=INFO", "--without-mingle", "-P", "prefork", *options
        )
        wait_for(
            lambda: b" ready." in proc.log_path.read_bytes() or proc.poll() is not None,
            timeout=60,
            message="the worker to be ready",
        )
        assert proc.poll() is None, proc.log_path.read_text()
        return proc

    return start


@pytest.fixture
def worker(start_worker):
    return start_worker()


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


def test_queued_mode_refuses_a_second_call_of_a_key_while_one_waits(
    unique_app, start_worker, redqueue_redis, redqueue_prefix, wait_for
):
    """Keyed by argument name (``account``): calls that differ in other arguments are
    duplicates, other accounts are not. No worker yet: every call waits in the broker."""
    task = unique_app.refresh
    sent, refused = {}, []
    for n in range(CALLS):
        account = f"a{n % 5}"
        try:
            sent[account] = task.delay(account, n).id
        except UniqueLockedError as exc:
            assert (exc.key, exc.holder) == (f"account={account!r}", sent[account])
            refused.append(n)
    assert sorted(sent) == ["a0", "a1", "a2", "a3", "a4"]
    assert len(refused) == CALLS - 5
    locks = task.unique_locks()
    held = {h.key: h for h in locks.held()}
    assert {h.task_id for h in held.values()} == set(sent.values())
    assert {h.phase for h in held.values()} == {"queued"}
    # The call-site lock lasts queue_ttl (an hour by default), not ttl: a backlog keeps it.
    assert all(h.until - h.since > 3000 for h in held.values())
    start_worker()
    ran = lambda: _ran(redqueue_redis, redqueue_prefix, "refresh")  # noqa: E731
    wait_for(lambda: len(ran()) == 5 and not locks.held(), timeout=120, message="the 5 calls")
    assert sorted(ran()) == [f"a{n}:{n}" for n in range(5)]
    stats = locks.stats()
    assert (stats.acquired, stats.released, stats.refused) == (5, 5, CALLS - 5)
    assert stats.lost == stats.expired == stats.held == 0
    # Once its call started, the key takes a new call again.
    assert task.delay("a0", 99).id not in sent.values()


def _retried(redis, prefix, name, task, wait_for, probe=None):
    """Send one call of ``task`` that retries once; call ``probe(first_id)`` once the retry
    was published and again once the retry's body runs (it waits for our go). Returns what the
    probes returned."""
    first = task.delay("k").id
    key = f"{prefix}:{name}"
    probes = []
    wait_for(lambda: redis.llen(f"{key}:published") == 1, timeout=60, message="the retry sent")
    if probe is not None:
        probes.append(probe(first))
    wait_for(lambda: redis.llen(f"{key}:runs") == 2, timeout=60, message="the retry's body")
    if probe is not None:
        probes.append(probe(first))
    redis.rpush(f"{key}:go", 1)
    wait_for(
        lambda: redis.lrange(f"{key}:done", 0, -1) == [first.encode()],
        timeout=60,
        message="the retry to be done",
    )
    assert [x.decode() for x in redis.lrange(f"{key}:runs", 0, -1)] == [f"{first}:0", f"{first}:1"]
    return probes


def _refused_by(task, first):
    with pytest.raises(UniqueLockedError) as refused:
        task.delay("k")
    assert refused.value.holder == first
    return 1


def test_until_done_hands_the_key_to_its_retry(
    unique_app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    """While the retry waits in the broker, and while it runs, no other call gets in."""
    task = unique_app.retry_until_done
    probes = _retried(
        redqueue_redis, redqueue_prefix, "retry_until_done", task, wait_for,
        probe=lambda first: _refused_by(task, first),
    )  # fmt: skip
    assert probes == [1, 1]
    locks = task.unique_locks()
    wait_for(lambda: not locks.held(), timeout=30, message="the key freed")
    stats = locks.stats()
    assert (stats.handed_back, stats.refused) == (1, 2)
    # The call site, the first run's takeover, the retry's takeover.
    assert (stats.acquired, stats.released, stats.lost, stats.expired) == (3, 1, 0, 0)


def test_queued_retry_takes_the_key_again_while_it_waits(
    unique_app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    """The retry holds the key while it waits in the broker, and gives it back when its body
    starts (queued mode: a call may be queued while one runs)."""
    task = unique_app.retry_queued
    locks = task.unique_locks()

    def probe(first):
        held = locks.holder("job='k'")
        if held is None:
            return 0
        assert held.task_id == first
        return _refused_by(task, first)

    probes = _retried(redqueue_redis, redqueue_prefix, "retry_queued", task, wait_for, probe=probe)
    # The retry's body had started at the second probe: the key was free again.
    assert probes[1] == 0
    stats = locks.stats()
    # The call site, and the retry's (taken again before its message was published).
    assert (stats.acquired, stats.released, stats.refused) == (2, 2, probes[0])


def test_running_retry_is_not_refused_by_its_own_lock(
    unique_app, worker, redqueue_redis, redqueue_prefix, wait_for
):
    """countdown=0 and the first body still running after publishing: the lock was released
    before the retry's message was published, so the retry runs."""
    task = unique_app.retry_running
    _retried(redqueue_redis, redqueue_prefix, "retry_running", task, wait_for)
    locks = task.unique_locks()
    wait_for(lambda: not locks.held(), timeout=30, message="the key freed")
    stats = locks.stats()
    assert (stats.acquired, stats.released, stats.refused, stats.held) == (2, 2, 0, 0)


def test_two_workers_a_sigkilled_holder_keeps_the_key_until_its_lease_ran_out(
    unique_app, start_worker, redqueue_redis, redqueue_prefix, wait_for
):
    """Two workers, one queue each (a duplicate must not wait behind the hung body): while the
    first holds the key, the other worker refuses a second body; after the first is
    SIGKILLed its key is free once its lease ran out, and the next holder's fence is higher."""
    task = unique_app.hang_running
    locks = task.unique_locks()
    started = f"{redqueue_prefix}:hang_running:started"
    first = start_worker("--concurrency=1", "-Q", "first")
    start_worker("--concurrency=1", "-Q", "second")
    task.apply_async(("k",), queue="first")
    wait_for(lambda: redqueue_redis.llen(started) == 1, timeout=60, message="the first body")
    task.apply_async(("k",), queue="second")
    wait_for(lambda: locks.stats().refused == 1, timeout=60, message="the duplicate refused")
    assert redqueue_redis.llen(started) == 1
    held = locks.holder("job='k'")
    assert held is not None and held.phase == "running"
    first_fence = int(redqueue_redis.lindex(started, 0).decode().split(":")[1])
    assert held.fence == first_fence
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    wait_for(lambda: locks.holder("job='k'") is None, timeout=30, message="the key freed")
    last = locks.held()
    # Freed by its lease running out (nothing renewed it after the kill), not by a release.
    assert len(last) == 1 and last[0].until - held.until <= 3 + 1
    task.apply_async(("k",), queue="second")
    wait_for(lambda: redqueue_redis.llen(started) == 2, timeout=60, message="the key taken")
    wait_for(lambda: locks.stats().released == 1, timeout=30, message="the second released")
    second_fence = int(redqueue_redis.lindex(started, 1).decode().split(":")[1])
    assert second_fence > first_fence
    stats = locks.stats()
    assert (stats.acquired, stats.refused, stats.expired, stats.released) == (2, 1, 1, 1)
