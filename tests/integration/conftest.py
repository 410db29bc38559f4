import contextlib
import functools
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker
from kombu.asynchronous import set_event_loop


@contextlib.contextmanager
def running_worker(app, **options):
    """Celery's own in-process test worker.

    This is what the legacy ``celery_worker`` fixture runs; pytest-celery 1.x replaced that
    fixture with a Docker-based one, and these tests need no Docker.
    """
    options.setdefault("pool", "solo")
    options.setdefault("perform_ping_check", False)
    options.setdefault("loglevel", "WARNING")
    # kombu before 5.6.1 (celery/kombu#2404) leaves a stopped worker's closed hub as the
    # process's event loop, and the next worker adopts it: that hub runs the old worker's timer,
    # so the new worker's countdown and ETA messages (retries) would never run.
    set_event_loop(None)
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
def spawn(celery_procs):
    """``spawn(*args)``: ``celery -A tests.integration.proc_app *args`` (see celery_procs)."""
    return functools.partial(celery_procs, "tests.integration.proc_app")
