#!/usr/bin/env python
"""Benchmark: call-to-body latency of a plain Celery task, a bucket task and a pooled task.

Run it from the repository root::

    .venv/bin/python bench/latency_bench.py              # 60 idle calls, 1,000 at 50/s, per kind
    .venv/bin/python bench/latency_bench.py --quick      # 10 and 150
    .venv/bin/python bench/latency_bench.py --consumer   # also with the continuous consumer

One ``celery worker -c 2`` subprocess (prefork) serves the three tasks of bench/latency_app.py
on a throwaway Redis (broker and structures). The producer calls each task at a steady rate,
idle (2 calls/s) and under load (50 calls/s), passing the time of the call; the body records
how long the call took to reach it. Printed side by side, p50 and p90 in ms, with the broker
messages per 10k calls under load (a plain task: one per call; a redqueue task: its drain
jobs). ``--consumer`` runs the same again on a worker with the continuous consumer
(``redqueue_consumer``) and prints its rows too. Reports; never asserts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from celery_redqueue.testing import delete_prefix
from celery_redqueue.testing.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[1]
KINDS = (("plain", "plain Celery task"), ("bucket", "bucket task"), ("pool", "pooled task"))
RATES = (2.0, 50.0)
#: Seconds between the kinds of one pass: a lingering drain of the previous kind ends first.
PAUSE = 1.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


class Worker:
    """One ``celery -A latency_app worker -c 2`` subprocess."""

    def __init__(self, env: dict[str, str], consumer: bool) -> None:
        command = ["celery", "-A", "latency_app", "worker", "-c", "2", "--loglevel=WARNING"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *command, "--without-mingle", "--without-gossip"],
            env={**env, "LATENCY_CONSUMER": "1" if consumer else "0"},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,  # the banner; warnings and errors still show
            start_new_session=True,
        )

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def send(app_module: Any, kind: str, i: int) -> None:
    now = time.time()
    if kind == "plain":
        app_module.plain.delay(now)
    elif kind == "bucket":
        app_module.metered.delay(f"k{i % 10}", now)
    else:
        app_module.pooled.delay(now)


def run_pass(app_module: Any, client: redis.Redis, kind: str, rate: float, calls: int) -> dict:
    key = f"{app_module.PREFIX}:latency:{kind}"
    task = {"plain": app_module.plain, "bucket": app_module.metered, "pool": app_module.pooled}
    counter = f"{app_module.PREFIX}:messages:{task[kind].name}"
    client.delete(key)
    before = int(client.get(counter) or 0)
    started = time.monotonic()
    for i in range(calls):
        pause = started + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        send(app_module, kind, i)
    deadline = time.monotonic() + 60
    while client.llen(key) < calls and time.monotonic() < deadline:
        time.sleep(0.05)
    values = [float(v) * 1000 for v in client.lrange(key, 0, -1)]
    messages = int(client.get(counter) or 0) - before
    time.sleep(PAUSE)
    return {"values": values, "messages": messages, "calls": calls}


def measure(app_module: Any, client: redis.Redis, env: dict[str, str], consumer: bool, counts):
    worker = Worker(env, consumer)
    try:
        # Warm up: the worker is ready, every process has its connections and scripts.
        for kind, _ in KINDS:
            run_pass(app_module, client, kind, 20.0, 10)
        return {
            (kind, rate): run_pass(app_module, client, kind, rate, counts[rate])
            for rate in RATES
            for kind, _ in KINDS
        }
    finally:
        worker.stop()


def print_table(title: str, results: dict) -> None:
    print(f"\n{title}")
    columns = ["", "idle (2 calls/s) p50 / p90", "50 calls/s p50 / p90"]
    print("| " + " | ".join([*columns, "broker messages per 10k calls (50/s)"]) + " |")
    print("|---|---|---|---|")
    for kind, label in KINDS:
        cells = []
        for rate in RATES:
            r = results[(kind, rate)]
            if len(r["values"]) < r["calls"]:
                cells.append(f"{len(r['values'])}/{r['calls']} arrived")
                continue
            p50, p90 = percentile(r["values"], 0.5), percentile(r["values"], 0.9)
            cells.append(f"{p50:.1f} / {p90:.1f} ms")
        loaded = results[(kind, RATES[1])]
        per_10k = loaded["messages"] * 10_000 / loaded["calls"]
        print(f"| {label} | {cells[0]} | {cells[1]} | {per_10k:,.0f} |")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "(uptime unavailable)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 idle calls, 150 at 50/s")
    parser.add_argument(
        "--consumer", action="store_true", help="also measure a worker with the consumer"
    )
    args = parser.parse_args(argv)
    counts = {2.0: 10, 50.0: 150} if args.quick else {2.0: 60, 50.0: 1000}
    print(f"load before: {uptime()}")
    with EmbeddedRedis() as server:
        prefix = f"bench-latency-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "LATENCY_URL": server.url,
            "LATENCY_PREFIX": prefix,
            "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
        }
        os.environ.update(LATENCY_URL=server.url, LATENCY_PREFIX=prefix)
        sys.path.insert(0, str(ROOT / "bench"))
        import latency_app

        client = redis.Redis.from_url(server.url)
        sides = [("celery worker -c 2 (prefork), drain jobs", False)]
        if args.consumer:
            sides.append(("celery worker -c 2 (prefork), continuous consumer", True))
        for title, consumer in sides:
            print_table(title, measure(latency_app, client, env, consumer, counts))
        delete_prefix(client, prefix)
    print(f"\nload after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
