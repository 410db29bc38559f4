#!/usr/bin/env python
"""Benchmark: the continuous consumer against drain jobs, at a steady call rate, same run.

Run it from the repository root::

    .venv/bin/python bench/consumer_bench.py            # 10,000 calls per side at 50/s
    .venv/bin/python bench/consumer_bench.py --quick    # 1,000 calls per side at 100/s

Three sides, each on a fresh `celery worker --pool=prefork -c 2` (``--pool``, ``--concurrency``)
and one producer calling at ``--rate`` calls per second: a plain Celery task (the baseline), a
pooled task served by drain jobs, and the same pooled task with ``--redqueue-consumer``. For
each: call-to-body latency p50/p90 (the body compares the wall clock with the time the call was
made) and the drain messages sent through the broker per 10,000 calls in steady state (after
the first ``--warmup`` calls; counted by ``before_task_publish`` in every process). Reports;
never asserts.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

from celery_redqueue.testing import delete_prefix
from celery_redqueue.testing.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[1]


def start_worker(
    env: dict[str, str], pool: str, concurrency: int, consumer: bool
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "celery", "-A", "bench.consumer_bench_app", "worker"]
    args += [f"--pool={pool}", f"--concurrency={concurrency}", "--loglevel=WARNING"]
    args += ["--without-mingle", "--without-gossip"]
    if consumer:
        args.append("--redqueue-consumer")
    return subprocess.Popen(
        args,
        env=env,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run_side(url: str, side: str, args: argparse.Namespace) -> dict[str, float]:
    prefix = f"bench-consumer-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, BENCH_URL=url, BENCH_PREFIX=prefix, PYTHONPATH=str(ROOT))
    os.environ.update(BENCH_URL=url, BENCH_PREFIX=prefix)
    for name in ("bench.consumer_bench_app",):
        sys.modules.pop(name, None)
    sys.path.insert(0, str(ROOT))
    import bench.consumer_bench_app as bench_app

    client = redis.Redis.from_url(url)
    task = bench_app.plain if side == "plain" else bench_app.pooled
    worker = start_worker(env, args.pool, args.concurrency, consumer=side == "consumer")
    try:
        # Ready when a call made now has run (the worker and, with it, the consumer are up).
        deadline = time.monotonic() + 60
        while not client.llen(f"{prefix}:latency"):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"{side}: the worker did not start")
            task.delay(time.time())
            time.sleep(0.5)
        client.delete(f"{prefix}:latency")
        interval = 1.0 / args.rate
        total = args.warmup + args.calls
        start = time.monotonic()
        for i in range(total):
            if i == args.warmup:
                client.delete(f"{prefix}:drain-messages", f"{prefix}:latency")
            wait = start + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            task.delay(time.time())
        deadline = time.monotonic() + 60
        while client.llen(f"{prefix}:latency") < args.calls and time.monotonic() < deadline:
            time.sleep(0.05)
        latencies = sorted(float(x) * 1000 for x in client.lrange(f"{prefix}:latency", 0, -1))
        messages = sum(int(v) for v in client.hvals(f"{prefix}:drain-messages"))
    finally:
        os.kill(worker.pid, signal.SIGTERM)  # a warm shutdown of the main process
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        bench_app.app.close()
        delete_prefix(client, prefix)
    quantiles = statistics.quantiles(latencies, n=10) if len(latencies) >= 10 else [0.0] * 9
    return {
        "ran": len(latencies),
        "p50": statistics.median(latencies) if latencies else 0.0,
        "p90": quantiles[8],
        "per10k": messages * 10_000 / args.calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=50.0, help="calls per second")
    parser.add_argument("--warmup", type=int, default=200, help="calls before measuring")
    parser.add_argument("--pool", default="prefork")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="--calls 1000 --rate 100")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.rate, args.warmup = 1000, 100.0, 100
    rows = []
    with EmbeddedRedis() as server:
        for side, label in (
            ("plain", "plain Celery task"),
            ("drain", "pooled, drain jobs"),
            ("consumer", "pooled, --redqueue-consumer"),
        ):
            print(f"running: {label} ...", file=sys.stderr)
            rows.append((label, run_side(server.url, side, args)))
    print(
        f"{args.calls:,} calls at {args.rate:g}/s, celery worker --pool={args.pool} "
        f"-c {args.concurrency}; latency call -> body"
    )
    print(f"{'side':<30} {'ran':>7} {'p50 ms':>8} {'p90 ms':>8} {'drain msgs / 10k':>17}")
    for label, row in rows:
        print(
            f"{label:<30} {row['ran']:>7,.0f} {row['p50']:>8.1f} {row['p90']:>8.1f} "
            f"{row['per10k']:>17.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
