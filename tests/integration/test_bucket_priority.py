"""Priority tiers on bucket tasks, with a real worker (issue 32): ``apply_async(priority=)``
is the call's tier, higher first within a key and across keys, and a lower tier waits no
longer than ``bucket_priority_bound``."""

import pytest

from celery_redqueue import BucketTask
from celery_redqueue.errors import InvalidArgumentError

from .conftest import running_worker


def test_higher_tiers_run_first_within_and_across_keys(app, wait_for):
    runs = []

    @app.task(base=BucketTask, bucket_key="site", bucket_rate="50/s", bucket_priority_bound=30)
    def fetch(site, n):
        runs.append((site, n))

    # Stored before any worker runs: the tiers decide the order once one does.
    # a.example is eligible longest; b.example's call, later but of tier 5, goes first; within
    # c.example the tier 9 call goes before its earlier tier 0 one.
    for n in range(3):
        fetch.apply_async(("a.example", f"low-{n}"))
    fetch.apply_async(("b.example", "mid"), priority=5)
    fetch.apply_async(("c.example", "c-low"))
    fetch.apply_async(("c.example", "c-urgent"), priority=9)
    with running_worker(app):
        wait_for(lambda: fetch.bucket.stats().processed == 6)
    assert runs[:2] == [("c.example", "c-urgent"), ("b.example", "mid")]
    assert [n for site, n in runs if site == "a.example"] == ["low-0", "low-1", "low-2"]
    assert runs.index(("c.example", "c-low")) > 1


def test_a_lower_tier_waits_no_longer_than_the_bound(app, wait_for):
    runs = []

    @app.task(base=BucketTask, bucket_key="site", bucket_rate="20/s", bucket_priority_bound=0.5)
    def fetch(site, n):
        runs.append(n)

    fetch.apply_async(("a.example", "low"), priority=0)
    with fetch.buffer():
        for n in range(60):
            fetch.apply_async(("a.example", n), priority=9)
    with running_worker(app):
        wait_for(lambda: "low" in runs, timeout=30)
    # 20/s and a 0.5 s bound: about 10 releases of tier 9 first, far fewer than 60.
    assert 1 <= runs.index("low") <= 30, runs


def test_priority_is_refused_out_of_range_and_stores_nothing(app):
    @app.task(base=BucketTask, bucket_key="site", bucket_priority_bound=30)
    def fetch(site):
        pass

    with pytest.raises(InvalidArgumentError, match="0-9"):
        fetch.apply_async(("a.example",), priority=10)
    assert fetch.bucket.stats().depth == 0


def test_without_tiers_priority_stays_the_drain_jobs(app):
    @app.task(base=BucketTask, bucket_key="site")
    def fetch(site):
        pass

    assert fetch.apply_async(("a.example",), priority=3).kept
    assert fetch.bucket.key_stats("a.example").depth == 1
