"""Pooled ``.delay()`` from inside tasks of a real `celery worker` of each pool kind: the
producer path's held connections (one per thread or greenlet; a forked child its own, after
its parent produced) store every call exactly once."""

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from celery_redqueue import CappedPool

BATCHES, PER_BATCH = 8, 150


def needs(module):
    """Skip without ``module``, without importing it here (eventlet patches fork on import)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


@pytest.fixture
def spawn(celery_procs):
    return functools.partial(celery_procs, "tests.faults.producer_app")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "pool_args",
    [
        ("--pool=prefork", "--concurrency=2"),
        ("--pool=threads", "--concurrency=4"),
        ("--pool=gevent", "--concurrency=20"),
        ("--pool=eventlet", "--concurrency=20"),
    ],
    ids=["prefork", "threads", "gevent", "eventlet"],
)
def test_calls_made_inside_tasks_are_stored_once(
    pool_args, redqueue_celery_app, redqueue_redis, redqueue_prefix, spawn, wait_for
):
    if pool_args[0] in ("--pool=gevent", "--pool=eventlet"):
        needs(pool_args[0].split("=")[1])
    worker = spawn("worker", *pool_args, "--loglevel=INFO")
    for batch in range(BATCHES):
        redqueue_celery_app.send_task("tests.faults.producer_app.produce", args=[batch, PER_BATCH])
    expected = {"parent"} | {f"{b}:{i}" for b in range(BATCHES) for i in range(PER_BATCH)}
    sunk_key = f"{redqueue_prefix}:sunk"
    try:
        wait_for(
            lambda: redqueue_redis.llen(sunk_key) >= len(expected) or worker.poll() is not None,
            timeout=150,
            message="every call run",
        )
        assert worker.poll() is None
    except AssertionError:
        print(worker.log_path.read_text()[-4000:])
        raise
    sunk = [x.decode() for x in redqueue_redis.lrange(sunk_key, 0, -1)]
    assert sorted(sunk) == sorted(expected)  # each exactly once
    pool = CappedPool(
        redqueue_redis, "tests.faults.producer_app.sink", 100_000, prefix=redqueue_prefix
    )
    stats = pool.stats()
    assert stats.offered == len(expected)
    assert stats.offered == stats.processed + stats.depth + stats.in_flight
    producers = {
        x.decode().split(":")[0]
        for x in redqueue_redis.lrange(f"{redqueue_prefix}:produced", 0, -1)
    }
    assert producers


@pytest.mark.timeout(120)
def test_greenlets_sharing_a_thread_without_patched_threading_get_their_own_replies(
    redqueue_server_url, redqueue_prefix
):
    """gevent with sockets patched and threading not: every greenlet of the thread sees the
    same thread-local held connection; one waiting for its reply must not let another send
    and read on it (each would get the other's reply)."""
    needs("gevent")
    script = Path(__file__).with_name("greenlets_sockets_only.py")
    done = subprocess.run(
        [sys.executable, str(script), redqueue_server_url, redqueue_prefix],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["wrong"] == []
    assert report["offered"] == report["expected"]
