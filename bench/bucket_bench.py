#!/usr/bin/env python
"""Benchmark: LeakyBucket rate accuracy, fairness and dequeue cost.

Run it from the repository root::

    .venv/bin/python bench/bucket_bench.py            # full run, about 45 seconds
    .venv/bin/python bench/bucket_bench.py --quick    # smaller run, about 15 seconds

It starts its own throwaway Redis (EmbeddedRedis, loopback only) and prints, next to each
figure, the target it is measured against. It reports; it does not assert (exit status 0
whatever the figures are, 1 only if a measure could not be completed).

Part 1, rate accuracy and fairness (run twice: burst 0, then burst 1). Backlogged keys at
fixed rates (5 at 10/s, 3 at 5/s, 2 at 20/s, and one fast key at 300/s whose interval,
3.333... ms, is not a whole number of 0.1 ms; each with more items than it can release in the
run) plus two cold keys that get a single item half-way through. ``--workers`` consumer
processes (multiprocessing, spawn) loop on ``poll()`` for ``--seconds``: a reservation is
recorded as ``(key, released_at)`` and committed; a wait sleeps ``min(wait, 0.05)`` s. All
times are the Redis server's (``Reservation.released_at``; consumers stop at a server-time
deadline through a clock offset measured once against ``TIME``).

Per key it prints:

- items started, and the most items started in any 1-second window: the windows slide over
  the recorded release times, half-open ``[t, t+1)``, starting at each release (the maximum
  over all windows is reached at one of those);
- the bound ``rate + burst`` (GCRA allows at most ``rate * t + burst`` starts in any window of
  length ``t``), OK / OVER, and the margin: min over i of ``t[i + bound] - t[i] - 1 s`` (how
  close the key came; negative exactly when some window holds more than the bound);
- for backlogged keys, utilization = items started before the end of the run / (rate x active
  duration), where active duration = end of the run (the consumers' server-time deadline) -
  the key's first release. A perfect schedule gives slightly over 100 %: it starts
  ``floor(rate * D) + 1 + burst`` items in ``D`` seconds;
- the mean gap between consecutive releases next to the ideal ``1/rate``, and the slip:
  ``(last - first release) - (started - 1 - burst) / rate``, how far behind its ideal schedule
  the key ended (what consumer lateness cost it; negative: it ran faster than its rate);
- for cold keys, how long their single item waited from enqueue to release.

Then Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` of the utilizations of the
backlogged keys of equal rate (per rate, and over all backlogged keys since utilization is
already normalised by rate), and per consumer what it did.

Part 2, dequeue cost: the same ``poll()`` + ``commit()`` round trip pair, from one process,
with 10 keys queued and with 100,000 keys queued (one item each, enqueued with
``enqueue_many`` in chunks). Every key has a rate of 1,000,000/s, so every key is always
eligible and no poll waits (the count of waits is printed to show it). ``--dequeues`` pairs
per case are timed in blocks of ``--block``, the two cases alternating block by block so that
both see the same machine load; the target is checked on the median block (the whole-run and
best-block figures are printed too). Next to the client's wall-clock figure it prints the
server's own time per script call (``INFO commandstats``, evalsha, deltas around each block),
which leaves out the network and the Python client.

Part 3, producer cost (``--producer-calls`` calls per side, no worker): a bucket task's
``.delay()`` (keys cycling over 100 users) beside plain Celery ``.delay()``, a raw PING round trip,
a raw one-command EVALSHA and a bare ``bucket_enqueue`` plain call (the path a call with no
dedupe id and no delay takes), with each script's server time per call (see ``producer_cost.py``);
and a bare call of ``bucket_enqueue`` in its general form with one item, which every call took
before the plain path: its server time beside the plain path's, from the same run.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import queue
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_redqueue import BucketTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.redis.lua import script
from celery_redqueue.structures.bucket import LeakyBucket
from celery_redqueue.testing import celery_test_config, delete_prefix

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import measure as measure_sides
from producer_cost import print_table as print_cost
from producer_cost import raw_sides

PREFIX = "bucketbench"
#: (rate per second, how many backlogged keys at that rate)
BACKLOGGED = ((10.0, 5), (5.0, 3), (20.0, 2))
#: One more backlogged key, fast, whose interval (3.333... ms) is not a whole number of 0.1 ms
#: unlike the others' (--fast-rate 0 leaves it out).
FAST_RATE = 300.0
COLD_RATE = 2.0
#: A wait poll sleeps at most this long (seconds), as the brief asks of a consumer.
MAX_SLEEP = 0.05
WINDOW = 1.0
COST_RATE = "1000000/s"

TARGET_UTIL = 0.95
TARGET_JAIN = 0.99
TARGET_COST_RATIO = 1.5

QUIET = False


def progress(message: str) -> None:
    if not QUIET:
        print(f"[bucket_bench] {message}", file=sys.stderr, flush=True)


def server_time(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def clock_offset(client: redis.Redis) -> float:
    """Server time minus local time.time(), from the fastest of a few TIME round trips."""
    best: tuple[float, float] | None = None
    for _ in range(5):
        before = time.time()
        now = server_time(client)
        after = time.time()
        if best is None or after - before < best[0]:
            best = (after - before, now - (before + after) / 2)
    assert best is not None
    return best[1]


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def target_line(label: str, value: str, target: str, ok: bool) -> None:
    print(f"  {label + ':':<42} {value:>10}   target {target:<8} {met(ok)}")


# Part 1: rate accuracy and fairness


@dataclass(frozen=True)
class KeySpec:
    name: str
    rate: float
    cold: bool = False


def key_specs(cold_keys: int, fast_rate: float) -> list[KeySpec]:
    groups = BACKLOGGED + (((fast_rate, 1),) if fast_rate > 0 else ())
    specs = [KeySpec(f"k{rate:g}/s-{i}", rate) for rate, count in groups for i in range(count)]
    specs += [KeySpec(f"cold-{i}", COLD_RATE, cold=True) for i in range(cold_keys)]
    return specs


@dataclass
class ConsumerResult:
    index: int
    records: list[tuple[str, float]] = field(default_factory=list)
    waits: int = 0
    empties: int = 0
    slept: float = 0.0
    error: str = ""


def consumer(
    index: int,
    url: str,
    bucket_name: str,
    burst: float,
    ready: Any,
    start: Any,
    end_at: Any,
    results: Any,
) -> None:
    """One consumer process: poll until the server-time deadline, record and commit."""
    result = ConsumerResult(index)
    try:
        client = redis.Redis.from_url(url)
        bucket = LeakyBucket(
            client, bucket_name, default_rate="10/s", default_burst=burst, prefix=PREFIX
        )
        offset = clock_offset(client)
        ready.put(index)
        if not start.wait(60):
            raise RuntimeError("never told to start")
        end_local = end_at.value - offset
        while True:
            left = end_local - time.time()
            if left <= 0:
                break
            polled = bucket.dequeue()
            reservation = polled.reservation
            if reservation is not None:
                result.records.append((reservation.key, reservation.released_at))
                bucket.commit(reservation)
                continue
            if polled.wait is not None:
                result.waits += 1
                pause = min(polled.wait, MAX_SLEEP, left)
            else:
                result.empties += 1
                pause = min(MAX_SLEEP, left)
            time.sleep(pause)
            result.slept += pause
    except Exception as exc:  # reported by the parent
        result.error = f"{type(exc).__name__}: {exc}"
    results.put(result)


@dataclass
class KeyFigures:
    spec: KeySpec
    burst: float
    started: int
    max_window: int
    #: min over i of (t[i + bound] - t[i]) - 1 s, in ms: negative means a window over the bound.
    margin_ms: float | None
    first: float | None
    active: float | None
    util: float | None
    mean_gap_ms: float | None
    #: (last - first release) - (started - 1 - burst) / rate, in ms: how far behind its ideal
    #: schedule the key ended; negative means it ran ahead of (faster than) its rate.
    slip_ms: float | None
    left: int
    cold_wait_ms: float | None = None

    @property
    def bound(self) -> float:
        return self.spec.rate * WINDOW + self.burst

    @property
    def over(self) -> bool:
        return self.max_window > self.bound


def max_in_window(times: Sequence[float], width: float) -> int:
    """Most items in any half-open window [t, t + width) (times sorted)."""
    best = 0
    j = 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < start + width:
            j += 1
        best = max(best, j - i)
    return best


def window_margin(times: Sequence[float], bound: int, width: float) -> float | None:
    """How close the key came to its bound: min over i of (t[i + bound] - t[i]) - width, in
    ms. A window [t[i], t[i] + width) holds bound + 1 items exactly when this is negative."""
    gaps = [times[i + bound] - times[i] for i in range(len(times) - bound)]
    return (min(gaps) - width) * 1000 if gaps else None


def jain(values: Sequence[float]) -> float:
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else float("nan")


@dataclass
class RateRun:
    burst: float
    seconds: float
    start_at: float
    end_at: float
    keys: list[KeyFigures]
    consumers: list[ConsumerResult]


def run_rates(
    server: EmbeddedRedis,
    burst: float,
    seconds: float,
    workers: int,
    cold_keys: int,
    fast_rate: float,
) -> RateRun:
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    name = f"rate-burst{burst:g}"
    bucket = LeakyBucket(client, name, default_rate="10/s", default_burst=burst, prefix=PREFIX)
    specs = key_specs(cold_keys, fast_rate)
    for spec in specs:
        bucket.set_rate(spec.name, f"{spec.rate:g}/s", burst=burst)
    backlog: list[tuple[str, Any]] = []
    for spec in specs:
        if not spec.cold:
            depth = math.ceil(spec.rate * seconds * 1.25 + burst + 20)
            backlog.extend((spec.name, {"n": n}) for n in range(depth))
    bucket.enqueue_many(backlog)
    for name_ in ("bucket_dequeue", "bucket_settle"):
        client.script_load(script(name_).source)

    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    start = ctx.Event()
    end_at = ctx.Value("d", 0.0)
    procs = [
        ctx.Process(
            target=consumer,
            args=(i, server.url, name, burst, ready, start, end_at, results),
            name=f"bucket-bench-consumer-{i}",
        )
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    collected: list[ConsumerResult] = []
    cold_enqueued: dict[str, float] = {}
    try:
        for _ in procs:
            ready.get(timeout=60)
        start_at = server_time(client)
        end_at.value = start_at + seconds
        start.set()
        progress(f"burst {burst:g}: {workers} consumers running for {seconds:g} s")
        if cold_keys:
            time.sleep(max(0.0, start_at + seconds / 2 - server_time(client)))
            for spec in specs:
                if spec.cold:
                    cold_enqueued[spec.name] = server_time(client)
                    bucket.enqueue(spec.name, {"cold": True})
        for _ in procs:
            collected.append(results.get(timeout=seconds + 60))
    finally:
        start.set()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    for result in collected:
        if result.error:
            raise RuntimeError(f"consumer {result.index} failed: {result.error}")

    times: dict[str, list[float]] = {spec.name: [] for spec in specs}
    for result in collected:
        for key, released_at in result.records:
            times[key].append(released_at)
    end = end_at.value
    figures = []
    for spec in specs:
        ts = sorted(times[spec.name])
        fig = KeyFigures(
            spec=spec,
            burst=burst,
            started=len(ts),
            max_window=max_in_window(ts, WINDOW),
            margin_ms=window_margin(ts, int(spec.rate * WINDOW + burst), WINDOW),
            first=ts[0] if ts else None,
            active=None,
            util=None,
            mean_gap_ms=None,
            slip_ms=None,
            left=bucket.key_stats(spec.name).depth,
        )
        if spec.cold:
            if ts and spec.name in cold_enqueued:
                fig.cold_wait_ms = (ts[0] - cold_enqueued[spec.name]) * 1000
        elif ts:
            fig.active = end - ts[0]
            in_run = sum(1 for t in ts if t < end)
            fig.util = in_run / (spec.rate * fig.active) if fig.active > 0 else None
            if len(ts) > 1:
                fig.mean_gap_ms = (ts[-1] - ts[0]) / (len(ts) - 1) * 1000
                fig.slip_ms = (ts[-1] - ts[0] - (len(ts) - 1 - burst) / spec.rate) * 1000
        figures.append(fig)
    collected.sort(key=lambda r: r.index)
    return RateRun(burst, seconds, start_at, end, figures, collected)


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_rate_run(run: RateRun) -> dict[str, bool]:
    print()
    print(
        f"== Rate accuracy and fairness, burst {run.burst:g}: "
        f"{len(run.consumers)} consumers, {run.seconds:g} s =="
    )
    header = (
        f"{'key':<11} {'rate/s':>6} {'burst':>5} {'started':>7} {'max/1s':>6} {'bound':>5} "
        f"{'check':>5} {'margin ms':>9} {'active s':>8} {'util %':>6} {'gap ms':>7} "
        f"{'ideal ms':>8} {'slip ms':>8} {'left':>5}"
    )
    print(header)
    print("-" * len(header))
    for k in run.keys:
        print(
            f"{k.spec.name:<11} {k.spec.rate:>6g} {k.burst:>5g} {k.started:>7} "
            f"{k.max_window:>6} {k.bound:>5g} {'OVER' if k.over else 'OK':>5} "
            f"{fmt(k.margin_ms, '+.2f'):>9} "
            f"{fmt(k.active, '.2f'):>8} {fmt(None if k.util is None else k.util * 100, '.1f'):>6} "
            f"{fmt(k.mean_gap_ms, '.2f'):>7} {1000 / k.spec.rate:>8.2f} "
            f"{fmt(k.slip_ms, '+.1f'):>8} {k.left:>5}"
        )
    for k in run.keys:
        if k.spec.cold:
            print(
                f"  {k.spec.name}: one item enqueued {run.seconds / 2:g} s into the run, "
                f"started {fmt(k.cold_wait_ms, '.1f')} ms later"
            )
    backlogged = [k for k in run.keys if not k.spec.cold]
    overs = sum(1 for k in run.keys if k.over)
    utils = [k.util for k in backlogged if k.util is not None]
    starved = [k.spec.name for k in backlogged if k.started == 0]
    still_backlogged = all(k.left > 0 for k in backlogged)
    min_util = min(utils) if utils else 0.0
    print()
    target_line("keys with a 1-s window over rate+burst", f"{overs}", "0", overs == 0)
    target_line(
        "lowest utilization of a backlogged key",
        f"{min_util * 100:.1f} %",
        f">= {TARGET_UTIL * 100:.0f} %",
        min_util >= TARGET_UTIL and not starved,
    )
    jains: dict[str, float] = {}
    for rate in dict.fromkeys(k.spec.rate for k in backlogged):
        group = [k.util for k in backlogged if k.spec.rate == rate and k.util is not None]
        if len(group) > 1:
            jains[f"{rate:g}/s keys (n={len(group)})"] = jain(group)
    if len(utils) > 1:
        jains[f"all backlogged keys (n={len(utils)})"] = jain(utils)
    for label, value in jains.items():
        target_line(
            f"Jain's index, {label}", f"{value:.4f}", f">= {TARGET_JAIN}", value >= TARGET_JAIN
        )
    if starved:
        print(f"  STARVED backlogged keys: {', '.join(starved)}")
    if not still_backlogged:
        print("  note: some backlogged key ran dry; its utilization is not meaningful")
    for k in run.keys:
        if k.spec.cold and k.started != 1:
            print(f"  cold key {k.spec.name} started {k.started} items (expected 1)")
    print("  consumers:")
    for c in run.consumers:
        print(
            f"    #{c.index}: {len(c.records):5} items, {c.waits:5} wait polls, "
            f"{c.empties:3} empty polls, slept {c.slept:5.2f} s "
            f"({c.slept / run.seconds * 100:4.1f} % of the run)"
        )
    return {
        "windows": overs == 0,
        "util": min_util >= TARGET_UTIL and not starved,
        "jain": all(v >= TARGET_JAIN for v in jains.values()),
    }


# Part 2: dequeue cost


def evalsha_totals(client: redis.Redis) -> tuple[int, int]:
    """Cumulative (calls, microseconds) the server spent in EVALSHA (INFO commandstats)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


@dataclass
class CostCase:
    keys: int
    bucket: LeakyBucket
    blocks: list[float] = field(default_factory=list)  # seconds per block
    done: int = 0
    waits: int = 0
    server_calls: int = 0
    server_usec: int = 0

    def usec_total(self) -> float:
        return sum(self.blocks) / self.done * 1e6

    def usec_median_block(self, block: int) -> float:
        return statistics.median(self.blocks) / block * 1e6

    def usec_best_block(self, block: int) -> float:
        return min(self.blocks) / block * 1e6

    def server_usec_per_call(self) -> float:
        return self.server_usec / self.server_calls if self.server_calls else float("nan")


def time_block(client: redis.Redis, case: CostCase, n: int) -> None:
    """n poll()+commit() pairs on one bucket; adds wall time and server time to ``case``."""
    calls0, usec0 = evalsha_totals(client)
    done = 0
    began = time.perf_counter()
    while done < n:
        polled = case.bucket.dequeue()
        if polled.reservation is None:
            if polled.empty:
                raise RuntimeError(f"the {case.keys}-key bucket ran dry")
            case.waits += 1
            continue
        case.bucket.commit(polled.reservation)
        done += 1
    case.blocks.append(time.perf_counter() - began)
    calls1, usec1 = evalsha_totals(client)
    case.done += n
    case.server_calls += calls1 - calls0
    case.server_usec += usec1 - usec0


def run_cost(server: EmbeddedRedis, n: int, large: int, block: int) -> dict[str, bool]:
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    small_keys = 10
    warm = min(500, n)
    block = max(1, min(block, n))
    n = n // block * block
    if large < n + warm:
        raise SystemExit(f"--large-keys must be at least {n + warm} (dequeues + warm-up)")
    small = LeakyBucket(client, "cost-small", default_rate=COST_RATE, prefix=PREFIX)
    big = LeakyBucket(client, "cost-large", default_rate=COST_RATE, prefix=PREFIX)
    per_key = math.ceil((n + warm) / small_keys) + 1
    small.enqueue_many((f"key-{i % small_keys}", {"i": i}) for i in range(per_key * small_keys))
    progress(f"enqueueing one item to each of {large:,} keys")
    began = time.perf_counter()
    chunk = 10_000
    for lo in range(0, large, chunk):
        big.enqueue_many((f"key-{i}", {"i": i}) for i in range(lo, min(large, lo + chunk)))
    enqueue_s = time.perf_counter() - began
    ready = [client.zcard(b.keys("ready")) for b in (small, big)]

    cases = [CostCase(small_keys, small), CostCase(large, big)]
    for case in cases:  # load the scripts, warm the connection
        time_block(client, case, warm)
    for case in cases:
        case.blocks.clear()
        case.done = case.waits = case.server_calls = case.server_usec = 0
    progress(
        f"timing {n:,} poll()+commit() pairs with {small_keys} and with {large:,} keys, "
        f"in alternating blocks of {block}"
    )
    for _ in range(n // block):
        for case in cases:
            time_block(client, case, block)

    print()
    print("== Dequeue cost: one process, poll() + commit() per item ==")
    print(
        f"  {large:,} keys enqueued (one item each, enqueue_many in chunks of {chunk:,}) in "
        f"{enqueue_s:.2f} s ({large / enqueue_s:,.0f} items/s)"
    )
    print(
        f"  every key at {COST_RATE}; {n:,} dequeues per case in {n // block} alternating "
        f"blocks of {block} (after {warm} warm-up dequeues each)"
    )
    header = (
        f"  {'keys queued':>11} {'ready set':>9} {'dequeues':>8} {'waits':>5} "
        f"{'us/dequeue':>10} {'median block':>12} {'best block':>10} {'server us/call':>14}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for case, in_ready in zip(cases, ready, strict=True):
        print(
            f"  {case.keys:>11,} {in_ready:>9,} {case.done:>8,} {case.waits:>5} "
            f"{case.usec_total():>10.1f} {case.usec_median_block(block):>12.1f} "
            f"{case.usec_best_block(block):>10.1f} {case.server_usec_per_call():>14.2f}"
        )
    a, b = cases
    ratio = b.usec_median_block(block) / a.usec_median_block(block)
    print(
        f"  ratios, {large:,} keys / {small_keys} keys: whole run "
        f"{b.usec_total() / a.usec_total():.2f}x, median block {ratio:.2f}x, best block "
        f"{b.usec_best_block(block) / a.usec_best_block(block):.2f}x, server time per script "
        f"call {b.server_usec_per_call() / a.server_usec_per_call():.2f}x"
    )
    target_line(
        f"dequeue cost, {large:,} / {small_keys} keys",
        f"{ratio:.2f}x",
        f"<= {TARGET_COST_RATIO}x",
        ratio <= TARGET_COST_RATIO,
    )
    return {"cost": ratio <= TARGET_COST_RATIO}


BUCKET_SIDE = "bucket .delay() (bucket_enqueue, plain path)"
BATCH_SIDE = "raw EVALSHA of bucket_enqueue (the general form, one item)"
PLAIN_SIDE = "plain Celery .delay()"


def run_producer_cost(server: EmbeddedRedis, n: int) -> dict[str, bool]:
    """Part 3: a bucket task's .delay() beside its baselines, interleaved (no worker)."""
    progress(f"producer cost: {n:,} calls per side")
    prefix = f"{PREFIX}:producer"
    app = Celery("bucket_bench", set_as_current=False)
    app.conf.update(celery_test_config(server.url, prefix))
    app.conf.update(redqueue_beat=False, task_ignore_result=True)

    @app.task(name="bench.bucketed", base=BucketTask, bucket_key="user", shared=False)
    def bucketed(user: str, event: str) -> None:
        pass

    @app.task(name="bench.plain", shared=False)
    def plain(user: str, event: str) -> None:
        pass

    users = [f"user-{i}" for i in range(100)]
    bucket = bucketed.bucket
    client = bucket.client
    payload = bucket.encode([["user-0", "page_view"], {}])
    # The bare scripts write into twin buckets, so the task's bucket holds exactly its calls.
    # A call with no dedupe id and no delay sends bucket_enqueue its plain form, as bucket.py's
    # _enqueue_plain does (so the bare call differs from .delay() by redqueue's Python only);
    # the general form, which every call sent before (through redis-py's evalsha), beside it.
    twin = LeakyBucket(client, "bench.bucketed.twin", prefix=bucket.keys.prefix)
    batch_twin = LeakyBucket(client, "bench.bucketed.batch", prefix=bucket.keys.prefix)
    plain_lua = script("bucket_enqueue")

    def plain_script(key: str, data: bytes) -> Any:
        return plain_lua(client, twin._keys, [*twin._script_head(), key, data])

    batch_script = script("bucket_enqueue")

    def same_script(i: int) -> Any:
        return plain_script(users[i % 100], payload)

    def batch_calls(chunk: range) -> None:
        head = [*batch_twin._script_head(), batch_twin.dedupe_window_ms]
        for i in chunk:
            batch_script(client, batch_twin._keys, [*head, users[i % 100], payload, "", 0, "", 0])

    def bucket_calls(chunk: range) -> None:
        for i in chunk:
            bucketed.delay(users[i % 100], "page_view")

    def plain_calls(chunk: range) -> None:
        for i in chunk:
            plain.delay(users[i % 100], "page_view")

    for run in (bucket_calls, plain_calls):  # warm-up: scripts loaded, connections up
        run(range(200))
    raw_key = f"{prefix}:raw"
    sides = measure_sides(
        client,
        n,
        10,
        {
            BUCKET_SIDE: bucket_calls,
            PLAIN_SIDE: plain_calls,
            **raw_sides(client, raw_key, payload, same_script),
            BATCH_SIDE: batch_calls,
        },
    )
    stats = bucket.stats()
    delete_prefix(client, prefix)
    app.close()
    print_cost(
        f"Part 3, producer cost: {n:,} calls per side, interleaved in 10 rounds, one redis-py "
        "client, no worker (server us/script: INFO commandstats)",
        BUCKET_SIDE,
        PLAIN_SIDE,
        sides,
    )
    print(f"bucket accounting after the run: {stats.enqueued:,} enqueued, {stats.depth:,} depth")
    mine = sides[BUCKET_SIDE]
    return {
        "producer >= 3x plain .delay()": mine.rate >= 3 * sides[PLAIN_SIDE].rate,
        "producer >= 0.75x PING": mine.rate >= 0.75 * sides["raw PING round trip"].rate,
    }


def main(argv: Sequence[str] | None = None) -> int:
    global QUIET
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each rate run")
    parser.add_argument("--workers", type=int, default=3, help="consumer processes")
    parser.add_argument("--cold-keys", type=int, default=2, help="keys with one item mid-run")
    parser.add_argument(
        "--fast-rate", type=float, default=FAST_RATE, help="rate of the fast key (0: none)"
    )
    parser.add_argument("--dequeues", type=int, default=5000, help="poll+commit pairs per case")
    parser.add_argument(
        "--block", type=int, default=250, help="dequeues per timed block (the cases alternate)"
    )
    parser.add_argument("--large-keys", type=int, default=100_000, help="keys in the big case")
    parser.add_argument(
        "--producer-calls", type=int, default=20_000, help="calls per side in part 3"
    )
    parser.add_argument("--quick", action="store_true", help="--seconds 3 --dequeues 2000")
    parser.add_argument("--producer-only", action="store_true", help="run part 3 only")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    QUIET = args.quiet
    if args.quick:
        args.seconds, args.dequeues = 3.0, 2000
        args.producer_calls = min(args.producer_calls, 2000)

    began = time.monotonic()
    verdicts: dict[str, bool] = {}
    try:
        with EmbeddedRedis() as server:
            progress(f"Redis at {server.url}")
            for burst in () if args.producer_only else (0.0, 1.0):
                run = run_rates(
                    server, burst, args.seconds, args.workers, args.cold_keys, args.fast_rate
                )
                for name, ok in print_rate_run(run).items():
                    verdicts[f"{name} (burst {burst:g})"] = ok
            if not args.producer_only:
                verdicts.update(run_cost(server, args.dequeues, args.large_keys, args.block))
            verdicts.update(run_producer_cost(server, args.producer_calls))
    except (RuntimeError, queue.Empty, redis.RedisError) as exc:
        print(f"bucket_bench: a measure could not be completed: {exc!r}", file=sys.stderr)
        return 1
    print()
    missed = [name for name, ok in verdicts.items() if not ok]
    print(
        f"Targets met: {len(verdicts) - len(missed)}/{len(verdicts)}"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        + f". Total time {time.monotonic() - began:.1f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
