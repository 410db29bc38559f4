"""A draining worker's warm shutdown hands its structure over at once: worker A (`celery worker
-c 1`, prefork) drains a backlog of slow at-least-once pooled calls whose drain would hold it for
minutes (time budget and linger 600 s, visibility timeout 120 s); it gets SIGTERM (its main
process only, as a container's PID 1 does) and worker B serves the next call within a logical
bound far below the visibility timeout, then the rest. Every call runs, none twice, and A exits.
Without the shutdown mark A drains on through its whole backlog (100 s) before B gets a call."""

import os
import signal

import pytest

pytestmark = pytest.mark.timeout(300)

#: Calls in the backlog: 0.25 s each, far more than `BOUND` of work for A alone.
CALLS = 400
#: Seconds B may take to serve a call after A's SIGTERM: half the visibility timeout.
BOUND = 60


@pytest.fixture
def shutdown_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    from tests.faults.conftest import _imported

    yield from _imported(
        "tests.faults.shutdown_app", redqueue_server_url, redqueue_prefix, monkeypatch
    )


def test_a_warm_shutdown_hands_the_drain_to_another_worker(
    celery_procs, shutdown_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    ran_key = f"{redqueue_prefix}:ran"

    def ran():
        return [entry.decode().split() for entry in redqueue_redis.lrange(ran_key, 0, -1)]

    def start(name):
        return celery_procs(
            "tests.faults.shutdown_app",
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            "--loglevel=INFO",
            f"--hostname={name}@%h",
            env={"SHUTDOWN_WORKER": name},
        )

    a = start("A")
    try:
        for i in range(CALLS):
            shutdown_app.slow.delay(i)
        wait_for(lambda: len(ran()) >= 3, timeout=90, message="A draining the backlog")
        b = start("B")
        wait_for(lambda: "ready." in b.log_path.read_text(), timeout=90, message="B ready")
        os.kill(a.pid, signal.SIGTERM)  # the main process only
        wait_for(
            lambda: any(who == "B" for _, who in ran()),
            timeout=BOUND,
            message="B serving a call after A's SIGTERM",
        )
        redqueue_redis.set(f"{redqueue_prefix}:fast", 1)
        assert a.wait(timeout=120) == 0
        wait_for(lambda: len(ran()) >= CALLS, timeout=120, message="every call ran")
        done = [int(i) for i, _ in ran()]
        assert sorted(done) == list(range(CALLS))  # none lost, none twice
        stats = shutdown_app.slow.pool.stats()
        assert stats.depth == 0 and stats.in_flight == 0, stats
        assert stats.processed == CALLS, stats
    except AssertionError:
        print(worker_logs())
        raise
