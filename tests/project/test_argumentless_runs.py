"""An argument-less run without the drain header (a beat row run by hand, `celery call`,
Flower's apply) drains when the body needs arguments, instead of failing."""

import pytest
from celery.result import AsyncResult

from celery_redqueue import BucketTask, PoolTask
from tests.integration.conftest import broker_depth

from .conftest import running_worker


@pytest.fixture
def tasks(app):
    ran = []

    @app.task(base=PoolTask, pool_drain_interval=None)
    def record_view(product_id, user_id):
        ran.append(("view", product_id))

    @app.task(base=BucketTask, bucket_key="shop", bucket_rate="100/s", bucket_drain_interval=None)
    def notify(shop, order):
        ran.append(("notify", order))

    return record_view, notify, ran


def store_without_drain(record_view, notify):
    """Calls put in the structures directly, as if their drain job had been lost."""
    record_view.pool.add([[1, 7], {}])
    notify.bucket.enqueue("acme", [["acme", 9], {}])


def test_beat_admin_run_selected_tasks_drains(
    app, tasks, redqueue_redis, redqueue_prefix, wait_for
):
    """django-celery-beat's "Run selected tasks" calls exactly this."""
    record_view, notify, ran = tasks
    store_without_drain(record_view, notify)
    for task in (record_view, notify):
        result = task.apply_async(args=[], kwargs={}, headers={"periodic_task_name": "row"})
        assert isinstance(result, AsyncResult)
    assert broker_depth(redqueue_redis, redqueue_prefix) == 2
    with running_worker(app):
        wait_for(lambda: len(ran) == 2, timeout=20, message="both stored calls ran")
    assert sorted(ran) == [("notify", 9), ("view", 1)]


def test_a_bare_message_drains_on_the_worker(app, tasks, wait_for):
    """`celery call shop.record_view` and Flower send a message with no args and no header."""
    record_view, notify, ran = tasks
    store_without_drain(record_view, notify)
    with running_worker(app):
        app.send_task(record_view.name, (), {})
        app.send_task(notify.name, (), {})
        wait_for(lambda: len(ran) == 2, timeout=20, message="both stored calls ran")
    assert record_view.pool.stats().failed == 0


def test_a_body_without_parameters_still_runs_as_a_call(app, wait_for):
    ran = []

    @app.task(base=PoolTask)
    def tick():
        ran.append(1)

    assert tick.delay().kept
    with running_worker(app):
        wait_for(lambda: ran == [1], message="tick ran as a call")
