"""Debounce, and throttle (a dedupe window), on pooled tasks, with a real worker (issue 33)."""

import time

from celery_redqueue import PoolTask

from .conftest import running_worker


def test_twenty_calls_run_once_with_the_last_arguments_after_the_last(app, wait_for):
    runs = []

    @app.task(base=PoolTask, pool_size=100, pool_debounce=0.5, pool_dedupe_key=lambda doc, rev: doc)
    def reindex(doc, rev, count=1):
        runs.append((doc, rev, count, time.monotonic()))

    with running_worker(app):
        for rev in range(20):
            reindex.delay("d1", rev)
            time.sleep(0.05)
        last = time.monotonic()
        wait_for(lambda: reindex.pool.stats().processed == 20)
    assert [(d, r, c) for d, r, c, _ in runs] == [("d1", 19, 20)]
    assert runs[0][3] > last  # after the last call
    assert reindex.pool.stats().debounced == 19


def test_max_wait_runs_a_never_quiet_key(app, wait_for):
    runs = []

    @app.task(
        base=PoolTask,
        pool_size=100,
        pool_debounce=30.0,
        pool_debounce_max_wait=0.5,
        pool_dedupe_key=lambda doc, rev: doc,
    )
    def reindex(doc, rev, count=1):
        runs.append((rev, count))

    with running_worker(app):
        end = time.monotonic() + 20
        rev = 0
        while not runs and time.monotonic() < end:
            reindex.delay("d1", rev)
            rev += 1
            time.sleep(0.05)
    assert runs and runs[0][1] >= 2  # ran while calls kept coming, with the calls merged


def test_throttle_keeps_the_first_and_counts_the_dropped(app, wait_for):
    # Throttle is a dedupe key with a window: the first call runs, later ones are refused.
    runs = []

    @app.task(base=PoolTask, pool_size=100, pool_dedupe_window=60.0, pool_dedupe_key=lambda n: "k")
    def hook(n):
        runs.append(n)

    receipts = [hook.delay(i) for i in range(10)]
    assert receipts[0].kept and all(r.duplicate for r in receipts[1:])
    with running_worker(app):
        wait_for(lambda: hook.pool.stats().processed == 1)
    assert runs == [0] and hook.pool.stats().duplicates == 9
