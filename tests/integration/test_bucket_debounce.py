"""Debounce on bucket tasks, with a real worker (issue 33): the latest arguments win, the body
runs once per quiet key with the count of merged calls, at its key's rate."""

import time

from celery_redqueue import BucketTask
from celery_redqueue.errors import RedQueueError

from .conftest import running_worker


def test_twenty_calls_run_once_with_the_last_arguments_after_the_last(app, wait_for):
    runs = []

    @app.task(
        base=BucketTask,
        bucket_key=lambda site, doc, rev: site,
        bucket_rate="100/s",
        bucket_debounce=0.5,
        bucket_dedupe_key=lambda site, doc, rev: doc,
    )
    def reindex(site, doc, rev, count=1):
        runs.append((doc, rev, count, time.monotonic()))

    with running_worker(app):
        for rev in range(20):
            assert reindex.delay("s1", "d1", rev)
            time.sleep(0.05)
        last = time.monotonic()
        wait_for(lambda: reindex.bucket.stats().processed == 1)
        time.sleep(0.3)  # no second run comes
    assert [(d, r, c) for d, r, c, _ in runs] == [("d1", 19, 20)]
    assert runs[0][3] > last  # after the last call
    stats = reindex.bucket.stats()
    assert (stats.debounced, stats.processed, stats.delayed) == (19, 1, 0)


def test_max_wait_runs_a_never_quiet_key(app):
    runs = []

    @app.task(
        base=BucketTask,
        bucket_key=lambda doc, rev: "site",
        bucket_rate="100/s",
        bucket_debounce=30.0,
        bucket_debounce_max_wait=0.5,
        bucket_dedupe_key=lambda doc, rev: doc,
    )
    def reindex(doc, rev, count=1):
        runs.append((rev, count))

    with running_worker(app):
        end = time.monotonic() + 20
        rev = 0
        # a stall of more than the max wait between two calls (a busy CI machine) lets one call
        # run alone; what must hold is that merged runs come while the calls keep coming
        while not any(count >= 2 for _rev, count in runs) and time.monotonic() < end:
            reindex.delay("d1", rev)
            rev += 1
            time.sleep(0.05)
    assert any(count >= 2 for _rev, count in runs), runs  # ran while calls kept coming, merged
    assert [r for r, _count in runs] == sorted(r for r, _count in runs)  # latest args each time
    assert sum(count for _rev, count in runs) <= rev


def test_a_caller_may_not_pass_the_count(app):
    @app.task(
        base=BucketTask,
        bucket_key="doc",
        bucket_debounce=1.0,
        bucket_dedupe_key=lambda doc, count=1: doc,
    )
    def reindex(doc, count=1): ...

    try:
        reindex.delay("d1", count=3)
    except RedQueueError as exc:
        assert "count=" in str(exc)
    else:
        raise AssertionError("count= was accepted")
    assert reindex.bucket.stats().delayed == 0
