"""Debounce on capped pools (issue 33): calls with one dedupe id collapse into one delayed
call, the latest payload wins, and it is offered with the count of the calls it merges."""

import time

import pytest

from celery_redqueue import CappedPool
from celery_redqueue.errors import ConfigurationError


def wait_pop(pool, until=10.0):
    end = time.monotonic() + until
    while time.monotonic() < end:
        batch = pool.pop(100)
        if batch:
            return batch
        time.sleep(0.02)
    return pool.pop(100)


def test_latest_payload_wins_with_the_count(redqueue_redis, redqueue_prefix, assert_identities):
    pool = CappedPool(redqueue_redis, "d", 100, prefix=redqueue_prefix, debounce=0.3)
    receipts = [pool.add(i, dedupe_id="k") for i in range(5)]
    pool.add("other", dedupe_id="j")
    assert receipts[0].delayed and all(r.merged for r in receipts[1:])
    stats = pool.stats()
    assert (stats.delayed, stats.debounced) == (6, 4)
    assert not pool.pop(100)  # held: nothing due yet
    batch = wait_pop(pool)
    got = {item.payload: item.count for item in batch.items}
    while len(got) < 2:
        more = wait_pop(pool)
        got.update({item.payload: item.count for item in more.items})
        pool.ack(more)
    assert got == {4: 5, "other": 1}
    pool.ack(batch)
    stats = pool.stats()
    assert (stats.offered, stats.accepted, stats.processed, stats.delayed) == (6, 6, 6, 0)
    assert_identities(stats)
    # The record is forgotten once due: the next call starts a new window.
    assert pool.add(9, dedupe_id="k").delayed


def test_max_wait_caps_a_never_quiet_key(redqueue_redis, redqueue_prefix):
    pool = CappedPool(
        redqueue_redis, "m", 100, prefix=redqueue_prefix, debounce=5.0, debounce_max_wait=0.3
    )
    calls, batch = 0, None
    end = time.monotonic() + 10
    while not batch and time.monotonic() < end:
        pool.add(calls, dedupe_id="k")
        calls += 1
        time.sleep(0.05)
        batch = pool.pop(100)
    # Due while calls kept coming (each pushes the 5 s window), with all of them so far.
    assert batch and (batch.items[0].count, batch.items[0].payload) == (calls, calls - 1)


def test_a_resent_call_changes_nothing(redqueue_redis, redqueue_prefix):
    pool = CappedPool(redqueue_redis, "r", 100, prefix=redqueue_prefix, debounce=5.0)
    args = [5000, 0, "call-1", "0.5", pool.encode("a"), "k"]
    first = pool._run("pool_debounce", args)
    again = pool._run("pool_debounce", args)
    assert first == again
    assert redqueue_redis.zcard(pool.keys("scheduled")) == 1
    assert pool.stats().delayed == 1


def test_bad_options_are_refused(redqueue_redis, redqueue_prefix):
    with pytest.raises(ConfigurationError):
        CappedPool(redqueue_redis, "b", 10, prefix=redqueue_prefix, debounce_max_wait=1.0)
    pool = CappedPool(redqueue_redis, "c", 10, prefix=redqueue_prefix, debounce=1.0)
    with pytest.raises(ConfigurationError):
        pool.add(1, dedupe_id="k", delay=1.0)


@pytest.mark.parametrize(
    "options",
    [
        {"pool_debounce": 1.0},
        {"pool_debounce": 1.0, "pool_dedupe_key": str, "pool_results": True},
        {"pool_debounce_max_wait": 1.0, "pool_dedupe_key": str},
        {"pool_debounce": -1.0, "pool_dedupe_key": str},
    ],
)
def test_bad_task_options_are_refused_at_decoration(options):
    from celery_redqueue import PoolTask

    with pytest.raises(ConfigurationError):
        type("Bad", (PoolTask,), dict(options))


def server_ms(client):
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def test_each_call_moves_the_due_time_to_one_window_after_it(redqueue_redis, redqueue_prefix):
    """On the server's clock (no timing assert): the held call is due exactly one window after
    the latest call, and its first call's time stays."""
    pool = CappedPool(redqueue_redis, "w", 100, prefix=redqueue_prefix, debounce=2.0)
    for n in range(3):
        before = server_ms(redqueue_redis)
        pool.add(n, dedupe_id="k")
        after = server_ms(redqueue_redis)
        (row,) = pool.debounced()
        assert before + 2000 <= row.due * 1000 <= after + 2000
        if n == 0:
            since = row.since
            assert before <= since * 1000 <= after
        assert (row.key, row.since, row.calls) == ("k", since, n + 1)
        time.sleep(0.05)


def test_max_wait_fixes_the_due_time_after_the_first_call(redqueue_redis, redqueue_prefix):
    pool = CappedPool(
        redqueue_redis, "x", 100, prefix=redqueue_prefix, debounce=30.0, debounce_max_wait=0.5
    )
    for n in range(3):
        pool.add(n, dedupe_id="k")
        (row,) = pool.debounced()
        assert row.calls == n + 1 and row.due == pytest.approx(row.since + 0.5, abs=0.0015)


def test_a_call_without_a_dedupe_id_is_not_held(redqueue_redis, redqueue_prefix):
    pool = CappedPool(redqueue_redis, "n", 100, prefix=redqueue_prefix, debounce=30.0)
    assert pool.add("held", dedupe_id="k").delayed
    receipt = pool.add("plain")
    assert receipt.kept and not receipt.delayed and not receipt.merged
    batch = pool.pop(100)
    assert [(item.payload, item.count) for item in batch.items] == [("plain", 1)]
    pool.ack(batch)
    assert [row.key for row in pool.debounced()] == ["k"]


@pytest.mark.parametrize("merging", [{"pool_coalesce": True}, {"pool_debounce": 1.0}])
def test_a_merging_body_without_count_is_refused_at_decoration(merging):
    # The class as @app.task builds it (at once: app.task's proxy would build it only when the
    # app finalizes, and a refusal then would break every task of the app).
    from celery_redqueue import PoolTask

    def task(body, **more):
        options = {"pool_dedupe_key": str, **merging, **more}
        return type("T", (PoolTask,), {"run": staticmethod(body), **options})

    def no_count(doc): ...

    def takes_kwargs(doc, **extra): ...

    def batch_body(calls): ...  # a batch body gets each call's count in its PoolCall

    with pytest.raises(ConfigurationError, match="count"):
        task(no_count)
    task(takes_kwargs)
    task(batch_body, pool_batch=True)
