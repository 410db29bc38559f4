"""Per-call results (pool_results / bucket_results): the body's outcome is stored under the
receipt's id; off by default."""

import pytest
from celery.result import AsyncResult

from celery_redqueue import BucketTask, CallLostError, CallRefusedError, PoolTask

from .conftest import running_worker


@pytest.fixture
def backend_app(app, redqueue_server_url, redqueue_prefix):
    app.conf.result_backend = redqueue_server_url
    app.conf.result_backend_transport_options = {"global_keyprefix": f"{redqueue_prefix}:res:"}
    return app


def test_a_pooled_calls_result_is_read_by_its_receipts_id(backend_app):
    app = backend_app

    @app.task(base=PoolTask, pool_results=True, pool_drain_interval=None)
    def square(i):
        if i < 0:
            raise ValueError("negative")
        return i * i

    receipts = [square.delay(i) for i in (3, 4, -1)]
    with running_worker(app):
        assert receipts[0].get(timeout=30) == 9
        assert AsyncResult(receipts[1].id, app=app).get(timeout=30) == 16
        with pytest.raises(ValueError, match="negative"):
            receipts[2].get(timeout=30)
    assert receipts[0].state == "SUCCESS" and receipts[2].state == "FAILURE"


def test_a_batch_bodys_return_value_is_each_calls_result(backend_app):
    app = backend_app

    @app.task(base=PoolTask, pool_batch=True, pool_results=True, pool_drain_interval=None)
    def write(calls):
        return len(calls)

    receipts = write.add_many([((i,), {}) for i in range(3)])
    with running_worker(app):
        assert [r.get(timeout=30) for r in receipts] == [3, 3, 3]


def test_a_batch_body_sees_each_calls_receipt_id(backend_app, wait_for):
    """``PoolCall.id`` is the id of the call's receipt when the call carries it (results on),
    so a batch body can tell which call is which; "" when results are off (nothing stored)."""
    app = backend_app
    seen = {}

    @app.task(base=PoolTask, pool_batch=True, pool_results=True, pool_drain_interval=None)
    def with_ids(calls):
        seen.update({c.args[0]: c.id for c in calls})

    @app.task(base=PoolTask, pool_batch=True, pool_drain_interval=None)
    def without_ids(calls):
        seen.update({c.args[0]: c.id for c in calls})

    receipts = {i: with_ids.delay(i) for i in range(3)}
    others = {i: without_ids.delay(i) for i in range(10, 12)}
    with running_worker(app):
        wait_for(lambda: len(seen) == 5, message="5 calls ran")
    assert {i: seen[i] for i in receipts} == {i: r.id for i, r in receipts.items()}
    assert all(others[i].id for i in others) and [seen[10], seen[11]] == ["", ""]


def test_a_refused_call_has_its_result_at_once(backend_app):
    app = backend_app

    @app.task(
        base=PoolTask,
        pool_size=1,
        pool_policy="reject",
        pool_results=True,
        pool_drain_interval=None,
    )
    def record(i):
        return i

    assert record.delay(1).kept
    refused = record.delay(2)
    assert not refused.kept
    with pytest.raises(CallRefusedError, match="not stored"):
        refused.get(timeout=5)


@pytest.mark.parametrize("policy", ["newest", "sample"])
def test_an_evicted_calls_waiter_is_told_at_once(backend_app, policy):
    """A full pool pushes a call out for a later one (counted evicted): with results on, the
    pushed-out call's result is CallLostError, stored by the store that evicted it."""
    app = backend_app

    @app.task(base=PoolTask, pool_size=2, pool_policy=policy, pool_results=True)
    def record(i):
        return i

    receipts = [record.delay(i) for i in range(20)]
    receipts += record.add_many([((i,), {}) for i in range(20, 30)])
    with record.buffer():
        receipts += [record.delay(i) for i in range(30, 40)]
    stats = record.pool.stats()
    assert stats.depth == 2 and stats.evicted > 0
    kept = [AsyncResult(r.id, app=app) for r in receipts if r.kept]
    lost = [r for r in kept if r.state == "FAILURE"]
    # Every kept call evicted since is told; the two still in the pool wait for their drain.
    assert len(lost) == stats.evicted and len(kept) - len(lost) == stats.depth
    with pytest.raises(CallLostError, match="evicted"):
        lost[0].get(timeout=5)
    waiting = [r for r in kept if r.state != "FAILURE"]
    with running_worker(app):
        assert all(isinstance(r.get(timeout=30), int) for r in waiting)


def test_a_bucket_calls_result_and_its_dead_lettered_failure(backend_app):
    app = backend_app

    @app.task(
        base=BucketTask,
        bucket_key="shop",
        bucket_rate="100/s",
        bucket_results=True,
        bucket_max_receives=1,
        bucket_drain_interval=None,
    )
    def notify(shop, order):
        if order == 0:
            raise KeyError("no order 0")
        return f"{shop}:{order}"

    ok, bad = notify.delay("acme", 1), notify.delay("acme", 0)
    with running_worker(app):
        assert ok.get(timeout=30) == "acme:1"
        with pytest.raises(KeyError):
            bad.get(timeout=30)
    assert notify.bucket.stats().dead == 1


def test_results_are_off_by_default(backend_app, redqueue_redis, redqueue_prefix, wait_for):
    app = backend_app
    ran = []

    @app.task(base=PoolTask, pool_drain_interval=None)
    def record(i):
        ran.append(i)
        return i

    receipt = record.delay(5)
    assert receipt.id and receipt.get() is None  # nothing to wait for
    assert receipt.state == "STORED"
    with running_worker(app):
        wait_for(lambda: ran == [5], message="the call ran")
    # (The drain job's own summary is stored, as before; nothing under the call's id.)
    assert not redqueue_redis.exists(f"{redqueue_prefix}:res:celery-task-meta-{receipt.id}")
    assert AsyncResult(receipt.id, app=app).state == "PENDING"


def test_buffered_calls_have_ids_at_once_and_their_results(backend_app):
    app = backend_app

    @app.task(base=PoolTask, pool_results=True, pool_drain_interval=None)
    def double(i):
        return 2 * i

    with double.buffer():
        receipts = [double.delay(i) for i in range(3)]
        ids = [r.id for r in receipts]  # known before the block stores them
    assert len(set(ids)) == 3 and [r.task_id for r in receipts] == ids
    with running_worker(app):
        assert [AsyncResult(i, app=app).get(timeout=30) for i in ids] == [0, 2, 4]
