#!/usr/bin/env python
"""Benchmark: buckets for metered APIs beside today's plain bucket, in one run.

Run it from the repository root::

    .venv/bin/python bench/metered_bench.py            # about 60 seconds
    .venv/bin/python bench/metered_bench.py --items 30 # shorter

It starts its own Redis (EmbeddedRedis, loopback only), a Celery app whose broker is that
Redis, and a real Celery worker in this process (threads pool, 4 threads); every bucket task
has ``bucket_drain_concurrency=4``. Per mode, every key is backlogged with ``--items`` calls
stored through ``.delay()`` before the worker starts, and the bench waits until all ran.

What it prints per mode:

- utilisation of the tighter limit: for a call rate, per key, the calls released before the
  last over the time from its first release to its last (GCRA: a perfect schedule is exactly
  100 %), as the mean and the lowest key; for the cost budget (measured over aligned windows),
  per key, the units of its full one-second windows against the budget; for the total rate
  the same as a call rate over all keys; for concurrency, the calls per second against what N
  bodies of that length allow. On the Redis server's release times (each body reads
  ``self.reservation.released_at``), and (``by start``, lowest key) on the bodies' starts by
  this host's clock, which is the embedded Redis server's.
- broker messages per call: every message published while the mode ran (drain jobs, their
  self-scheduled wake-ups, fan-out), counted by Celery's ``after_task_publish`` signal, over
  the calls run.

First, simulated in Python on the same calls (no Redis; an ideal consumer): the cost budget
as it was counted before (per aligned window) beside today's GCRA schedule, at 300 units/s:
the most units in any sliding second over the limit, and utilisation (``--schemes-only``: just
that).

Then, what an upstream sees (real worker, same run), per key: the most units in any sliding
second over the limit, utilisation, and the calls an upstream would refuse (429s) if it
metered a strict sliding second, or a token bucket (capacity one second's budget, refilled
continuously) that also caps every aligned second at the budget: ``cost`` (today's GCRA
schedule, on the releases) beside the aligned-window scheme simulated on the same calls;
``plain`` beside ``margin`` (bucket_margin=0.05) on the bodies' starts (what arrives); and
``weighted`` (total 40/s, three keys of weights 1, 2, 3): each key's share of the releases
while all were busy, against its weight.

Target: utilisation >= 95 % of the tighter limit in every mode. It reports; it does not
assert (exit status 0 whatever the figures are).

Modes: ``plain-late`` (bucket_rate 20/s, 4 keys: the bucket before drains reserved a key due
within 20 ms ahead, at its slot: they waited for it and polled again), ``plain`` (the
same, today's bucket), ``cost`` (bucket_rate 40/s and
bucket_cost_rate 60/s with costs 1..5, mean 3: the cost budget is the tighter limit),
``total`` (4 keys at 20/s under bucket_total_rate 40/s), ``concurrency`` (bucket_concurrency 2,
one key, bodies of 100 ms: at most 20 calls/s), ``backoff`` (4 keys at 20/s, each key's 5th
call raises KeyBackoff(1) once: its pause is left out of the key's active time).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from celery import Celery
from celery.contrib.testing.worker import start_worker
from celery.signals import after_task_publish

from celery_redqueue import BucketTask, KeyBackoff
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.testing import celery_test_config

KEYS = ("k0", "k1", "k2", "k3")
COSTS = (1, 2, 3, 4, 5)
#: What ran: (key, release time (server), cost, the body's start (this host's clock)).
Row = tuple[str, float, float, float]
published = 0
_lock = threading.Lock()


@after_task_publish.connect
def _count(**_: Any) -> None:
    global published
    with _lock:
        published += 1


def make_tasks(app: Celery, ran: list[Row], burst: int) -> dict[str, Any]:
    """The modes' tasks; ``burst`` 1 gives each limit a burst allowance (one call; the cost
    budget its largest cost) so consumers that come late lose no throughput."""
    common: dict[str, Any] = {
        "base": BucketTask,
        "bucket_burst": burst,
        "bind": True,
        "bucket_key": "key",
        "bucket_drain_concurrency": 4,
        "bucket_drain_interval": None,
    }
    backed_off: set[str] = set()

    def note(task: Any, key: str, cost: float) -> None:
        started = time.time()  # the body's start (this host's clock is the Redis server's)
        with _lock:
            ran.append((key, task.reservation.released_at, cost, started))

    @app.task(**common, name=f"plain-{burst}", bucket_rate="20/s")
    def plain(self: Any, key: str, i: int) -> None:
        note(self, key, 1)

    @app.task(**common, name=f"plain-late-{burst}", bucket_rate="20/s")
    def plain_late(self: Any, key: str, i: int) -> None:
        note(self, key, 1)

    # The drain as it was: a key due within the linger is waited for, then polled again.
    bucket = plain_late.bucket
    dequeue = bucket.dequeue
    bucket.dequeue = lambda **kw: dequeue(**{**kw, "ahead": False})

    @app.task(
        **common,
        name=f"cost-{burst}",
        bucket_rate="40/s",
        bucket_cost="cost",
        bucket_cost_rate="60/s",
        bucket_cost_burst=5 * burst,
    )
    def cost(self: Any, key: str, i: int, cost: int) -> None:
        note(self, key, cost)

    @app.task(
        **common,
        name=f"total-{burst}",
        bucket_rate="20/s",
        bucket_total_rate="40/s",
        bucket_total_burst=burst,
    )
    def total(self: Any, key: str, i: int) -> None:
        note(self, key, 1)

    @app.task(**common, name=f"concurrency-{burst}", bucket_rate="1000/s", bucket_concurrency=2)
    def concurrency(self: Any, key: str, i: int) -> None:
        note(self, key, 1)
        time.sleep(0.1)

    @app.task(**common, name=f"backoff-{burst}", bucket_rate="20/s")
    def backoff(self: Any, key: str, i: int) -> None:
        if i == 4 and key not in backed_off:
            backed_off.add(key)
            raise KeyBackoff(1)
        note(self, key, 1)

    return {
        "plain-late": plain_late,
        "plain": plain,
        "cost": cost,
        "total": total,
        "concurrency": concurrency,
        "backoff": backoff,
    }


def extra_tasks(app: Celery, ran: list[Row]) -> dict[str, Any]:
    """The upstream section's tasks beside the modes': a margin, and weights."""
    common: dict[str, Any] = {
        "base": BucketTask,
        "bind": True,
        "bucket_key": "key",
        "bucket_drain_concurrency": 4,
        "bucket_drain_interval": None,
    }

    @app.task(**common, name="margin", bucket_rate="20/s", bucket_margin=0.05)
    def margin(self: Any, key: str, i: int) -> None:
        with _lock:
            ran.append((key, self.reservation.released_at, 1, time.time()))

    @app.task(**common, name="weighted", bucket_rate="1000/s", bucket_total_rate="40/s")
    def weighted(self: Any, key: str, i: int) -> None:
        with _lock:
            ran.append((key, self.reservation.released_at, 1, time.time()))

    return {"margin": margin, "weighted": weighted}


def per_key_use(ran: list[Row], limit: float, pause: float = 0.0, at: int = 1) -> list[float]:
    """Per key: units before its last call over the time from its first call to its last
    (``at``: 1 the release times, 3 the bodies' starts), against ``limit`` per second."""
    uses = []
    for key in sorted({r[0] for r in ran}):
        mine = sorted((r[at], r[2]) for r in ran if r[0] == key)
        span = mine[-1][0] - mine[0][0] - pause
        uses.append(sum(c for _, c in mine[:-1]) / span / limit if span > 0 else 0.0)
    return uses


def window_use(ran: list[Row], budget: float, at: int = 1) -> list[float]:
    """Per key: units per aligned one-second window against ``budget``, over the windows
    between its first and its last (both partial); the cost limit is counted per window."""
    uses = []
    for key in sorted({r[0] for r in ran}):
        windows: dict[int, float] = {}
        for r in ran:
            if r[0] == key:
                windows[math.floor(r[at])] = windows.get(math.floor(r[at]), 0.0) + r[2]
        full = sorted(windows)[1:-1]
        if full:
            uses.append(sum(windows[w] for w in full) / len(full) / budget)
    return uses or [0.0]


def overall_use(ran: list[Row], limit: float, at: int = 1) -> list[float]:
    times = sorted(r[at] for r in ran)
    return [(len(times) - 1) / (times[-1] - times[0]) / limit]


def run_mode(app: Celery, task: Any, name: str, items: int, ran: list[Any]) -> dict[str, Any]:
    """Store the mode's calls, run a worker until all ran; the mode's figures."""
    global published
    ran.clear()
    keys = ("c0",) if name == "concurrency" else ("w1", "w2", "w3") if name == "weighted" else KEYS
    calls = 0
    if name == "cost":
        items *= 2  # several full one-second windows per key
    for i in range(items):
        for key in keys:
            if name == "cost":
                task.delay(key, i, cost=COSTS[i % len(COSTS)])
            else:
                task.delay(key, i)
            calls += 1
    with _lock:
        published = 0
    started = time.monotonic()
    with start_worker(
        app, pool="threads", concurrency=4, perform_ping_check=False, loglevel="WARNING"
    ):
        while len(ran) < calls and time.monotonic() - started < 120:
            time.sleep(0.05)
        messages = published

    def use(at: int) -> list[float]:
        if name == "total":
            return overall_use(ran, 40.0, at)
        if name == "concurrency":
            return overall_use(ran, 20.0, at)
        if name == "cost":
            return window_use(ran, 60.0, at)
        return per_key_use(ran, 20.0, pause=1.0 if name == "backoff" else 0.0, at=at)

    limit = {
        "total": "total 40/s",
        "concurrency": "2 x 100 ms bodies = 20/s",
        "cost": "cost 60 units/s per key (window)",
        "backoff": "20/s per key (less its 1 s pause)",
    }.get(name, "20/s per key")
    uses, starts = use(1), use(3)
    return {
        "mode": name,
        "limit": limit,
        "calls": len(ran),
        "use_mean": statistics.mean(uses),
        "use_min": min(uses),
        "start_min": min(starts),
        "messages_per_call": messages / max(len(ran), 1),
    }


def simulate(scheme: str, costs: list[float], start: float, limit: float = 300.0) -> list[Row]:
    """Release times of a backlogged key under ``scheme`` with an ideal consumer (simulated in
    Python, no Redis): ``aligned``, the cost budget as it was counted before, per aligned
    one-second window (a call goes when its cost fits what the window has left), or ``gcra``,
    today's schedule (a call goes once now >= tat, then tat = max(tat, now) + cost / limit).
    The call rate is 1000/s in both."""
    rows: list[Row] = []
    t, tat, window, used = start, 0.0, None, 0.0
    for cost in costs:
        if scheme == "gcra":
            t = max(t, tat)
            tat = max(tat, t) + cost / limit
        else:
            if window != math.floor(t):
                window, used = math.floor(t), 0.0
            if used + cost > limit:
                t, window, used = float(window + 1), window + 1, 0.0
            used += cost
        rows.append(("k", t, cost, t))
        t += 0.001
    return rows


def most_in_sliding(rows: list[Row], period: float = 1.0) -> float:
    """The most units released in any half-open sliding window of ``period``."""
    times = sorted((r[1], r[2]) for r in rows)
    return max(
        sum(c for s, c in times[i:] if s < t + period - 1e-9) for i, (t, _) in enumerate(times)
    )


def refused(rows: list[Row], limit: float, at: int = 1, bucket: bool = False) -> int:
    """Calls an upstream allowing ``limit`` units a second refuses (429): over a strict sliding
    second, or (``bucket``) a token bucket of one second's budget refilled continuously that
    also caps each aligned second at the budget. A refused call uses nothing."""
    accepted: list[tuple[float, float]] = []
    level, last, windows, refusals = limit, None, {}, 0
    for t, cost in sorted((r[at], r[2]) for r in rows):
        if bucket:
            level = limit if last is None else min(limit, level + (t - last) * limit)
            last, second = t, math.floor(t)
            if cost > level + 1e-9 or windows.get(second, 0.0) + cost > limit + 1e-9:
                refusals += 1
                continue
            level -= cost
            windows[second] = windows.get(second, 0.0) + cost
        else:
            inside = sum(c for s, c in accepted if s > t - 1.0 + 1e-9)
            if inside + cost > limit + 1e-9:
                refusals += 1
                continue
            accepted.append((t, cost))
    return refusals


def upstream_row(name: str, by_key: dict[str, list[Row]], limit: float, at: int = 1) -> None:
    worst = max(
        most_in_sliding([(k, r[at], r[2], r[at]) for r in rows]) for k, rows in by_key.items()
    )
    uses = [per_key_use(rows, limit, at=at)[0] for rows in by_key.values()]
    strict = sum(refused(rows, limit, at) for rows in by_key.values())
    bucket = sum(refused(rows, limit, at, bucket=True) for rows in by_key.values())
    print(f"{name:40} {worst / limit:14.1%} {statistics.mean(uses):7.1%} {strict:10} {bucket:12}")


def split(rows: list[Row]) -> dict[str, list[Row]]:
    return {key: [r for r in rows if r[0] == key] for key in sorted({r[0] for r in rows})}


def compare_upstream(results: dict[str, list[Row]]) -> None:
    """The section "what an upstream sees", on the rows the worker ran this run."""
    print(
        f"\n{'what an upstream sees':40} {'max/sliding s':>14} {'use':>7} {'429 strict':>10} "
        f"{'429 tb+sub-s':>12}"
    )
    cost = split(results["cost"])
    upstream_row("cost 60/s, GCRA (worker, releases)", cost, 60.0)
    aligned = {
        key: simulate("aligned", [r[2] for r in sorted(rows, key=lambda r: r[1])], rows[0][1], 60.0)
        for key, rows in cost.items()
    }
    upstream_row("cost 60/s, aligned windows (simulated)", aligned, 60.0)
    upstream_row("rate 20/s, no margin (worker, starts)", split(results["plain"]), 20.0, at=3)
    upstream_row("rate 20/s, margin 0.05 s (worker, starts)", split(results["margin"]), 20.0, at=3)
    rows = sorted(results["weighted"], key=lambda r: r[1])
    last = min(max(r[1] for r in rows if r[0] == key) for key in ("w1", "w2", "w3"))
    busy = [r for r in rows if r[1] <= last]
    shares = ", ".join(
        f"{key} {sum(r[0] == key for r in busy) / len(busy):.3f} (weight {w}: {w / 6:.3f})"
        for key, w in (("w1", 1), ("w2", 2), ("w3", 3))
    )
    print(f"weighted, total 40/s, shares of {len(busy)} releases while all were busy: {shares}")
    print()


def compare_schemes() -> None:
    """The old aligned-window cost accounting beside today's GCRA schedule, simulated on the
    same calls: max units in a sliding second over the limit (300/s), and utilisation."""
    scenarios = {
        "idle key, 2 s of 60-token calls at 0.6 s": ([60.0] * 10, 0.6),
        "backlogged, 5- and 60-token calls": ([5.0, 60.0, 5.0, 5.0, 60.0, 5.0] * 40, 0.0),
    }
    print(f"{'cost 300/s, simulated':44} {'scheme':8} {'max/sliding s':>14} {'use':>7}")
    for name, (costs, start) in scenarios.items():
        for scheme in ("aligned", "gcra"):
            rows = simulate(scheme, costs, start)
            use = per_key_use(rows, 300.0)[0]
            print(f"{name:44} {scheme:8} {most_in_sliding(rows) / 300.0:14.1%} {use:7.1%}")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=60, help="calls per key per mode")
    parser.add_argument("--schemes-only", action="store_true", help="only the simulated schemes")
    args = parser.parse_args(argv)
    compare_schemes()
    if args.schemes_only:
        return 0
    ran: list[Row] = []
    with EmbeddedRedis() as server:
        app = Celery("metered-bench", set_as_current=False)
        app.conf.update(celery_test_config(server.url, "bench-metered"))
        app.conf.redqueue_beat = False
        modes = {burst: make_tasks(app, ran, burst) for burst in (0, 1)}
        extra = extra_tasks(app, ran)
        app.finalize()
        results: dict[str, list[Row]] = {}
        print(
            f"{'mode':12} {'burst':>5} {'tighter limit':34} {'calls':>6} {'use mean':>9} "
            f"{'use min':>8} {'by start':>9} {'msgs/call':>10}  target >= 95 %"
        )
        for burst, tasks in modes.items():
            for name, task in tasks.items():
                row = run_mode(app, task, name, args.items, ran)
                if burst == 0:
                    results[name] = list(ran)
                ok = "OK" if min(row["use_min"], row["start_min"]) >= 0.95 else "below"
                print(
                    f"{name:12} {burst:5} {row['limit']:34} {row['calls']:6} "
                    f"{row['use_mean']:9.1%} {row['use_min']:8.1%} {row['start_min']:9.1%} "
                    f"{row['messages_per_call']:10.3f}  {ok}",
                    flush=True,
                )
        for name, task in extra.items():
            if name == "weighted":
                task.bucket.set_weight("w2", 2)
                task.bucket.set_weight("w3", 3)
            run_mode(app, task, name, args.items, ran)
            results[name] = list(ran)
        compare_upstream(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
