import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.embedded import EmbeddedRedisCluster, die_with_parent

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Two callables under one task name is a test bug (a process app registered as shared).
    Celery warns about it from 5.4 on; the oldest supported release (5.3) has no such warning,
    so the filter is added only where the class exists (an ini line naming it would not parse)."""
    import celery.exceptions

    if hasattr(celery.exceptions, "DuplicateTaskNameWarning"):
        config.addinivalue_line(
            "filterwarnings", "error::celery.exceptions.DuplicateTaskNameWarning"
        )


@pytest.fixture
def make_pool(redqueue_redis, redqueue_prefix):
    """Build pools under the test's prefix."""

    def make(name="p", capacity=10, **kwargs):
        return CappedPool(redqueue_redis, name, capacity, prefix=redqueue_prefix, **kwargs)

    return make


@pytest.fixture
def make_bucket(redqueue_redis, redqueue_prefix):
    """Build buckets under the test's prefix."""

    def make(name="b", **kwargs):
        return LeakyBucket(redqueue_redis, name, prefix=redqueue_prefix, **kwargs)

    return make


@pytest.fixture(scope="session")
def cluster_url():
    """A three-master Redis Cluster for the whole session, started on first use."""
    with EmbeddedRedisCluster() as cluster:
        yield cluster.url


def _wait_for(predicate, timeout=30.0, interval=0.05, message="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def wait_for():
    """``wait_for(predicate, timeout=30, interval=0.05, message=...)``: poll ``predicate`` until
    it is truthy and return its value; fail after ``timeout`` s. Generous timeouts, never a
    timing assert."""
    return _wait_for


def _assert_identities(stats):
    assert stats.offered == stats.accepted + stats.rejected, stats
    terminal = (
        stats.processed + stats.failed + stats.evicted + stats.lost + stats.dead + stats.purged
    )
    assert stats.accepted == terminal + stats.depth + stats.in_flight, stats


@pytest.fixture(scope="session")
def assert_identities():
    """``assert_identities(pool.stats())``: a pool's accounting identities hold (offered ==
    accepted + rejected; accepted == everything that became of them)."""
    return _assert_identities


@pytest.fixture
def proc_env(redqueue_server_url, redqueue_prefix, tmp_path):
    """The environment of ``celery`` subprocesses: the test's server and prefix, the repo on
    PYTHONPATH, a beat schedule file of the test's own."""
    env = dict(os.environ)
    env.update(
        REDQUEUE_TEST_URL=redqueue_server_url,
        REDQUEUE_TEST_PREFIX=redqueue_prefix,
        REDQUEUE_TEST_BEAT_FILE=str(tmp_path / "beat-schedule"),
        PYTHONPATH=str(ROOT),
    )
    return env


@pytest.fixture
def celery_procs(proc_env, tmp_path):
    """``start(app_module, *args, env=None)``: run ``celery -A app_module *args`` in its own
    session (so its prefork children die with it), logging to ``tmp_path/<arg>-<n>.log``
    (``proc.log_path``); ``env`` overrides :func:`proc_env`. Every process still running at
    teardown gets SIGTERM, then SIGKILL after 20 s; on Linux each gets SIGTERM when pytest ends,
    however it ends."""
    procs = []

    def start(app_module, *args, env=None):
        log_path = tmp_path / f"{args[0]}-{len(procs)}.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app_module, *args],
            env={**proc_env, **(env or {})},
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # A killed run (even SIGKILL) stops its workers: their warm shutdown.
            preexec_fn=die_with_parent(signal.SIGTERM),
        )
        proc.log_path = log_path
        procs.append((proc, log))
        return proc

    yield start
    for proc, log in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
