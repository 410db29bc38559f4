"""Task classes compose with the app's task_cls and with other bases, in either order."""

import pytest
from celery import Task
from flask import current_app

from celery_redqueue import BucketTask, ConfigurationError, PoolTask, bucket_task, pool_task
from celery_redqueue.tasks.lease import LeaseTask, lease_task, leased_resources

from .conftest import in_fresh_app_context, running_worker


def drained(task, calls):
    return lambda: task.pool.stats().processed + task.pool.stats().failed >= calls


def test_pool_task_decorator_builds_on_flask_task_cls(flask_celery, wait_for):
    seen = []

    @pool_task(app=flask_celery, pool_size=100, pool_batch_size=10, shared=False)
    def record(x):
        assert current_app.name == "redqueue-test"
        in_fresh_app_context(seen)

    assert isinstance(record, flask_celery.Task)
    with running_worker(flask_celery):
        for i in range(25):
            record.delay(i)
        wait_for(drained(record, 25), message="25 calls drained")
    stats = record.pool.stats()
    assert (stats.processed, stats.failed) == (25, 0)
    assert len(seen) == 25


@pytest.mark.parametrize("order", ["redqueue first", "app task first"])
def test_either_base_order_drains_in_a_context_per_call(flask_celery, order, wait_for):
    bases = (PoolTask, flask_celery.Task)
    if order == "app task first":
        bases = bases[::-1]
    Combined = type("Combined", bases, {})
    seen = []

    @flask_celery.task(base=Combined, pool_size=100, pool_batch_size=10)
    def record(x):
        in_fresh_app_context(seen)

    with running_worker(flask_celery):
        receipts = [record.delay(i) for i in range(20)]
        assert receipts[0].drain_needed
        wait_for(drained(record, 20), message="20 calls drained")
    stats = record.pool.stats()
    assert (stats.processed, stats.failed, stats.depth) == (20, 0, 0)
    assert len(seen) == 20


def test_bucket_and_batch_bodies_run_in_the_base_context(flask_celery, wait_for):
    seen, batches = [], []

    @bucket_task(app=flask_celery, bucket_key="key", bucket_rate="1000/s", shared=False)
    def fetch(key, n):
        in_fresh_app_context(seen)

    @pool_task(app=flask_celery, pool_batch=True, pool_batch_size=5, shared=False)
    def flush(calls):
        in_fresh_app_context(seen)
        batches.append(len(calls))

    with running_worker(flask_celery):
        for i in range(10):
            fetch.delay(f"k{i % 2}", i)
            flush.delay(i)
        wait_for(lambda: fetch.bucket.stats().processed == 10, message="bucket drained")
        wait_for(lambda: sum(batches) == 10, message="batches drained")
    assert fetch.bucket.stats().dead == 0
    assert flush.pool.stats().failed == 0


def test_a_base_that_calls_super_is_entered_once_per_call(app, wait_for):
    """A user base whose __call__ goes on with super(): the body runs once, in its context."""
    entered = []

    class Audited(Task):
        def __call__(self, *args, **kwargs):
            entered.append(args)
            return super().__call__(*args, **kwargs)

    ran = []

    @app.task(base=type("AuditedPool", (Audited, PoolTask), {}), pool_batch_size=10)
    def record(x):
        ran.append(x)

    with running_worker(app):
        for i in range(12):
            record.delay(i)
        wait_for(lambda: len(ran) == 12, message="12 calls ran")
    assert sorted(ran) == list(range(12))
    assert sorted(a for a in entered if a) == [(i,) for i in range(12)]


@pytest.mark.parametrize("order", ["lease first", "app task first"])
def test_lease_tasks_hold_a_lease_inside_the_app_context(flask_celery, order):
    leased_resources(flask_celery, "phones", ["phone-1"])
    bases = (LeaseTask, flask_celery.Task)
    if order == "app task first":
        bases = bases[::-1]
    held = []

    @flask_celery.task(base=type("LeasedFlask", bases, {}), lease_resources="phones", bind=True)
    def call(self, n):
        assert current_app.name == "redqueue-test"
        held.append(self.resource)

    call(1)
    call.apply(args=(2,))
    assert held == ["phone-1", "phone-1"]
    assert leased_resources(flask_celery, "phones").stats().leased == 0


def test_lease_task_decorator_builds_on_task_cls(flask_celery):
    leased_resources(flask_celery, "cards", ["card-1"])

    @lease_task(app=flask_celery, lease_resources="cards", shared=False)
    def charge():
        return current_app.name, charge.resource

    assert charge.apply().get() == ("redqueue-test", "card-1")


@pytest.mark.parametrize(
    "bases", [(PoolTask, BucketTask), (BucketTask, LeaseTask), (LeaseTask, PoolTask)]
)
def test_two_kinds_in_one_class_are_refused(bases):
    with pytest.raises(ConfigurationError, match="combines"):
        type("Both", bases, {})


def test_app_task_with_a_redqueue_base_says_it_replaces_task_cls(flask_celery):
    with pytest.warns(UserWarning, match=r"base=PoolTask replaces the app's task_cls FlaskTask"):

        @flask_celery.task(base=PoolTask, lazy=False)
        def record(x):
            pass
