#!/usr/bin/env python
"""Benchmark: what the twin script bucket_enqueue_plain buys over bucket_enqueue, in the same run.

    .venv/bin/python bench/bucket_twin.py [--calls 20000] [--rounds 40]

One `.delay()`-shaped enqueue (one call, no delay, no dedupe id) over 100 keys, on two buckets
of the same settings: one as it runs (bucket_enqueue_plain), one whose every call takes the
general script (bucket_enqueue). Interleaved chunks (producer_cost.measure), so machine load
weighs on both alike. Issue 31 keeps a twin only where it buys more than 10 % on the producer.
Starts its own throwaway Redis (loopback only). Reports; never asserts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import redis

from celery_redqueue import LeakyBucket
from celery_redqueue.embedded import EmbeddedRedis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import measure


def _side(bucket: LeakyBucket) -> Callable[[range], None]:
    def chunk(calls: range) -> None:
        for i in calls:
            bucket.enqueue(f"k{i % 100}", i)

    return chunk


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url)
        options = {"default_rate": "1000000/s", "drain_lease": 3600}
        plain = LeakyBucket(client, "plain", prefix="bench:twin:a", **options)
        general = LeakyBucket(client, "general", prefix="bench:twin:b", **options)
        general._enqueue_plain = lambda call: None  # type: ignore[method-assign]
        sides = measure(
            client,
            args.calls,
            args.rounds,
            {"bucket_enqueue_plain": _side(plain), "bucket_enqueue": _side(general)},
        )
    finally:
        server.stop()
    print(f"\n{args.calls} calls per side, {args.rounds} interleaved chunks\n")
    print("| script | us/call | server us/script |")
    print("|---|---|---|")
    for s in sides.values():
        print(f"| {s.name} | {s.usec_per_call:.1f} | {s.script_usec / s.scripts:.1f} |")
    twin, full = sides.values()
    print(f"\nthe twin buys {100 * (1 - twin.usec_per_call / full.usec_per_call):.1f} % per call")


if __name__ == "__main__":
    main()
