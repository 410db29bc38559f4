"""Celery's retry contract on every kind, with a real worker (docs/semantics.md, "Retries"):
the gaps between runs follow ``retry_backoff`` and ``self.retry(countdown=)`` on pools (both
delivery modes, per-call and batch bodies), buckets and streams; nothing is dead-lettered before
``max_retries`` or ``*_max_receives`` runs out; a retry is counted as one (not a failure) and
logged as Celery logs it (INFO, no traceback).

Bounds are logical: the n-th run never starts before its retry was due (each delay is measured
from the previous run's start, which precedes the ack that scheduled it), with a generous upper
bound only to show the call was not left waiting for something else (a beat, a reaper).
"""

from __future__ import annotations

import itertools
import logging
import time

import pytest

from celery_redqueue import BucketTask, PoolTask, StreamTask

from .conftest import running_worker

#: Redis's clock counts whole milliseconds (a due time is floored): slack for the lower bound.
MS = 0.002
#: Far above any scheduling delay of an idle worker; only a stranded retry comes near it.
LATE = 15.0


def gaps(times):
    return [b - a for a, b in itertools.pairwise(times)]


def assert_waited(times, delays):
    """Run n+1 started no earlier than ``delays[n]`` after run n, and not stranded."""
    assert len(times) == len(delays) + 1, times
    for gap, delay in zip(gaps(times), delays, strict=True):
        assert delay - MS <= gap < delay + LATE, (gaps(times), delays)


def retry_records(caplog):
    return [r for r in caplog.records if " retry: " in r.getMessage()]


def assert_logged_as_retries(caplog, count, delays):
    records = retry_records(caplog)
    assert len(records) == count, [r.getMessage() for r in records]
    for record, delay in zip(records, delays, strict=False):
        assert record.levelno == logging.INFO and record.exc_info is None
        assert f"retry: Retry in {delay:g}s: ValueError('upstream down')" in record.getMessage()


@pytest.mark.parametrize("batch", [False, True], ids=["per-call", "batch-body"])
def test_at_least_once_pool_retries_follow_retry_backoff(app, wait_for, caplog, batch):
    caplog.set_level(logging.INFO, logger="celery_redqueue")
    runs: dict[int, list[float]] = {1: [], 2: []}
    dead_seen = []

    @app.task(
        base=PoolTask,
        pool_delivery="at_least_once",
        pool_max_receives=5,
        pool_batch=batch,
        pool_drain_interval=None,
        autoretry_for=(ValueError,),
        retry_backoff=1,
        retry_jitter=False,
        max_retries=2,
    )
    def flaky(*args):
        xs = [c.args[0] for c in args[0]] if batch else [args[0]]
        for x in xs:
            runs[x].append(time.monotonic())
        dead_seen.append(flaky.pool.stats().dead)
        raise ValueError("upstream down")

    flaky.add_many([((1,), {}), ((2,), {})])
    with running_worker(app, pool="threads", concurrency=1):
        wait_for(lambda: flaky.pool.stats().dead == 2, timeout=60)
    # First try, then max_retries=2 retries after 1 s and 2 s (Celery's backoff), per call: a
    # batch body's failed batch goes back whole, each call by its own receives.
    assert_waited(runs[1], [1.0, 2.0])
    assert_waited(runs[2], [1.0, 2.0])
    # Nothing dead-lettered before max_retries ran out: only the second call's final run can
    # see the first call's dead letter.
    assert dead_seen[:-2] == [0] * (len(dead_seen) - 2) and dead_seen[-2:] in ([0, 1], [0, 0])
    stats = flaky.pool.stats()
    assert (stats.retried, stats.failed, stats.dead, stats.depth) == (4, 0, 2, 0)
    assert sorted(letter.receives for letter in flaky.pool.dead_letters()) == [3, 3]
    if batch:  # a batch's retry is logged once; its calls come back one by one (received before)
        assert_logged_as_retries(caplog, 3, [1, 2, 2])
    else:
        assert_logged_as_retries(caplog, 4, [1, 1, 2, 2])


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
def test_self_retry_countdown_on_a_pool_is_a_retry(app, wait_for, caplog, delivery):
    caplog.set_level(logging.INFO, logger="celery_redqueue")
    runs = []

    @app.task(
        base=PoolTask,
        bind=True,
        pool_delivery=delivery,
        pool_drain_interval=None,
    )
    def sync(self, x):
        runs.append(time.monotonic())
        raise self.retry(countdown=2, max_retries=1, exc=ValueError("upstream down"))

    sync.delay(1)
    with running_worker(app, pool="threads", concurrency=1):
        stats = sync.pool.stats
        wait_for(lambda: stats().dead + stats().failed == 1, timeout=60)
    assert_waited(runs, [2.0])
    stats = sync.pool.stats()
    # Past max_retries the call is done: dead-lettered at least once, failed at most once.
    final = (0, 1) if delivery == "at_least_once" else (1, 0)
    assert (stats.retried, (stats.failed, stats.dead)) == (1, final)
    assert_logged_as_retries(caplog, 1, [2])


def test_max_receives_ends_retries_that_max_retries_would_allow(app, wait_for):
    runs = []

    @app.task(
        base=PoolTask,
        pool_delivery="at_least_once",
        pool_max_receives=2,
        pool_drain_interval=None,
        autoretry_for=(ValueError,),
        default_retry_delay=0.2,
        max_retries=10,
    )
    def flaky(x):
        runs.append(time.monotonic())
        raise ValueError("upstream down")

    flaky.delay(1)
    with running_worker(app, pool="threads", concurrency=1):
        wait_for(lambda: flaky.pool.stats().dead == 1, timeout=60)
    assert_waited(runs, [0.2])  # dead-lettered when either limit runs out: here receives
    (letter,) = flaky.pool.dead_letters()
    assert letter.receives == 2


def test_bucket_retries_follow_retry_backoff(app, wait_for, caplog):
    caplog.set_level(logging.INFO, logger="celery_redqueue")
    runs = []
    dead_seen = []

    @app.task(
        base=BucketTask,
        bucket_key=lambda x: "k",
        bucket_rate="100/s",
        bucket_drain_interval=None,
        autoretry_for=(ValueError,),
        retry_backoff=1,
        retry_jitter=False,
        max_retries=2,
    )
    def fetch(x):
        runs.append(time.monotonic())
        dead_seen.append(fetch.bucket.stats().dead)
        raise ValueError("upstream down")

    fetch.delay(1)
    with running_worker(app, pool="threads", concurrency=1):
        wait_for(lambda: fetch.bucket.stats().dead == 1, timeout=60)
    assert_waited(runs, [1.0, 2.0])
    assert set(dead_seen) == {0}
    assert fetch.bucket.stats().retried == 2
    assert_logged_as_retries(caplog, 2, [1, 2])


def test_stream_retries_follow_retry_backoff(app, wait_for, caplog):
    caplog.set_level(logging.INFO, logger="celery_redqueue")
    runs = []
    dead_seen = []

    @app.task(
        base=StreamTask,
        stream_name="orders",
        stream_group="retrying",
        stream_max_receives=5,
        stream_drain_interval=None,
        autoretry_for=(ValueError,),
        retry_backoff=1,
        retry_jitter=False,
        max_retries=2,
    )
    def handle(event):
        runs.append(time.monotonic())
        dead_seen.append(len(handle.stream.dead_letters()))
        raise ValueError("upstream down")

    handle.stream.publish("order-1")
    with running_worker(app, pool="threads", concurrency=1):
        wait_for(lambda: handle.stream.dead_letters(), timeout=60)
    assert_waited(runs, [1.0, 2.0])
    assert set(dead_seen) == {0}
    (letter,) = handle.stream.dead_letters()
    assert letter.receives == 3
    figures = handle.stream.group_figures("retrying")
    assert (figures.retried, figures.dead) == (2, 1)
    assert_logged_as_retries(caplog, 2, [1, 2])


@pytest.mark.parametrize("how", ["self-retry", "autoretry_for"])
def test_an_eager_pool_call_retries_under_its_own_request(app, how):
    # Celery before 5.5 ran the body under a bare request (no id, called_directly): there
    # self.retry() and autoretry_for re-raised at once instead of retrying.
    runs = []

    @app.task(
        base=PoolTask,
        bind=True,
        max_retries=3,
        autoretry_for=(ValueError,) if how == "autoretry_for" else (),
    )
    def sync(self, x):
        request = self.request
        runs.append((request.id, request.retries, request.is_eager, request.called_directly))
        if request.retries < 2:
            if how == "autoretry_for":
                raise ValueError("upstream down")
            raise self.retry(countdown=5, exc=ValueError("upstream down"))
        return x * 2

    app.conf.task_always_eager = True
    result = sync.delay(21)
    assert (result.get(), result.state) == (42, "SUCCESS")
    assert runs == [(result.id, n, True, False) for n in range(3)]
    assert sync.pool.stats().offered == 0  # run at once, never stored
    # .apply() is the same eager run, with or without the setting.
    app.conf.task_always_eager = False
    runs.clear()
    applied = sync.apply((4,), task_id="applied-1")
    assert (applied.get(), runs) == (8, [("applied-1", n, True, False) for n in range(3)])
