"""Buffered producers (``with task.buffer():`` / ``buffer()``) on a real Redis, real workers.

Round trips are counted with the server's own counter of script calls (``INFO commandstats``,
``cmdstat_evalsha``): a logical bound, not a timing. No worker runs while counting, so every
script call on the server is one of the producer's.
"""

import asyncio
import threading

import pytest

from celery_redqueue import (
    BucketTask,
    BufferedReceipt,
    ConfigurationError,
    PoolTask,
    Receipt,
    ReceiptNotReadyError,
    RedisUnavailableError,
    RedQueueError,
    buffer,
)
from celery_redqueue.redis.lua import script
from celery_redqueue.tasks.config import forget_config

from .conftest import running_worker


def script_calls(client):
    """Scripts run on the server so far (every pool or bucket store is one)."""
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


@pytest.fixture
def recorded():
    return []


@pytest.fixture
def pooled(app, recorded):
    @app.task(base=PoolTask, pool_size=5000)
    def record(x, y=0):
        recorded.append(x + y)

    return record


@pytest.fixture
def limited(app, recorded):
    @app.task(base=BucketTask, bucket_key="user", bucket_rate="1000/s")
    def notify(user, n):
        recorded.append((user, n))

    return notify


def test_fifty_calls_pay_one_round_trip_and_all_run(
    app, pooled, recorded, redqueue_redis, wait_for
):
    pooled.delay(-1)  # first call of the process also registers the pool
    before = script_calls(redqueue_redis)
    for i in range(50):
        pooled.delay(i)
    unbuffered = script_calls(redqueue_redis) - before

    before = script_calls(redqueue_redis)
    with pooled.buffer() as held:
        receipts = [pooled.delay(100 + i, y=1) for i in range(50)]
        assert len(held) == 50
        assert script_calls(redqueue_redis) == before  # nothing sent inside the block
    assert script_calls(redqueue_redis) - before == 1
    assert unbuffered == 50

    assert all(isinstance(r, BufferedReceipt) and r.ready for r in receipts)
    assert all(r.kept and isinstance(r.result, Receipt) and r for r in receipts)
    assert sum(r.drain_needed for r in receipts) <= 1
    with running_worker(app):
        wait_for(lambda: pooled.pool.stats().processed == 101, message="101 processed")
    assert sorted(recorded) == sorted([-1, *range(50), *range(101, 151)])


def test_one_round_trip_per_thousand(app, pooled, redqueue_redis):
    pooled.delay(0)
    before = script_calls(redqueue_redis)
    with buffer():
        for i in range(2500):
            pooled.delay(i)
    assert script_calls(redqueue_redis) - before == 3
    assert pooled.pool.stats().depth == 2501


def test_receipt_cannot_be_read_inside_the_block(pooled):
    with pooled.buffer():
        receipt = pooled.delay(1)
        assert not receipt.ready
        with pytest.raises(ReceiptNotReadyError, match="buffered"):
            _ = receipt.kept
        with pytest.raises(ReceiptNotReadyError):
            bool(receipt)
    assert receipt.kept


def test_bad_calls_raise_at_the_call_site_and_are_not_held(pooled):
    with pooled.buffer() as held:
        pooled.delay(1)
        with pytest.raises((TypeError, RedQueueError)):  # Celery's own signature check
            pooled.delay(1, 2, 3)  # too many arguments for the body
        with pytest.raises(RedQueueError):
            pooled.delay(object())  # not JSON
        with pytest.raises(RedQueueError):
            pooled.apply_async((1,), countdown=1, eta="2030-01-01T00:00:00")
        assert len(held) == 1
    assert pooled.pool.stats().depth == 1


def test_an_exception_discards_the_block_unless_asked(pooled):
    with pytest.raises(ZeroDivisionError), pooled.buffer():
        receipt = pooled.delay(1)
        raise ZeroDivisionError
    assert pooled.pool.stats().offered == 0
    with pytest.raises(ReceiptNotReadyError, match="discarded"):
        _ = receipt.kept

    with pytest.raises(ZeroDivisionError), pooled.buffer(flush_on_error=True):
        receipt = pooled.delay(2)
        raise ZeroDivisionError
    assert receipt.kept and pooled.pool.stats().depth == 1


def test_other_threads_are_not_buffered(pooled):
    seen = []
    with pooled.buffer() as held:
        worker = threading.Thread(target=lambda: seen.append(pooled.delay(7)))
        worker.start()
        worker.join(30)
        assert len(held) == 0
        assert pooled.pool.stats().depth == 1  # stored by the other thread at once
    assert isinstance(seen[0], Receipt) and seen[0].kept


def test_nested_blocks_each_store_their_own(app, pooled, limited, recorded, wait_for):
    with buffer() as outer:
        first = pooled.delay(1)
        with pooled.buffer() as inner:
            second = pooled.delay(2)
            third = limited.delay("ann", 3)  # not covered by the inner block
        assert second.kept and not first.ready and not third.ready
        assert (len(inner), len(outer)) == (0, 2)
    assert first.kept and third.kept
    with running_worker(app):
        wait_for(lambda: len(recorded) == 3, message="3 calls run")
    assert sorted(map(str, recorded)) == ["('ann', 3)", "1", "2"]


def test_buckets_and_pools_together(app, pooled, limited, recorded, redqueue_redis, wait_for):
    pooled.delay(0)
    limited.delay("warm", 0)
    # The batch script, loaded now: a first use on this server would count twice (NOSCRIPT).
    redqueue_redis.script_load(script("bucket_enqueue").source)
    before = script_calls(redqueue_redis)
    with buffer():
        receipts = [limited.delay(f"user{i % 5}", i) for i in range(40)]
        pooled.delay(1)
        delayed = limited.apply_async(("later", 1), countdown=0.5)
    assert script_calls(redqueue_redis) - before == 3  # bucket, bucket delayed, pool
    assert all(isinstance(r.result, Receipt) and r.kept for r in receipts)
    assert delayed.delayed
    with running_worker(app):
        wait_for(lambda: len(recorded) == 44, message="44 calls run")
    assert ("later", 1) in recorded


def test_a_failed_store_fails_every_receipt_it_did_not_store(app, pooled):
    app.conf.redqueue_url = "redis://127.0.0.1:1/0"  # nothing listens there
    forget_config(app)
    pooled.__dict__.pop("pool", None)
    pooled.__dict__.pop("structure", None)
    with pytest.raises(RedisUnavailableError), pooled.buffer():
        receipt = pooled.delay(1)
    with pytest.raises(ReceiptNotReadyError, match="not stored"):
        _ = receipt.kept


def test_eager_mode_runs_at_once(app, pooled, recorded):
    app.conf.task_always_eager = True
    with pooled.buffer() as held:
        pooled.delay(5)
        assert recorded == [5] and len(held) == 0


def test_buffer_takes_only_redqueue_tasks(app):
    @app.task
    def plain():
        pass

    with pytest.raises(ConfigurationError, match="buffer"):
        buffer(plain)


def test_asyncio_tasks_have_their_own_buffers(pooled):
    async def request(n):
        with pooled.buffer() as held:
            for i in range(n):
                pooled.delay(i)
                await asyncio.sleep(0)  # the other request runs here, inside its own block
            return len(held)

    async def both():
        return await asyncio.gather(request(3), request(5))

    assert asyncio.run(both()) == [3, 5]
    assert pooled.pool.stats().depth == 8


def test_dedupe_ids_apply_inside_one_buffer(app, redqueue_redis):
    @app.task(base=PoolTask, pool_size=100, pool_dedupe_key=lambda order: f"order-{order}")
    def confirm(order):
        pass

    with confirm.buffer():
        first, again, other = confirm.delay(7), confirm.delay(7), confirm.delay(8)
    assert (first.kept, again.duplicate, other.kept) == (True, True, True)
    assert confirm.pool.stats().depth == 2
