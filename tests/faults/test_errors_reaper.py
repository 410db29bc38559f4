"""Problem 4 of issue 8: one broken structure must not stop the reaper for the others."""

import time

import pytest

from celery_redqueue import CappedPool, LeakyBucket, PoolTask
from celery_redqueue.tasks import RedQueueTask

FAILED_KEY = "redqueue: failed"  # celery_redqueue.tasks.beat.FAILED_KEY

pytest_plugins = ["tests.faults.fixtures_errors"]

BEAT_LOGGER = "celery_redqueue.tasks.beat"


@pytest.mark.timeout(60)
def test_reaper_carries_on_past_broken_structures(
    redqueue_celery_app, redqueue_redis, redqueue_prefix, log_records
):
    app = redqueue_celery_app
    client, prefix = redqueue_redis, redqueue_prefix
    records = log_records(BEAT_LOGGER)

    # Registered structures are reaped in name order: the broken ones come first.
    wrongtype = LeakyBucket(client, "a-wrongtype", prefix=prefix, default_rate="100/s")
    wrongtype.enqueue("k", "x")
    client.delete(wrongtype.keys("inflight"))
    client.set(wrongtype.keys("inflight"), "another program wrote a string here")

    unreadable = LeakyBucket(client, "b-unreadable", prefix=prefix, default_rate="100/s")
    unreadable.enqueue("k", "x")
    client.set(unreadable.keys("meta"), b"{not json")

    good_bucket = LeakyBucket(
        client, "c-good", prefix=prefix, default_rate="100/s", visibility_timeout=0.05
    )
    good_bucket.enqueue("k", "item")
    assert good_bucket.dequeue().reservation is not None
    good_pool = CappedPool(
        client, "d-good", 10, prefix=prefix, delivery="at_least_once", visibility_timeout=0.05
    )
    good_pool.add("call")
    assert len(good_pool.pop(10)) == 1

    # One of the app's own tasks is broken too (its structure's in-flight key overwritten).
    @app.task(base=PoolTask, shared=False, pool_delivery="at_least_once")
    def broken_task(x):
        pass

    broken_task.delay(1)
    client.delete(broken_task.pool.keys("inflight"))
    client.set(broken_task.pool.keys("inflight"), "not a sorted set")
    time.sleep(0.1)  # both good reservations are now past their deadline

    app.finalize()
    result = app.tasks["celery_redqueue.reap"].apply().get()

    assert result.get("bucket:c-good") == 1
    assert result.get("pool:d-good") == 1
    assert result[FAILED_KEY] == 3
    assert good_bucket.dequeue().reservation.receives == 2
    assert len(good_pool.pop(10)) == 1
    logged = "\n".join(records.messages())
    # bucket_reap checks its keys before it writes: the key is named, nothing written.
    assert "bucket:a-wrongtype" in logged and "holds a string, not a zset" in logged
    assert "bucket:b-unreadable" in logged and "not readable JSON" in logged
    assert broken_task.name in logged


@pytest.mark.timeout(60)
def test_reaper_does_not_raise_when_redis_is_gone(fault_server, make_app, log_records):
    server = fault_server()
    app = make_app(server.url, redqueue_redis_options={"socket_timeout": 2})
    records = log_records(BEAT_LOGGER)

    @app.task(base=PoolTask, shared=False)
    def record(x):
        pass

    record.delay(1)
    server.stop()
    app.finalize()
    result = app.tasks["celery_redqueue.reap"].apply().get()
    # Every redqueue task of the app (shared tasks of other test modules included) and the
    # registry read fail on their own; the job itself returns.
    redqueue_tasks = [t for t in app.tasks.values() if isinstance(t, RedQueueTask)]
    assert record in redqueue_tasks
    assert result[FAILED_KEY] == len(redqueue_tasks) + 1
    assert any("Redis" in m for m in records.messages())
