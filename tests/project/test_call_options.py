"""Celery's apply_async options and canvas on pooled and bucket calls: kept or refused."""

import pytest
from celery import chain, chord, group

from celery_redqueue import PoolTask, Receipt, RedQueueError, bucket_task
from tests.integration.conftest import broker_depth

from .conftest import running_worker


@pytest.fixture
def pooled(app):
    ran = []

    @app.task(base=PoolTask, pool_size=100)
    def record(x):
        ran.append(x)

    record.ran = ran
    return record


@pytest.fixture
def plain(app):
    @app.task
    def after(x=None):
        return x

    return after


@pytest.mark.parametrize(
    "option",
    [
        {"link": "sig"},
        {"link_error": "sig"},
        {"shadow": "other-name"},
        {"expires": 60},
        {"time_limit": 5},
        {"soft_time_limit": 5},
    ],
)
@pytest.mark.parametrize("eager", [False, True])
def test_refused_options_name_themselves_and_store_nothing(app, pooled, plain, option, eager):
    app.conf.task_always_eager = eager
    name, value = next(iter(option.items()))
    if value == "sig":
        value = plain.s()
    with pytest.raises(RedQueueError, match=rf"apply_async\({name}=\.\.\.\) is refused"):
        pooled.apply_async((1,), **{name: value})
    assert pooled.pool.stats().offered == 0 and pooled.ran == []


def test_an_unknown_option_is_refused_with_a_hint(pooled):
    with pytest.raises(RedQueueError, match=r"queu=.*did you mean queue"):
        pooled.apply_async((1,), queu="fast")
    assert pooled.pool.stats().offered == 0


def test_queue_routes_the_drain_job(app, pooled, redqueue_redis, redqueue_prefix, wait_for):
    receipt = pooled.apply_async((1,), queue="drains")
    assert isinstance(receipt, Receipt) and receipt.drain_needed
    assert broker_depth(redqueue_redis, redqueue_prefix, "drains") == 1
    assert broker_depth(redqueue_redis, redqueue_prefix, "celery") == 0
    with running_worker(app, queues=["drains"]):
        wait_for(lambda: pooled.ran == [1], message="the call drained from the drains queue")


def test_signatures_store_their_call(app, pooled, wait_for):
    assert isinstance(pooled.s(1).delay(), Receipt)
    assert isinstance(pooled.si(2).apply_async(countdown=0), Receipt)
    assert isinstance(pooled.signature((3,)).apply_async(), Receipt)
    with running_worker(app):
        wait_for(lambda: sorted(pooled.ran) == [1, 2, 3], message="three signature calls ran")


@pytest.mark.parametrize(
    "canvas",
    [
        lambda p, q: chain(p.s(1), q.s()),
        lambda p, q: chain(q.s(1), p.s()),
        lambda p, q: group(p.s(i) for i in range(3)),
        lambda p, q: chord([q.s(1), q.s(2)], p.s()),
        lambda p, q: chord([p.s(1)], q.s()),
    ],
    ids=["chain-first", "chain-last", "group", "chord-body", "chord-header"],
)
def test_canvas_with_a_pooled_step_is_refused_when_built(app, pooled, plain, canvas):
    with pytest.raises(RedQueueError, match="chains, groups and chords are refused"):
        canvas(pooled, plain).apply_async()
    assert pooled.pool.stats().offered == 0


def test_bucket_calls_refuse_the_same_way(app):
    @bucket_task(app=app, bucket_key="key", shared=False)
    def fetch(key):
        pass

    with pytest.raises(RedQueueError, match=r"apply_async\(link=\.\.\.\) is refused"):
        fetch.apply_async(("a",), link=fetch.s("b"))
    with pytest.raises(RedQueueError, match="chains, groups and chords"):
        group(fetch.s(k) for k in "ab").apply_async()
    assert fetch.bucket.stats().enqueued == 0


def test_task_id_names_the_call_and_every_receipt_has_an_id(app, pooled):
    receipt = pooled.apply_async((1,), task_id="order-7")
    assert receipt.kept and receipt.id == receipt.task_id == "order-7"
    other, third = pooled.delay(2), pooled.delay(3)
    assert other.id and third.id and other.id != third.id
    with pytest.raises(RedQueueError, match="task_id must be a non-empty string"):
        pooled.apply_async((4,), task_id="")
