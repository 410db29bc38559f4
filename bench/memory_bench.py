#!/usr/bin/env python
"""Benchmark: Redis memory per stored call, for every structure kind, beside bare baselines.

Run it from the repository root::

    .venv/bin/python bench/memory_bench.py               # 100k and 1M calls, a few minutes
    .venv/bin/python bench/memory_bench.py --sizes 20000 # one smaller size, a few seconds

It starts its own throwaway Redis (EmbeddedRedis, loopback only). For each structure and size
it stores that many calls under a fresh key prefix, reads ``INFO memory`` ``used_memory``
before and after, prints the difference per call, and deletes the prefix's keys before the
next one. Every side stores the same payloads (serialized as a pooled task stores a call):

* a bare sorted set (ZADD, random scores) and a bare list (RPUSH) of the payloads: the
  baselines, what the payloads cost with nothing else kept;
* a CappedPool for each policy and delivery mode (and one coalescing pool), filled with
  ``add_many`` (no drain job runs: every call waits in the pool);
* a LeakyBucket (the calls spread over ``--bucket-keys`` keys) and an EventStream with one
  consumer group.

Reports; never asserts. ``used_memory`` includes the allocator's rounding, which is part of what
a call costs.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import redis

from celery_redqueue import CappedPool, EventStream, LeakyBucket
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.redis.serializers import get_serializer
from celery_redqueue.testing import delete_prefix

CHUNK = 1000
BARE_ZSET = "bare sorted set (ZADD payload)"
BARE_LIST = "bare list (RPUSH payload)"


def payloads(n: int) -> Iterator[bytes]:
    """Calls as a pooled task stores them, ``[args, kwargs]`` as JSON, about 100 bytes each
    (every one distinct, as the calls of a real workload mostly are)."""
    dumps = get_serializer("json").dumps
    for i in range(n):
        yield dumps(
            [[i, "page_view", {"path": f"/shop/items/{i * 7919 % 100_000}", "ref": "mail"}], {}]
        )


def chunks(n: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for data in payloads(n):
        batch.append(data)
        if len(batch) == CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass
class Side:
    name: str
    #: Stores n calls under the prefix.
    fill: Callable[[Any, str, int], None]


def bare_zset(client: Any, prefix: str, n: int) -> None:
    key = f"{prefix}:zset"
    for batch in chunks(n):
        client.zadd(key, {data: random.random() for data in batch})


def bare_list(client: Any, prefix: str, n: int) -> None:
    key = f"{prefix}:list"
    for batch in chunks(n):
        client.rpush(key, *batch)


def pool_side(policy: str, delivery: str, coalesce: bool = False) -> Side:
    def fill(client: Any, prefix: str, n: int) -> None:
        pool = CappedPool(
            client, "mem", n, policy=policy, delivery=delivery, coalesce=coalesce, prefix=prefix
        )
        for batch in chunks(n):
            pool.store_encoded(batch)
        depth = pool.stats().depth
        if depth != n:
            raise RuntimeError(f"{pool!r} holds {depth} calls, not {n}")

    name = f"pool {policy}, {delivery.replace('_', '-')}" + (", coalesce" if coalesce else "")
    return Side(name, fill)


def bucket_side(keys: int) -> Side:
    def fill(client: Any, prefix: str, n: int) -> None:
        bucket = LeakyBucket(client, "mem", prefix=prefix)
        i = 0
        for batch in chunks(n):
            encoded = [(f"k{(i + j) % keys}", data) for j, data in enumerate(batch)]
            i += len(batch)
            bucket.store_encoded(encoded)

    return Side(f"bucket ({keys} keys)", fill)


def stream_side(client: Any, prefix: str, n: int) -> None:
    stream = EventStream(client, "mem", groups=["g"], prefix=prefix)
    loads = stream.serializer.loads
    for batch in chunks(n):
        stream.publish_many([loads(data) for data in batch])


def sides(bucket_keys: int) -> list[Side]:
    return [
        Side(BARE_ZSET, bare_zset),
        Side(BARE_LIST, bare_list),
        *(
            pool_side(policy, delivery)
            for policy in ("sample", "newest", "reject")
            for delivery in ("at_most_once", "at_least_once")
        ),
        pool_side("sample", "at_most_once", coalesce=True),
        bucket_side(bucket_keys),
        Side("stream (1 group)", stream_side),
    ]


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


def measure(client: Any, side: Side, n: int) -> float:
    """Bytes per call ``side`` costs at ``n`` calls (fresh prefix, cleaned up after)."""
    prefix = f"membench:{uuid.uuid4().hex[:8]}"
    before = used_memory(client)
    side.fill(client, prefix, n)
    after = used_memory(client)
    delete_prefix(client, prefix)
    return (after - before) / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="calls per measure"
    )
    parser.add_argument("--bucket-keys", type=int, default=100, help="keys the bucket spreads over")
    parser.add_argument("--only", nargs="+", help="run only sides whose name contains one of these")
    args = parser.parse_args(argv)
    started = time.monotonic()
    table: dict[str, dict[int, float]] = {}
    chosen = [
        side
        for side in sides(args.bucket_keys)
        if side.name in (BARE_ZSET, BARE_LIST)
        or not args.only
        or any(word in side.name for word in args.only)
    ]
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        try:
            for n in args.sizes:
                for side in chosen:
                    table.setdefault(side.name, {})[n] = measure(client, side, n)
                    print(
                        f"  {side.name}, {n:,} calls: {table[side.name][n]:.0f} B/call",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            client.close()
    size = len(next(payloads(1)))
    print(
        f"\nRedis memory per stored call (INFO memory used_memory delta / calls), payloads of "
        f"about {size} bytes as a pooled task stores them"
    )
    header = ["structure"]
    for n in args.sizes:
        header += [f"B/call at {n:,}", "x sorted set"]
    rows = []
    for name, per_size in table.items():
        row = [name]
        for n in args.sizes:
            base = table[BARE_ZSET][n]
            row += [f"{per_size[n]:,.0f}", f"{per_size[n] / base:.2f}x"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        print("| " + " | ".join(cells) + " |")
    print(f"\nTotal run time {time.monotonic() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
