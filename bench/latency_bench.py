#!/usr/bin/env python
"""Benchmark: call-to-body latency and broker messages of a plain Celery task, a bucket task, a
pooled task and a stream consumer, served by drain jobs and by the continuous consumer.

Run it from the repository root::

    .venv/bin/python bench/latency_bench.py            # 60 idle calls, 1,000 at 50/s, per kind
    .venv/bin/python bench/latency_bench.py --quick    # 10 and 300
    .venv/bin/python bench/latency_bench.py --pool threads --calls 10000

One ``celery worker -c 2`` subprocess (``--pool``, prefork by default) serves the four tasks of
bench/latency_app.py; the structures live on one throwaway Redis, the broker on another. The
producer calls each task at a steady rate, idle (2 calls/s) and under load (50 calls/s),
passing the time of the call; the body records how long the call took to reach it. The same
passes run on a worker with drain jobs only, then on one with the continuous consumer
(``--redqueue-consumer``); ``--side`` runs one of them.

Broker messages are counted on the broker's own Redis (``INFO commandstats``: every task
message, a plain call or a drain job, is one ``LPUSH`` by kombu) from the end of a pass's
warm-up (``--warmup`` calls: steady state) until its last call reached its body, and shown
per 10,000 calls beside the messages the app's processes published (``before_task_publish``),
same run. Printed side by side, p50 and p90 in ms. Reports; never asserts.
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

from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.tasks.stream import publish
from celery_redqueue.testing import delete_prefix

ROOT = Path(__file__).resolve().parents[1]
KINDS = (
    ("plain", "plain Celery task"),
    ("bucket", "bucket task"),
    ("pool", "pooled task"),
    ("stream", "stream consumer"),
)
#: The task of each kind in bench/latency_app.py.
TASKS = {"plain": "plain", "bucket": "metered", "pool": "pooled", "stream": "streamed"}
RATES = (2.0, 50.0)
#: Seconds between the kinds of one pass: a lingering drain of the previous kind ends first.
PAUSE = 1.0
SIDES = {
    "drain": "drain jobs",
    "consumer": "continuous consumer (--redqueue-consumer)",
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


class Worker:
    """One ``celery -A latency_app worker -c 2`` subprocess."""

    def __init__(self, env: dict[str, str], pool: str, consumer: bool) -> None:
        command = ["celery", "-A", "latency_app", "worker", "-c", "2", f"--pool={pool}"]
        command += ["--loglevel=WARNING", "--without-mingle", "--without-gossip"]
        if consumer:
            command.append("--redqueue-consumer")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *command],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,  # the banner; warnings and errors still show
            start_new_session=True,
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)  # a warm shutdown of the main process
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
    elif kind == "pool":
        app_module.pooled.delay(now)
    else:
        publish(app_module.app, app_module.STREAM, now)


def lpushes(broker: redis.Redis) -> int:
    """LPUSH commands the broker's Redis has run: kombu's publish of one task message."""
    stats = broker.info("commandstats").get("cmdstat_lpush") or {}
    return int(stats.get("calls", 0))


def run_pass(
    app_module: Any,
    client: redis.Redis,
    broker: redis.Redis,
    kind: str,
    rate: float,
    calls: int,
    warmup: int,
) -> dict:
    """``warmup`` calls, then ``calls`` measured ones, at ``rate`` calls/s."""
    prefix = app_module.PREFIX
    key = f"{prefix}:latency:{kind}"
    name = app_module.app.tasks[f"latency_app.{TASKS[kind]}"].name
    client.delete(key)
    started = time.monotonic()
    lpush_before = published_before = 0
    for i in range(warmup + calls):
        if i == warmup:
            lpush_before = lpushes(broker)
            published_before = int(client.hget(f"{prefix}:published", name) or 0)
        pause = started + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        send(app_module, kind, i)
    deadline = time.monotonic() + 60
    while client.llen(key) < warmup + calls and time.monotonic() < deadline:
        time.sleep(0.01)
    lpush = lpushes(broker) - lpush_before
    published = int(client.hget(f"{prefix}:published", name) or 0) - published_before
    values = [float(v) * 1000 for v in client.lrange(key, warmup, -1)]
    time.sleep(PAUSE)
    return {"values": values, "lpush": lpush, "published": published, "calls": calls}


def measure(app_module: Any, client, broker, env, pool: str, consumer: bool, counts, warmup):
    worker = Worker(env, pool, consumer)
    try:
        # Warm up: the worker is ready, every process has its connections and scripts.
        for kind, _ in KINDS:
            run_pass(app_module, client, broker, kind, 20.0, 10, 0)
        return {
            (kind, rate): run_pass(
                app_module, client, broker, kind, rate, counts[rate], warmup[rate]
            )
            for rate in RATES
            for kind, _ in KINDS
        }
    finally:
        worker.stop()


def print_table(title: str, results: dict) -> None:
    print(f"\n{title}")
    print(
        "| | idle (2 calls/s) p50 / p90 | 50 calls/s p50 / p90 "
        "| broker messages per 10k calls, idle | at 50 calls/s |"
    )
    print("|---|---|---|---|---|")
    for kind, label in KINDS:
        cells = []
        for rate in RATES:
            r = results[(kind, rate)]
            if len(r["values"]) < r["calls"]:
                cells.append(f"{len(r['values'])}/{r['calls']} arrived")
                continue
            p50, p90 = percentile(r["values"], 0.5), percentile(r["values"], 0.9)
            cells.append(f"{p50:.1f} / {p90:.1f} ms")
        for rate in RATES:
            r = results[(kind, rate)]
            per = 10_000 / r["calls"]
            cells.append(f"{r['lpush'] * per:,.0f} ({r['published'] * per:,.0f} published)")
        print(f"| {label} | " + " | ".join(cells) + " |")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "(uptime unavailable)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 idle calls, 300 at 50/s")
    parser.add_argument("--calls", type=int, help="measured calls at 50/s (default 1,000)")
    parser.add_argument("--warmup", type=int, default=100, help="calls at 50/s before measuring")
    parser.add_argument("--pool", default="prefork", help="the worker's pool (prefork, threads)")
    parser.add_argument("--side", choices=sorted(SIDES), help="only this side")
    args = parser.parse_args(argv)
    counts = {2.0: 10, 50.0: 300} if args.quick else {2.0: 60, 50.0: 1000}
    if args.calls:
        counts[50.0] = args.calls
    warmup = {2.0: 2, 50.0: args.warmup}
    print(f"load before: {uptime()}")
    with EmbeddedRedis() as server, EmbeddedRedis() as broker_server:
        prefix = f"bench-latency-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "LATENCY_URL": server.url,
            "LATENCY_BROKER_URL": broker_server.url,
            "LATENCY_PREFIX": prefix,
            "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
        }
        os.environ.update(
            LATENCY_URL=server.url, LATENCY_BROKER_URL=broker_server.url, LATENCY_PREFIX=prefix
        )
        sys.path.insert(0, str(ROOT / "bench"))
        import latency_app

        client = redis.Redis.from_url(server.url)
        broker = redis.Redis.from_url(broker_server.url)
        for side, label in SIDES.items():
            if args.side and side != args.side:
                continue
            results = measure(
                latency_app, client, broker, env, args.pool, side == "consumer", counts, warmup
            )
            print_table(f"celery worker -c 2 --pool={args.pool}, {label}", results)
        delete_prefix(client, prefix)
    print(f"\nload after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
