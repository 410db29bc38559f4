#!/usr/bin/env python
"""Benchmark: what one dashboard refresh costs as structures, keys and items grow.

Run it from the repository root::

    .venv/bin/python bench/dashboard_bench.py            # about a minute
    .venv/bin/python bench/dashboard_bench.py --quick    # a few seconds

It starts its own throwaway Redis (EmbeddedRedis, loopback only), builds structures, and calls
the dashboard's WSGI application directly (no HTTP server) the way the page does on each
refresh: ``GET api/overview`` and ``GET api/structure?id=...`` for the selected structure. It
prints, per scenario, the Redis round trips of one refresh (counted by a client that counts
every command and every pipeline), the bytes the page receives, and the time; beside them, as
the same-run baseline, what a naive reader that lists every key of the bucket would cost. Page
weight (HTML, script, stylesheet) is printed once. Nothing is asserted: the claim to check by
eye is that round trips grow with structures, never with keys or items.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any
from wsgiref.util import setup_testing_defaults

import redis

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.ops.dashboard import Dashboard
from celery_redqueue.ops.reading import Operations
from celery_redqueue.testing import delete_prefix


class CountingRedis(redis.Redis):
    """A client that counts round trips: one per command, one per pipeline execution."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingRedis.round_trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def counted(*args: Any, **kwargs: Any) -> Any:
            CountingRedis.round_trips += 1
            return execute(*args, **kwargs)

        pipe.execute = counted
        return pipe


def get(app: Callable[..., Any], path: str) -> bytes:
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    route, _, query = path.partition("?")
    environ.update(PATH_INFO=route, QUERY_STRING=query, REQUEST_METHOD="GET")
    environ["wsgi.input"] = io.BytesIO()
    statuses = []
    body = b"".join(app(environ, lambda status, headers: statuses.append(status)))
    if not statuses[0].startswith("200"):
        raise RuntimeError(f"{path}: {statuses[0]} {body[:200]!r}")
    return body


def refresh(app: Dashboard, selected: str) -> tuple[int, int, float]:
    """(round trips, bytes, seconds) of one page refresh with ``selected`` open."""
    CountingRedis.round_trips = 0
    start = time.perf_counter()
    size = len(get(app, "/api/overview")) + len(get(app, f"/api/structure?id={selected}"))
    return CountingRedis.round_trips, size, time.perf_counter() - start


def measure(app: Dashboard, selected: str, repeat: int = 3) -> tuple[int, int, float]:
    refresh(app, selected)  # scripts loaded, registry listing read and cached
    runs = [refresh(app, selected) for _ in range(repeat)]
    return runs[-1][0], runs[-1][1], min(r[2] for r in runs)


def naive_keys(client: redis.Redis, bucket: LeakyBucket) -> tuple[int, int, float]:
    """The baseline: list every key of the bucket with its depth (O(keys))."""
    CountingRedis.round_trips = 0
    start = time.perf_counter()
    tails = client.hgetall(bucket.keys("tails"))
    heads = client.hgetall(bucket.keys("heads"))
    size = sum(len(k) + len(v) for k, v in tails.items()) + sum(len(v) for v in heads.values())
    return CountingRedis.round_trips, size, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    structure_counts = [1, 10, 50] if args.quick else [1, 10, 100, 300]
    key_counts = [10, 1000, 10_000] if args.quick else [10, 1000, 10_000, 100_000]

    with EmbeddedRedis() as server:
        client = CountingRedis.from_url(server.url)
        ops_client = CountingRedis.from_url(server.url)

        page = Dashboard(Operations(ops_client, "bench"), token=None)
        weight = {name: len(get(page, path)) for name, path in [
            ("index.html", "/"), ("app.js", "/static/app.js"), ("app.css", "/static/app.css"),
        ]}  # fmt: skip
        print("page weight (bytes, uncompressed, loaded once):", weight, sum(weight.values()))
        print()
        print("structures grow (each pool holds 100 items; the first one is open):")
        print(f"{'pools':>6} {'round trips':>12} {'per pool':>9} {'bytes':>9} {'ms':>8}")
        for count in structure_counts:
            prefix = f"bench{uuid.uuid4().hex[:8]}"
            for i in range(count):
                CappedPool(client, f"p{i:04}", 1000, prefix=prefix).add_many(range(100))
            app = Dashboard(Operations(ops_client, prefix), token=None)
            trips, size, secs = measure(app, "pool:p0000")
            print(f"{count:6} {trips:12} {trips / count:9.2f} {size:9} {secs * 1000:8.1f}")
            delete_prefix(client, prefix)

        print()
        print("keys and items grow in one bucket (it is open, busiest 20 keys listed);")
        print("baseline: a naive reader listing every key's depth (HGETALL), same run:")
        header = f"{'keys':>7} {'items':>8} {'round trips':>12} {'bytes':>8} {'ms':>8}"
        print(f"{header}   | naive: {'round trips':>11} {'bytes':>9} {'ms':>8}")
        for keys in key_counts:
            prefix = f"bench{uuid.uuid4().hex[:8]}"
            bucket = LeakyBucket(client, "crawl", prefix=prefix, default_rate="1/s")
            items = keys * 2
            for start in range(0, items, 5000):
                end = min(start + 5000, items)
                bucket.enqueue_many([(f"key-{n % keys}", n) for n in range(start, end)])
            app = Dashboard(Operations(ops_client, prefix), token=None)
            trips, size, secs = measure(app, "bucket:crawl")
            n_trips, n_size, n_secs = naive_keys(ops_client, bucket)
            print(
                f"{keys:7} {items:8} {trips:12} {size:8} {secs * 1000:8.1f}   | "
                f"       {n_trips:11} {n_size:9} {n_secs * 1000:8.1f}"
            )
            delete_prefix(client, prefix)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
