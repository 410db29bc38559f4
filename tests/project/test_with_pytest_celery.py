"""Testing your own pooled and bucket tasks with pytest-celery's fixtures and
celery_redqueue.testing together (docs/testing.md shows this file)."""

import time

import pytest
from celery.contrib.testing.worker import start_worker

from celery_redqueue import bucket_task, pool_task


@pytest.fixture
def celery_config(redqueue_celery_config):
    """pytest-celery's app settings: the test's Redis server, under the test's key prefix."""
    return redqueue_celery_config


@pytest.fixture
def tasks(celery_app):
    """The tasks under test, declared on pytest-celery's celery_app."""
    seen = []

    @pool_task(app=celery_app, pool_size=100, pool_coalesce=True, shared=False)
    def count_view(page, count=1):
        seen.append((page, count))

    @bucket_task(app=celery_app, bucket_key="tenant", bucket_rate="50/s", shared=False)
    def sync(tenant, item):
        seen.append((tenant, item))

    return count_view, sync, seen


def test_pooled_and_bucket_tasks_with_a_real_worker(celery_app, tasks):
    count_view, sync, seen = tasks
    for _ in range(5):
        count_view.delay("/home")
    sync.delay("acme", 1)
    with start_worker(celery_app, pool="solo", perform_ping_check=False):
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert ("/home", 5) in seen  # five equal calls ran once, with their count
    assert ("acme", 1) in seen
    assert count_view.pool.stats().processed == 5


def test_eager_mode_runs_bodies_at_once(celery_app, tasks):
    count_view, sync, seen = tasks
    celery_app.conf.task_always_eager = True
    count_view.delay("/about")
    sync.delay("acme", 2)
    assert seen == [("/about", 1), ("acme", 2)]
    assert count_view.pool.stats().offered == 0  # nothing stored in eager mode
