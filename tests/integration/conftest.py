import contextlib
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker


@contextlib.contextmanager
def running_worker(app, **options):
    """Celery's own in-process test worker.

    This is what the legacy ``celery_worker`` fixture runs; pytest-celery 1.x replaced that
    fixture with a Docker-based one, and these tests need no Docker.
    """
    options.setdefault("pool", "solo")
    options.setdefault("perform_ping_check", False)
    options.setdefault("loglevel", "WARNING")
    with start_worker(app, **options) as worker:
        yield worker


@pytest.fixture
def app(redqueue_celery_app):
    """The test's app. Its tasks are not shared: Celery's default (shared=True) would register
    every test's tasks in every later test's app, under the same names."""
    redqueue_celery_app.task = functools.partial(redqueue_celery_app.task, shared=False)
    return redqueue_celery_app


def broker_depth(client, prefix, queue="celery"):
    return client.llen(f"{prefix}:broker:{queue}")


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def proc_env(redqueue_server_url, redqueue_prefix, tmp_path):
    env = dict(os.environ)
    env.update(
        REDQUEUE_TEST_URL=redqueue_server_url,
        REDQUEUE_TEST_PREFIX=redqueue_prefix,
        REDQUEUE_TEST_BEAT_FILE=str(tmp_path / "beat-schedule"),
        PYTHONPATH=str(ROOT),
    )
    return env


@pytest.fixture
def spawn(proc_env, tmp_path):
    procs = []

    def start(*args):
        log = open(tmp_path / f"{args[0]}.log", "wb")  # noqa: SIM115 (closed at teardown)
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.integration.proc_app", *args],
            env=proc_env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
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
