"""Problem 9 of issue 8: loss made visible. A Redis restart without persistence is detected and
logged with the figures last seen; eviction policies and persistence off are warned about at
worker start, in figures() and in the CLI; a Redis that refuses CONFIG is skipped quietly."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from celery_redqueue import BucketTask, CappedPool, EventStream, PoolTask, errors
from celery_redqueue.redis.client import make_client

pytest_plugins = ["tests.faults.fixtures_errors"]

ROOT = Path(__file__).resolve().parents[2]
HEALTH_LOGGER = "celery_redqueue.tasks.checks"


def _retrying(wait_for, call):
    """The first command after a restart may meet the dead connection (redis-py < 6 does not
    retry it); the next one reconnects."""

    def attempt():
        try:
            return call() or True
        except errors.RedisUnavailableError:
            return False

    return wait_for(attempt, timeout=30, message="Redis back after the restart")


def _app_with_work(make_app, server):
    app = make_app(server.url)

    @app.task(base=PoolTask, shared=False)
    def pooled(x):
        pass

    @app.task(base=BucketTask, shared=False, bucket_key=lambda x: f"k{x % 3}")
    def bucketed(x):
        pass

    pooled.pool.add_many([[[i], {}] for i in range(40)])
    bucketed.bucket.enqueue_many([(f"k{i % 3}", [[i], {}]) for i in range(10)])
    app.finalize()
    return app, pooled, bucketed


def _reap(app):
    return app.tasks["celery_redqueue.reap"].apply().get()


@pytest.mark.timeout(120)
def test_a_restart_without_persistence_is_logged_with_the_figures_last_seen(
    fault_server, make_app, log_records, wait_for
):
    server = fault_server()
    records = log_records(HEALTH_LOGGER)
    app, pooled, bucketed = _app_with_work(make_app, server)
    _reap(app)  # beat's reaper records what it sees
    assert not [r for r in records.records if r.levelname == "ERROR"]

    server.restart()  # no AOF: every key is gone
    back = time.monotonic()
    _retrying(wait_for, lambda: pooled.delay(1))  # the pool is in use again, with counters from 0
    served = time.monotonic() - back
    _reap(app)
    print(f"\nfirst call stored {served:.3f} s after the restarted server was up")

    errors_logged = [r.getMessage() for r in records.records if r.levelname == "ERROR"]
    pool_line = next(m for m in errors_logged if f"pool:{pooled.name}" in m)
    bucket_line = next(m for m in errors_logged if f"bucket:{bucketed.name}" in m)
    assert "restarted" in pool_line and "40 calls held when last seen" in pool_line
    assert "offered=40" in pool_line and "offered=1" in pool_line
    assert "10 calls held when last seen" in bucket_line and "not known" in bucket_line
    assert "now dead=0, delayed=0, depth=0" in bucket_line


@pytest.mark.timeout(120)
def test_a_restart_is_logged_by_a_process_that_saw_the_old_run_after_another_wrote_the_new_one(
    fault_server, make_app, log_records, wait_for
):
    """Issue 18, 5: after a restart without persistence, a process that never saw the old run
    (a worker just started, a CLI) records the new run's snapshot first; the reaper of a
    process that saw the old run still logs the loss (main compared with the newer snapshot,
    of the new run, and said nothing). The message says what it cannot know: what was stored
    between the last reading and the restart."""
    server = fault_server()
    records = log_records(HEALTH_LOGGER)
    app, pooled, _ = _app_with_work(make_app, server)
    _reap(app)  # this process's memory: the old run, 40 calls held
    server.restart()
    _retrying(wait_for, lambda: pooled.delay(1))
    prefix = app.conf.redqueue_key_prefix
    newcomer = (
        "import sys; from celery_redqueue.redis.client import make_client; "
        "from celery_redqueue.structures.loss import check_for_loss; "
        "print(check_for_loss(make_client(sys.argv[1]), sys.argv[2]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", newcomer, server.url, prefix],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    )
    assert out.stdout.strip() == "[]"  # it saw only the new run: it cannot tell
    _reap(app)
    errors_logged = [r.getMessage() for r in records.records if r.levelname == "ERROR"]
    pool_line = next(m for m in errors_logged if f"pool:{pooled.name}" in m)
    assert "40 calls held when last seen" in pool_line and "between that reading" in pool_line
    _reap(app)  # logged once: the process now remembers the new run
    assert len([r for r in records.records if r.levelname == "ERROR"]) == len(errors_logged)


@pytest.mark.timeout(120)
def test_a_restart_with_aof_loses_nothing_and_logs_no_loss(
    fault_server, make_app, log_records, wait_for
):
    server = fault_server(appendonly=True)
    records = log_records(HEALTH_LOGGER)
    app, pooled, bucketed = _app_with_work(make_app, server)
    _reap(app)
    server.restart()  # a clean shutdown writes the AOF out
    _retrying(wait_for, lambda: pooled.structure.stats())
    _reap(app)
    assert pooled.structure.stats().depth == 40
    assert bucketed.structure.stats().depth == 10
    assert not [r for r in records.records if r.levelname == "ERROR"]


@pytest.mark.timeout(60)
def test_figures_warn_about_eviction_and_persistence_and_skip_a_refused_config(fault_server):
    risky = fault_server(extra_args=("--maxmemory-policy", "allkeys-lru"))
    safe = fault_server(appendonly=True)
    locked = fault_server(extra_args=("--rename-command", "CONFIG", ""))
    figures, streams = {}, {}
    for label, server in (("risky", risky), ("safe", safe), ("locked", locked)):
        pool = CappedPool(make_client(server.url), "p", 10)
        pool.add(1)
        figures[label] = pool.figures()
        stream = EventStream(make_client(server.url), "s", groups=["g"])
        stream.publish({"n": 1})
        streams[label] = stream.figures()
    for read in (figures, streams):  # a stream's entries are lost the same ways
        warnings = " ".join(read["risky"].warnings)
        assert "allkeys-lru" in warnings and "persistence is off" in warnings
        assert read["safe"].warnings == ()
        assert read["locked"].warnings == ()  # managed Redis: skipped quietly
        assert read["locked"].depth == 1


@pytest.fixture
def celery_process(celery_procs):
    """Run ``celery -A tests.integration.proc_app ...`` against a given server and prefix."""

    def run(url, prefix, *args, wait=False):
        env = {"REDQUEUE_TEST_URL": url, "REDQUEUE_TEST_PREFIX": prefix}
        if wait:
            return subprocess.run(
                [sys.executable, "-m", "celery", "-A", "tests.integration.proc_app", *args],
                env=dict(os.environ, PYTHONPATH=str(ROOT), **env), cwd=ROOT,
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
        proc = celery_procs("tests.integration.proc_app", *args, env=env)
        return proc, proc.log_path

    return run


@pytest.mark.timeout(120)
def test_worker_start_and_cli_warn_about_eviction_and_persistence(
    fault_server, celery_process, wait_for
):
    server = fault_server(extra_args=("--maxmemory-policy", "volatile-lru"))
    prefix = "rqhealth"
    _, log = celery_process(server.url, prefix, "worker", "-P", "solo", "-l", "INFO")
    wait_for(
        lambda: b"ready" in log.read_bytes() and b"persistence is off" in log.read_bytes(),
        timeout=60,
        message="the worker's start-up warnings",
    )
    assert b"maxmemory-policy is volatile-lru" in log.read_bytes()
    listed = celery_process(server.url, prefix, "redqueue", "list", wait=True)
    assert listed.returncode == 0, listed.stderr
    assert "volatile-lru" in listed.stderr and "persistence is off" in listed.stderr
