"""Sharded structures on a Redis Cluster: throughput of one logical pool or bucket with 1 shard
beside the same with 3 shards, from several producer processes, in one run.

It starts its own throwaway 3-master cluster (EmbeddedRedisCluster, loopback only, the slots
split evenly) and, for each row, runs the 1-shard and the 3-shard structure alternately
(``--rounds`` times each, swapping which goes first) so that a change in machine load weighs on
both alike. It prints each figure beside its 1-shard baseline and never asserts.

Rows:

- ``pool.add()``: ``--producers`` processes each make ``--calls`` single adds (one round trip
  each) to one pool; calls/s over the time from the first start to the last finish.
- ``pool.add_many(100)``: the same calls, 100 per call (one round trip per shard touched).
- ``bucket.enqueue()``: single enqueues, keys drawn from 1,000.
- ``pool drain``: as many consumer processes pop 100 and ack until the pool is empty.

Under the table: how the server CPU time spent during the ``pool.add()`` rows was spread over
the three masters (``INFO cpu``), which says whether sharding moved work off the hot node.

Usage::

    .venv/bin/python bench/shards_bench.py            # about a minute on 2 cores
    .venv/bin/python bench/shards_bench.py --quick    # smoke test
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.embedded import EmbeddedRedisCluster
from celery_redqueue.redis.client import make_client

CAPACITY = 10_000_000  # nothing is shed: the figures measure storing, not shedding


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def open_structure(url: str, prefix: str, kind: str, shards: int) -> Any:
    client = make_client(url)
    if kind == "bucket":
        return LeakyBucket(client, "bench", shards=shards, prefix=prefix, default_rate="1000000/s")
    return CappedPool(client, "bench", CAPACITY, shards=shards, prefix=prefix)


def producer(
    url: str, prefix: str, kind: str, shards: int, op: str, calls: int, start: Any, out: Any
) -> None:
    structure = open_structure(url, prefix, kind, shards)
    keys = [f"key{i}" for i in range(1000)]
    payload = {"user": 7, "event": "page_view"}
    structure.encode(payload)
    for _ in range(20):  # warm up: connections to every node, scripts loaded
        store(structure, op, payload, keys, 1)
    start.wait()
    began = time.time()
    if op == "add_many":
        for _ in range(calls // 100):
            structure.add_many([payload] * 100)
    else:
        store(structure, op, payload, keys, calls)
    out.put((began, time.time()))


def store(structure: Any, op: str, payload: Any, keys: list[str], n: int) -> None:
    if op == "enqueue":
        for _ in range(n):
            structure.enqueue(random.choice(keys), payload)
    else:
        for _ in range(n):
            structure.add(payload)


def consumer(url: str, prefix: str, shards: int, start: Any, out: Any) -> None:
    pool = open_structure(url, prefix, "pool", shards)
    pool.pop(1)  # warm up (an empty sweep, or one call that then counts as popped)
    start.wait()
    began, taken = time.time(), 0
    while batch := pool.pop(100):
        pool.ack(batch)
        taken += batch.calls
    out.put((began, time.time(), taken))


def run_processes(target: Callable[..., None], args_list: list[tuple[Any, ...]]) -> list[Any]:
    ctx = mp.get_context("fork")
    start = ctx.Barrier(len(args_list) + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, start, out)) for a in args_list]
    for proc in procs:
        proc.start()
    start.wait()
    results = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    return results


def cpu_per_node(cluster: EmbeddedRedisCluster) -> list[float]:
    import redis

    seconds = []
    for node in cluster.nodes:
        client = redis.Redis(host="127.0.0.1", port=node.port)
        info = client.info("cpu")
        seconds.append(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]))
        client.close()
    return seconds


def measure(
    cluster: EmbeddedRedisCluster, kind: str, op: str, shards: int, producers: int, calls: int
) -> tuple[float, list[float]]:
    """Calls/s of one run, and the server CPU seconds it cost on each node."""
    prefix = f"bench:{uuid.uuid4().hex[:8]}"
    cpu_before = cpu_per_node(cluster)
    args = [(cluster.url, prefix, kind, shards, op, calls)] * producers
    spans = run_processes(producer, args)
    cpu = [b - a for a, b in zip(cpu_before, cpu_per_node(cluster), strict=True)]
    elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
    rate = producers * calls / elapsed
    if op == "add" and kind == "pool":
        drained = measure_drain(cluster, prefix, shards, producers)
        return rate, [*cpu, drained]
    open_structure(cluster.url, prefix, kind, shards).clear()
    return rate, cpu


def measure_drain(cluster: EmbeddedRedisCluster, prefix: str, shards: int, consumers: int) -> float:
    results = run_processes(consumer, [(cluster.url, prefix, shards)] * consumers)
    taken = sum(r[2] for r in results)
    elapsed = max(r[1] for r in results) - min(r[0] for r in results)
    open_structure(cluster.url, prefix, "pool", shards).clear()
    return taken / elapsed


ROWS = [
    ("pool.add(), calls/s", "pool", "add"),
    ("pool.add_many(100), calls/s", "pool", "add_many"),
    ("bucket.enqueue(), calls/s", "bucket", "enqueue"),
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=4, help="producer processes")
    parser.add_argument("--calls", type=int, default=5000, help="single calls per producer")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side per row")
    parser.add_argument("--quick", action="store_true", help="--calls 1000 --rounds 1")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.rounds = 1000, 1
    results: dict[tuple[str, int], list[float]] = {}
    cpu: dict[int, list[float]] = {1: [0.0] * 3, 3: [0.0] * 3}
    with EmbeddedRedisCluster(masters=3) as cluster:
        for label, kind, op in ROWS:
            calls = args.calls * (10 if op == "add_many" else 1)
            for round_ in range(args.rounds):
                for shards in (1, 3) if round_ % 2 == 0 else (3, 1):
                    progress(f"{label}: {shards} shard(s), round {round_ + 1}")
                    rate, extra = measure(cluster, kind, op, shards, args.producers, calls)
                    results.setdefault((label, shards), []).append(rate)
                    if op == "add" and kind == "pool":
                        cpu[shards] = [a + b for a, b in zip(cpu[shards], extra[:3], strict=True)]
                        drain = ("pool drain (pop 100 + ack), calls/s", shards)
                        results.setdefault(drain, []).append(extra[3])
    labels = [label for label, _, _ in ROWS] + ["pool drain (pop 100 + ack), calls/s"]
    print(
        f"\n{args.producers} processes, 3-master embedded cluster on one machine; "
        f"best of {args.rounds} run(s) per cell\n"
    )
    print(f"| {'measure':40} | {'1 shard':>10} | {'3 shards':>10} | {'3 / 1':>6} |")
    print(f"|{'-' * 42}|{'-' * 12}|{'-' * 12}|{'-' * 8}|")
    for label in labels:
        one, three = max(results[label, 1]), max(results[label, 3])
        print(f"| {label:40} | {one:10,.0f} | {three:10,.0f} | {three / one:5.2f}x |")
    calls = args.producers * args.calls * args.rounds
    print("\nServer CPU seconds during the pool.add() runs, per master (node 0, 1, 2):")
    for shards in (1, 3):
        spread = ", ".join(f"{c:.2f}" for c in cpu[shards])
        busiest = max(cpu[shards]) / calls * 1e6
        print(
            f"  {shards} shard(s): {spread} (total {sum(cpu[shards]):.2f}); busiest master "
            f"{busiest:.1f} us per call"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
