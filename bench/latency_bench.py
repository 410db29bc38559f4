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

    def __init__(
        self, env: dict[str, str], pool: str, consumer: bool, concurrency: int = 2
    ) -> None:
        command = [
            "celery",
            "-A",
            "latency_app",
            "worker",
            "-c",
            str(concurrency),
            f"--pool={pool}",
        ]
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


def send(app_module: Any, kind: str, i: int, stamp: float | None = None) -> None:
    now = time.time() if stamp is None else stamp
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
        if i == warmup and broker is not None:
            lpush_before = lpushes(broker)
            published_before = int(client.hget(f"{prefix}:published", name) or 0)
        pause = started + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        send(app_module, kind, i)
    deadline = time.monotonic() + 60
    while client.llen(key) < warmup + calls and time.monotonic() < deadline:
        time.sleep(0.01)
    if broker is None:  # a warm-up
        time.sleep(PAUSE)
        return {}
    lpush = lpushes(broker) - lpush_before
    published = int(client.hget(f"{prefix}:published", name) or 0) - published_before
    values = [float(v) * 1000 for v in client.lrange(key, warmup, -1)]
    time.sleep(PAUSE)
    return {"values": values, "lpush": lpush, "published": published, "calls": calls}


def run_mixed(
    app_module: Any, client: redis.Redis, kinds: list[str], rate: float, calls: int, warmup: int
) -> dict[str, list[float]]:
    """Every kind of ``kinds`` at ``rate`` calls/s each, at once (interleaved): ``warmup``
    calls each, then ``calls`` measured ones; returns the latencies (ms) by kind."""
    prefix = app_module.PREFIX
    keys = {kind: f"{prefix}:latency:{kind}" for kind in kinds}
    client.delete(*keys.values())
    started = time.monotonic()
    for i in range(warmup + calls):
        pause = started + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        for kind in kinds:
            send(app_module, kind, i)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
        client.llen(key) < warmup + calls for key in keys.values()
    ):
        time.sleep(0.01)
    values = {
        kind: [float(v) * 1000 for v in client.lrange(key, warmup, -1)]
        for kind, key in keys.items()
    }
    time.sleep(PAUSE)
    return values


def measure_mixed(
    app_module: Any, client, env, args, consumer: bool, beside, calls, warmup
) -> dict[str, dict[str, list[float]]]:
    """On one worker per setting (drains yield, then not: LATENCY_DRAIN_YIELD=0): the plain
    task alone, then beside ``beside`` (all at 50 calls/s)."""
    results = {}
    for drain_yield in ("1", "0"):
        worker_env = {**env, "LATENCY_DRAIN_YIELD": drain_yield}
        worker = Worker(worker_env, args.pool, consumer, args.concurrency)
        try:
            for kind in ["plain", *beside]:  # warm up: the worker is ready, connections made
                run_pass(app_module, client, None, kind, 20.0, 10, 0)
            alone = run_mixed(app_module, client, ["plain"], 50.0, calls, warmup)
            mixed = run_mixed(app_module, client, ["plain", *beside], 50.0, calls, warmup)
            results[drain_yield] = {"alone": alone["plain"], **mixed}
        finally:
            worker.stop()
    return results


def cell(series: list[float], calls: int, base: list[float]) -> str:
    if len(series) < calls:
        return f"{len(series)}/{calls} arrived"
    p50, p90 = percentile(series, 0.5), percentile(series, 0.9)
    b50, b90 = percentile(base, 0.5), percentile(base, 0.9)
    return f"{p50:.1f} / {p90:.1f} ms ({p50 - b50:+.1f} / {p90 - b90:+.1f})"


def print_mixed(title: str, results: dict[str, dict[str, list[float]]], calls: int) -> None:
    print(f"\n{title}")
    print(
        "| 50 calls/s each, p50 / p90 (vs plain alone on the same worker) "
        "| drains yield (default) | redqueue_drain_yield=False |"
    )
    print("|---|---|---|")
    labels = dict(KINDS)
    for kind in results["1"]:
        label = "plain Celery task, alone" if kind == "alone" else f"{labels[kind]}, mixed"
        cells = [cell(results[y][kind], calls, results[y]["alone"]) for y in ("1", "0")]
        print(f"| {label} | " + " | ".join(cells) + " |")


def drain_backlog(app_module: Any, client, env, args, drain_yield: str, kinds, backlog: int):
    """``backlog`` calls of each of ``kinds`` stored (all stamped with one moment) before a
    worker starts; returns the calls served per second, from the first body to the last (the
    bodies' records), and the drain jobs published meanwhile."""
    prefix = app_module.PREFIX
    keys = [f"{prefix}:latency:{kind}" for kind in kinds]
    client.delete(*keys)
    jobs_before = sum(int(v) for v in client.hvals(f"{prefix}:published"))
    stamp = time.time()
    for i in range(backlog):
        for kind in kinds:
            send(app_module, kind, i, stamp)
    worker = Worker({**env, "LATENCY_DRAIN_YIELD": drain_yield}, args.pool, False, args.concurrency)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(client.llen(key) < backlog for key in keys):
            time.sleep(0.05)
        moments = [float(v) for key in keys for v in client.lrange(key, 0, -1)]
    finally:
        worker.stop()
    time.sleep(PAUSE)
    jobs = sum(int(v) for v in client.hvals(f"{prefix}:published")) - jobs_before
    span = max(moments) - min(moments) if len(moments) > 1 else float("nan")
    return len(moments), len(moments) / span, jobs


def print_drain(app_module: Any, client, env, args, kinds: list[str], backlog: int) -> None:
    """Drain speed of a backlog in several structures on one worker, yield on and off."""
    print(
        f"\ncelery worker -c {args.concurrency} --pool={args.pool}: a backlog of {backlog:,} "
        f"calls in each of {', '.join(kinds)}, drained"
    )
    print("| | drains yield (default) | redqueue_drain_yield=False |")
    print("|---|---|---|")
    figures = [drain_backlog(app_module, client, env, args, y, kinds, backlog) for y in "10"]
    total = len(kinds) * backlog
    rows = {
        "calls served": [f"{n:,}/{total:,}" for n, _, _ in figures],
        "calls/s, first body to last": [f"{rate:,.0f}" for _, rate, _ in figures],
        "drain jobs sent": [f"{jobs:,}" for _, _, jobs in figures],
    }
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


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
    parser.add_argument(
        "--mixed",
        nargs="?",
        const="pool,bucket",
        metavar="KINDS",
        help="instead: the plain task alone, then beside KINDS (default pool,bucket) at once",
    )
    parser.add_argument(
        "--drain",
        nargs="?",
        const="pool,bucket",
        metavar="KINDS",
        help="instead: drain speed of a backlog in KINDS (default pool,bucket), yield on and off",
    )
    parser.add_argument("--backlog", type=int, default=20_000, help="calls per kind (--drain)")
    parser.add_argument("-c", "--concurrency", type=int, default=2, help="the worker's -c")
    parser.add_argument(
        "--prefetch", type=int, default=1, help="the worker's worker_prefetch_multiplier"
    )
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
            "LATENCY_PREFETCH": str(args.prefetch),
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
            if args.mixed:
                beside = [kind.strip() for kind in args.mixed.split(",") if kind.strip()]
                calls = counts[50.0]
                values = measure_mixed(
                    latency_app, client, env, args, side == "consumer", beside, calls,
                    warmup[50.0],
                )  # fmt: skip
                title = (
                    f"celery worker -c {args.concurrency} --pool={args.pool}, {label}, "
                    f"worker_prefetch_multiplier={args.prefetch}"
                )
                print_mixed(f"{title}: plain beside {', '.join(beside)}", values, calls)
                continue
            if args.drain:
                kinds = [kind.strip() for kind in args.drain.split(",") if kind.strip()]
                print_drain(latency_app, client, env, args, kinds, args.backlog)
                break
            results = measure(
                latency_app, client, broker, env, args.pool, side == "consumer", counts, warmup
            )
            print_table(f"celery worker -c 2 --pool={args.pool}, {label}", results)
        delete_prefix(client, prefix)
    print(f"\nload after: {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
