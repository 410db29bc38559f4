"""Lingering drains wait on the wake signal, and the next call wakes them: a `celery worker`
subprocess whose drains linger a minute (tests/integration/wake_app.py) serves each new call
within the test's waits, in the drain job that was already running."""

import os
import signal

import pytest

# Far below wake_app.LINGER: a drain that was not woken would look again only after it.
SERVED_WITHIN = 25.0


@pytest.fixture
def wake_app(proc_env, monkeypatch):
    """The worker's app in this process too (to call its tasks), on the test's server."""
    for name in ("REDQUEUE_TEST_URL", "REDQUEUE_TEST_PREFIX"):
        monkeypatch.setenv(name, proc_env[name])
    import importlib
    import sys

    for name in ("tests.integration.wake_app", "tests.process_app"):  # read the env afresh
        sys.modules.pop(name, None)
    module = importlib.import_module("tests.integration.wake_app")
    yield module
    module.app.close()
    sys.modules.pop("tests.integration.wake_app", None)


def blocked_waits(client):
    """Connections blocked in a BLPOP now (flag b; the worker's broker connection blocks in a
    BRPOP)."""
    return sum(
        1 for c in client.client_list() if c.get("cmd") == "blpop" and "b" in c.get("flags", "")
    )


def test_lingering_drains_are_woken_by_the_next_call(
    wake_app, celery_procs, redqueue_redis, redqueue_prefix, tmp_path, wait_for
):
    worker = celery_procs(
        "tests.integration.wake_app",
        "worker",
        "--pool=threads",
        "--concurrency=3",
        "--loglevel=INFO",
    )

    def served(kind):
        key = f"{redqueue_prefix}:served:{kind}"
        return [x.decode().split(":", 1)[1] for x in redqueue_redis.lrange(key, 0, -1)]

    def jobs(task):
        return int(redqueue_redis.get(f"{redqueue_prefix}:jobs:{task.name}") or 0)

    try:
        # One drain job each, which then lingers: the pool and the stream on an empty
        # structure, the bucket on a key that may go again only in a minute.
        assert wake_app.pooled.delay(0).drain_needed
        wake_app.reader.stream.publish("e0")
        wake_app.metered.delay("a", 0)
        wake_app.metered.delay("a", 1)
        wait_for(lambda: served("pool") == ["0"], timeout=60, message="first pooled call")
        wait_for(lambda: served("stream") == ["e0"], timeout=60, message="first event")
        wait_for(lambda: served("bucket") == ["a0"], timeout=60, message="first bucket item")
        # All three wait on their wake signals (blocking reads), none polls.
        wait_for(lambda: blocked_waits(redqueue_redis) == 3, message="three blocked drains")

        for i in (1, 2, 3):
            receipt = wake_app.pooled.delay(i)
            assert not receipt.drain_needed  # the lingering drain holds the flag
            wait_for(lambda i=i: str(i) in served("pool"), timeout=SERVED_WITHIN)
        for e in ("e1", "e2"):
            assert not wake_app.reader.stream.publish(e).woken  # its lease is held
            wait_for(lambda e=e: e in served("stream"), timeout=SERVED_WITHIN)
        # A key that may go now: its enqueue sends a drain job too (the waiting drain had
        # released the flag), but every worker thread is busy lingering, so only the
        # woken drain can serve it.
        wake_app.metered.delay("b", 0)
        wait_for(lambda: "b0" in served("bucket"), timeout=SERVED_WITHIN)
    except AssertionError:
        for log in tmp_path.glob("*.log"):
            print(log.name, log.read_text()[-3000:])
        raise
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    assert jobs(wake_app.pooled) == 1 and jobs(wake_app.reader) == 1
    assert jobs(wake_app.metered) == 1
    assert served("bucket") == ["a0", "b0"]  # a1 still waits for its key's next minute


def test_no_signal_grows_while_nobody_listens(app, redqueue_redis, wait_for):
    """Drains that do not linger never arm the signal: stores push nothing."""
    from celery_redqueue import PoolTask

    from .conftest import running_worker

    done = []

    @app.task(base=PoolTask, pool_drain_linger=0)
    def quick(i):
        done.append(i)

    with running_worker(app):
        for i in range(50):
            quick.delay(i)
        wait_for(lambda: len(done) == 50)
    for part in ("signal", "listening"):
        assert not redqueue_redis.exists(quick.pool.keys(part))
