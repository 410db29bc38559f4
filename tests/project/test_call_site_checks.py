"""Mistakes refused where they are made: an argument-less delay() of a body that needs
arguments, and decorator keywords that nothing reads."""

import pytest
from celery.result import AsyncResult

from celery_redqueue import (
    BucketTask,
    ConfigurationError,
    InvalidArgumentError,
    PoolTask,
    bucket_task,
    lease_task,
    pool_task,
)
from tests.integration.conftest import broker_depth


@pytest.fixture
def record(app):
    @app.task(base=PoolTask, pool_drain_interval=None)
    def record(product_id, user_id):
        pass

    return record


@pytest.mark.parametrize("call", ["delay", "apply_async", "apply_async_kwargs"])
def test_an_argument_less_call_of_a_body_that_needs_arguments_is_refused(
    app, record, redqueue_redis, redqueue_prefix, call
):
    with pytest.raises(InvalidArgumentError, match=r"record\(product_id, user_id\) needs"):
        if call == "delay":
            record.delay()
        elif call == "apply_async":
            record.apply_async()
        else:
            record.apply_async((), {}, countdown=5)
    assert broker_depth(redqueue_redis, redqueue_prefix) == 0
    assert record.pool.stats().offered == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"args": [], "kwargs": {}},  # Flower's apply endpoints, decoded JSON
        {"args": (), "kwargs": {}, "headers": {"periodic_task_name": "row"}},  # django-celery-beat
        {"args": (), "kwargs": {}, "producer": None, "headers": {"redqueue_drain": 1}},
    ],
)
def test_triggers_from_tools_and_schedulers_still_send_a_drain_job(
    app, record, redqueue_redis, redqueue_prefix, kwargs
):
    result = record.apply_async(**kwargs)
    assert isinstance(result, AsyncResult)
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1


def test_celery_beats_scheduler_call_is_a_trigger(app, record, redqueue_redis, redqueue_prefix):
    """Celery beat calls task.apply_async([], {}, producer=...) for a row without arguments."""
    with app.producer_or_acquire() as producer:
        record.apply_async([], {}, producer=producer)
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1


@pytest.mark.parametrize(
    "decorator, options, suggestion",
    [
        (pool_task, {"size": 10}, "pool_size"),
        (pool_task, {"polcy": "reject"}, "pool_policy"),
        (bucket_task, {"bucket_key": "x", "rate": "5/s"}, "bucket_rate"),
        (lease_task, {"ttl": 5}, "lease_ttl"),
    ],
)
def test_decorator_keywords_nothing_reads_are_refused_with_a_suggestion(
    decorator, options, suggestion
):
    with pytest.raises(ConfigurationError, match=rf"did you mean {suggestion}\?"):

        @decorator(**options)
        def f(x):
            pass


def test_app_task_keywords_nothing_reads_are_refused(app):
    with pytest.raises(ConfigurationError, match="size= is neither a Celery task option"):

        @app.task(base=PoolTask, size=10)
        def f(x):
            pass

        f.name  # noqa: B018  (the app builds the class when the task is first used)


def test_celery_task_options_are_accepted(app):
    @pool_task(
        queue="pooled",
        time_limit=60,
        autoretry_for=(ValueError,),
        retry_backoff=True,
        ignore_result=True,
        pool_size=10,
    )
    def f(x):
        pass

    @app.task(base=BucketTask, bucket_key="x", routing_key="r", max_retries=3)
    def g(x):
        pass

    assert g.max_retries == 3
