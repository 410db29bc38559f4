"""Operator tools on debouncing pools (issue 33): `redqueue debounced NAME` (the dedupe ids
holding a call: since when, due when, calls merged so far), the same read on a sharded pool,
and the pool's detail in the dashboard in a real headless Chromium."""

import json
import re
import time

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.ops.reading import Operations

from .test_cli import redqueue

POOL = "proj.tasks.reindex"


def _pool(client, prefix, **options):
    """Three dedupe ids waiting: "doc-1" with 3 calls, "doc-2" with 1, "doc-3" with 2 (due
    last: its window restarted last); one plain delayed call, which is not listed."""
    pool = CappedPool(client, POOL, 100, prefix=prefix, debounce=60.0, **options)
    start = time.time()
    for i in range(3):
        pool.add({"doc": 1, "rev": i}, dedupe_id="doc-1")
    pool.add({"doc": 2}, dedupe_id="doc-2")
    pool.add({"doc": 3, "rev": 0}, dedupe_id="doc-3")
    time.sleep(0.05)
    pool.add({"doc": 3, "rev": 1}, dedupe_id="doc-3")
    return pool, start


def test_debounced_keys_are_read_soonest_due_first(redqueue_redis, redqueue_prefix):
    pool, start = _pool(redqueue_redis, redqueue_prefix)
    rows = pool.debounced()
    assert [(r.key, r.calls) for r in rows] == [("doc-1", 3), ("doc-2", 1), ("doc-3", 2)]
    assert all(start - 1 <= r.since <= time.time() + 1 for r in rows)
    assert all(abs(r.due - (r.since + 60)) < 2 for r in rows[:2])
    assert rows[2].due - rows[2].since >= 60.04  # the window restarted on its second call
    assert [r.key for r in pool.debounced(limit=2)] == ["doc-1", "doc-2"]
    view = Operations(redqueue_redis, redqueue_prefix).debounced_keys(
        Operations(redqueue_redis, redqueue_prefix).find(f"pool:{POOL}")
    )
    assert [(v["key"], v["calls"]) for v in view] == [("doc-1", 3), ("doc-2", 1), ("doc-3", 2)]
    assert all(58 < v["due_in"] <= 60 for v in view)


def test_a_sharded_pool_lists_every_shard(redqueue_redis, redqueue_prefix):
    pool = CappedPool(
        redqueue_redis, "sharded", 100, prefix=redqueue_prefix, debounce=30.0, shards=4
    )
    for n in range(12):
        for _ in range(n % 3 + 1):
            pool.add(n, dedupe_id=f"k{n}")
    rows = pool.debounced()
    assert {r.key: r.calls for r in rows} == {f"k{n}": n % 3 + 1 for n in range(12)}
    assert [r.due for r in rows] == sorted(r.due for r in rows)
    assert len(pool.debounced(limit=5)) == 5


def test_cli_lists_debounced_keys(proc_env, redqueue_redis, redqueue_prefix):
    _pool(redqueue_redis, redqueue_prefix)
    out = redqueue(proc_env, "debounced", "reindex").stdout
    assert f"pool:{POOL}: 3 debounced keys waiting (debounce 60s)" in out
    lines = [line.split() for line in out.splitlines()[2:]]
    assert [(line[0], line[-1]) for line in lines] == [
        ("doc-1", "3"),
        ("doc-2", "1"),
        ("doc-3", "2"),
    ]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", line[1]) for line in lines)

    data = json.loads(redqueue(proc_env, "debounced", f"pool:{POOL}", "--json").stdout)
    assert data["debounce"] == 60.0
    assert [(r["key"], r["calls"]) for r in data["waiting"]] == [
        ("doc-1", 3),
        ("doc-2", 1),
        ("doc-3", 2),
    ]
    assert all(r["since"] < r["due"] for r in data["waiting"])


def test_dashboard_shows_debounced_keys(dashboard, browser, redqueue_redis, redqueue_prefix):
    base, _ = dashboard
    _pool(redqueue_redis, redqueue_prefix)
    page = browser.new_page()
    page.goto(base + f"#pool%3A{POOL}")
    page.wait_for(
        "document.querySelectorAll('#debounced tbody tr').length === 3", message="debounced keys"
    )
    rows = page.eval(
        "[...document.querySelectorAll('#debounced tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )
    assert [(r[0], r[3]) for r in rows] == [("doc-1", "3"), ("doc-2", "1"), ("doc-3", "2")]
    assert all(re.search(r"\(in \S+\)$", r[2]) for r in rows), rows
    assert page.eval("document.getElementById('debounced-box').hidden") is False
    page.screenshot("debounced")


def test_a_debouncing_bucket_lists_its_keys_in_the_cli_and_the_dashboard(
    proc_env, dashboard, browser, redqueue_redis, redqueue_prefix
):
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix, debounce=60.0)
    for n in range(3):
        for _ in range(n + 1):
            bucket.enqueue(f"site-{n}.example", {"n": n}, dedupe_id=f"https://site-{n}.example/")
    bucket.enqueue("site-9.example", "plain", delay=30)  # a plain delayed call: not listed
    rows = bucket.debounced()
    assert [(r.key, r.calls) for r in rows] == [
        (f"https://site-{n}.example/", n + 1) for n in range(3)
    ]
    data = json.loads(redqueue(proc_env, "debounced", "bucket:crawl", "--json").stdout)
    assert [(r["key"], r["calls"]) for r in data["waiting"]] == [(r.key, r.calls) for r in rows]
    assert data["debounce"] == 60.0

    base, _ = dashboard
    page = browser.new_page()
    page.goto(base + "#bucket%3Acrawl")
    page.wait_for(
        "document.querySelectorAll('#debounced tbody tr').length === 3", message="debounced keys"
    )
    keys = page.eval(
        "[...document.querySelectorAll('#debounced tbody tr')].map((tr) => tr.cells[0].textContent)"
    )
    assert keys == [r.key for r in rows]
    page.screenshot("debounced-bucket")
