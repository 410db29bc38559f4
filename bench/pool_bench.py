#!/usr/bin/env python
"""Benchmark: a pooled task (PoolTask) against an equivalent plain Celery task.

Run it from the repository root::

    .venv/bin/python bench/pool_bench.py            # full run, about 1-2 minutes
    .venv/bin/python bench/pool_bench.py --quick    # smaller run, a few seconds

It starts its own throwaway Redis (EmbeddedRedis, loopback only) which is both the Celery
broker and the pool store, and prints one table in which every redqueue figure stands next to
a baseline measured in the same run. See bench/README.md for what each row means.

The worker used for the draining measures is a separate ``celery worker --pool=solo -c 1``
process that imports this file as the module ``pool_bench`` (the environment variables below
tell it where Redis is); timings are taken with the worker's own clock, from its
``worker_ready`` signal to the moment its task body ran for the last expected call, so its
start-up time is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready

from celery_redqueue import CappedPool, PoolTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.redis.call import pack_front
from celery_redqueue.redis.lua import script
from celery_redqueue.testing import celery_test_config, delete_prefix

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import measure as measure_sides
from producer_cost import print_table as print_cost
from producer_cost import raw_sides

# Set by the benchmark for the worker subprocess only.
ENV_URL = "POOL_BENCH_REDIS_URL"
ENV_PREFIX = "POOL_BENCH_PREFIX"
ENV_TARGET = "POOL_BENCH_TARGET"
ENV_BATCH = "POOL_BENCH_BATCH_SIZE"
ENV_FLOOR_BATCH = "POOL_BENCH_FLOOR_BATCH"

POOLED = "pool_bench.pooled"
POOLED_SIDE = "pooled .delay() (pool_add, lean case)"
PLAIN_SIDE = "plain Celery .delay()"
PLAIN = "pool_bench.plain"
FLOOR_CALLS = "pool_bench.floor_calls"
FLOOR_BATCH = "pool_bench.floor_batch"
#: The floor's batch: ZPOPMIN this many, as the issue's floor does; the drains it is compared
#: with pop as many per step (their pool_batch_size), so both sides move the same batches.
DEFAULT_FLOOR_BATCH = 500
REDIS_PY_SIDE = "the same script via register_script"
#: The bare script call on one connection held for the whole side (no checkout from redis-py's
#: connection pool per call), checked before each call as the pool checks what it lends
#: (``ensure_connection``: a connection the server closed while idle would otherwise look like
#: a lost reply): what a call path that keeps connections out of the pool could buy at most.
#: The call path does not (docs/performance.md gives the figures: under the 10 % bar).
HELD_SIDE = "the same script on a held connection"
#: The bare script call with every argument packed on every call (redis-py's send_command on a
#: connection of the pool), not its keys and head once (redis/call.py's Front).
UNPACKED_SIDE = "the same script, all arguments packed per call"
#: The same plain call through pool_add's general path (dedupe ids and delays): what the lean
#: case buys a plain call, in the same run.
GENERAL_SIDE = "the same call via pool_add's general path"
#: Pooled drain jobs use Celery's default queue; the plain task has its own, so one worker
#: can be pointed at either backlog while both wait in the broker.
QUEUE = "celery"
PLAIN_QUEUE = "plain"
#: Large enough that no measure ever sheds a call: the figures are about speed, not shedding.
POOL_SIZE = 1_000_000
DEFAULT_BATCH = 100  # PoolTask.pool_batch_size's default
#: Display order of the table's rows.
#: Rate measures alternate between their two sides this many times.
ROUNDS = 10
ROW_ORDER = [
    "delay", "task_many", "pool_many", "drain",
    "peak_idle", "drains_idle", "peak_busy", "drains_busy", "lpush_busy",
]  # fmt: skip

app = Celery("pool_bench", set_as_current=False)


def configure(url: str, prefix: str) -> None:
    app.conf.update(celery_test_config(url, prefix))
    app.conf.update(
        redqueue_beat=False,  # no beat here; drains are sent by the calls themselves
        task_ignore_result=True,
        worker_redirect_stdouts=False,
    )


def ready_key(prefix: str) -> str:
    return f"{prefix}:bench:ready"


def done_key(prefix: str) -> str:
    return f"{prefix}:bench:done"


def queue_key(prefix: str, queue: str = QUEUE) -> str:
    """The broker list of a queue, under kombu's ``global_keyprefix``."""
    return f"{prefix}:broker:{queue}"


class _WorkerSide:
    """State of the worker subprocess: counts body runs, stamps the last expected one."""

    def __init__(self) -> None:
        self.count = 0
        self.target = int(os.environ.get(ENV_TARGET) or 0)
        self.prefix = os.environ.get(ENV_PREFIX, "")
        url = os.environ.get(ENV_URL)
        self.client = redis.Redis.from_url(url) if url else None

    def tick(self, calls: int = 1) -> None:
        before, self.count = self.count, self.count + calls
        if before < self.target <= self.count and self.client is not None:
            self.client.set(done_key(self.prefix), repr(time.time()))


_side = _WorkerSide()

if os.environ.get(ENV_URL):  # imported by the worker subprocess
    configure(os.environ[ENV_URL], os.environ[ENV_PREFIX])


@worker_ready.connect
def _stamp_ready(**_: Any) -> None:
    if _side.client is not None:
        _side.client.set(ready_key(_side.prefix), repr(time.time()))


# Both bodies do the same trivial thing: bump a counter in a Python variable.
@app.task(
    name=POOLED,
    base=PoolTask,
    pool_size=POOL_SIZE,
    pool_batch_size=int(os.environ.get(ENV_BATCH) or DEFAULT_BATCH),
    pool_drain_interval=None,
    ignore_result=True,
)
def pooled(user: int, event: str) -> None:
    _side.tick()


@app.task(name=PLAIN, ignore_result=True, queue=PLAIN_QUEUE)
def plain(user: int, event: str) -> None:
    _side.tick()


# The floor rows' tasks: the same trivial body, popping the floor's batch per step; one runs it
# per call, the other once per batch (pool_batch=True: a list of PoolCall).
_FLOOR_OPTIONS: dict[str, Any] = {
    "base": PoolTask,
    "pool_size": POOL_SIZE,
    "pool_batch_size": int(os.environ.get(ENV_FLOOR_BATCH) or DEFAULT_FLOOR_BATCH),
    "pool_drain_interval": None,
    "ignore_result": True,
}


@app.task(name=FLOOR_CALLS, **_FLOOR_OPTIONS)
def floor_calls(user: int, event: str) -> None:
    _side.tick()


@app.task(name=FLOOR_BATCH, pool_batch=True, **_FLOOR_OPTIONS)
def floor_batch(calls: list[Any]) -> None:
    _side.tick(len(calls))


# Measuring helpers


class BenchError(RuntimeError):
    pass


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def interleaved(n: int, rounds: int, runs: dict[str, Callable[[range], Any]]) -> dict[str, float]:
    """Seconds each run took over ``range(n)``, done in alternating chunks.

    Interleaving (and swapping the order every round) spreads the machine's ups and downs
    over both sides of a comparison instead of giving them to whichever side ran second.
    """
    seconds = dict.fromkeys(runs, 0.0)
    step = max(1, -(-n // rounds))
    for number, start in enumerate(range(0, n, step)):
        chunk = range(start, min(n, start + step))
        names = list(runs) if number % 2 == 0 else list(reversed(runs))
        for name in names:
            began = time.perf_counter()
            runs[name](chunk)
            seconds[name] += time.perf_counter() - began
    return seconds


def wait_for(check: Callable[[], bool], timeout: float, what: str, step: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


class Worker:
    """A ``celery worker --pool=solo -c 1`` subprocess on this file's app."""

    def __init__(
        self,
        url: str,
        prefix: str,
        client: Any,
        target: int,
        batch: int,
        queue: str,
        floor_batch: int = DEFAULT_FLOOR_BATCH,
    ) -> None:
        self.prefix = prefix
        self.client = client
        client.delete(ready_key(prefix), done_key(prefix))
        bench_dir = str(Path(__file__).resolve().parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (bench_dir, env.get("PYTHONPATH")) if p)
        env.update(
            {
                ENV_URL: url,
                ENV_PREFIX: prefix,
                ENV_TARGET: str(target),
                ENV_BATCH: str(batch),
                ENV_FLOOR_BATCH: str(floor_batch),
            }
        )
        # Closed in stop(); a file rather than a pipe so a chatty worker never blocks.
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="pool-bench-worker-", suffix=".log"
        )
        cmd = [
            sys.executable, "-m", "celery", "-A", "pool_bench", "worker",
            "--pool=solo", "--concurrency=1", "--loglevel=WARNING", "-Q", queue,
            "--without-heartbeat", "--without-gossip", "--without-mingle",
            "-n", f"bench-{uuid.uuid4().hex[:6]}@%h",
        ]  # fmt: skip
        self.started = time.time()
        self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
            cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )

    def _alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise BenchError(f"the worker exited early; its output:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-4000:]

    def _stamp(self, key: str) -> float | None:
        raw = self.client.get(key)
        return float(raw) if raw is not None else None

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Wait for the worker's ready signal; returns the worker's timestamp of it."""

        def ready() -> bool:
            self._alive()
            return self._stamp(ready_key(self.prefix)) is not None

        wait_for(ready, timeout, "the worker to start", step=0.02)
        return float(self._stamp(ready_key(self.prefix)) or 0.0)

    def wait_done(self, timeout: float) -> float:
        """Wait until the body ran for the target-th time; returns the worker's timestamp."""

        def done() -> bool:
            self._alive()
            return self._stamp(done_key(self.prefix)) is not None

        wait_for(done, timeout, "the worker to process every call")
        return float(self._stamp(done_key(self.prefix)) or 0.0)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not go within 30 s."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()


class LlenSampler(threading.Thread):
    """Samples the broker queue's LLEN every ``interval`` seconds on its own connection."""

    def __init__(self, url: str, key: str, interval: float) -> None:
        super().__init__(name="llen-sampler", daemon=True)
        self.client = redis.Redis.from_url(url)
        self.key = key
        self.interval = interval
        self.max = 0
        self.samples = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        self.max = max(self.max, int(self.client.llen(self.key)))
        self.samples += 1

    def run(self) -> None:
        while True:
            self.sample()
            if self._stop_event.wait(self.interval):
                break
        self.sample()  # once more after the last call

    def finish(self) -> int:
        self._stop_event.set()
        self.join()
        self.client.close()
        return self.max


def lpush_calls(client: Any) -> int:
    """Server-wide LPUSH count; kombu's Redis transport publishes each message with one."""
    stats = client.info("commandstats").get("cmdstat_lpush") or {}
    return int(stats.get("calls", 0))


# Scenario


@dataclass
class Row:
    measure: str
    redqueue: float
    baseline: float
    #: "higher" when more is better (rates), "lower" when less is (queue lengths, messages).
    better: str
    target: str = "-"
    #: Smallest (higher) or largest (lower) ratio that meets the target; None: no target.
    target_ratio: float | None = None
    target_abs: float | None = None
    unit: str = ""
    note: str = ""

    @property
    def ratio(self) -> float:
        if self.better == "higher":
            return self.redqueue / self.baseline if self.baseline else float("inf")
        return self.baseline / self.redqueue if self.redqueue else float("inf")

    @property
    def met(self) -> str:
        if self.target_ratio is not None:
            return "yes" if self.ratio >= self.target_ratio else "NO"
        if self.target_abs is not None:
            return "yes" if self.redqueue <= self.target_abs else "NO"
        return ""


def fmt_number(value: float) -> str:
    if value == float("inf"):
        return "inf"
    if value >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def fmt_ratio(value: float) -> str:
    if value == float("inf"):
        return "inf"
    if value >= 100:
        return f"{value:,.0f}x"
    if value >= 10:
        return f"{value:.1f}x"
    return f"{value:.2f}x"


def print_table(rows: list[Row], notes: list[str], baseline: str = "plain Celery baseline") -> None:
    header = ["measure", "redqueue", baseline, "ratio", "target", "met"]
    body = [
        [
            r.measure,
            fmt_number(r.redqueue),
            fmt_number(r.baseline) + (f" {r.note}" if r.note else ""),
            fmt_ratio(r.ratio),
            r.target,
            r.met,
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def render(cells: list[str]) -> str:
        out = [cells[0].ljust(widths[0])]
        out += [c.rjust(w) for c, w in zip(cells[1:4], widths[1:4], strict=True)]
        out += [c.ljust(w) for c, w in zip(cells[4:], widths[4:], strict=True)]
        return " | ".join(out).rstrip()

    print()
    print(render(header))
    print("-+-".join("-" * w for w in widths))
    for line in body:
        print(render(line))
    print()
    for note in notes:
        print(note)


class Bench:
    def __init__(self, args: argparse.Namespace, url: str, prefix: str) -> None:
        self.args = args
        self.url = url
        self.prefix = prefix
        self.client = redis.Redis.from_url(url)
        self.queue = queue_key(prefix)
        self.plain_queue = queue_key(prefix, PLAIN_QUEUE)
        self.rows: dict[str, Row] = {}
        self.notes: list[str] = []
        self.producer_cost: dict[str, Any] = {}
        self.floor_rows: list[Row] = []
        self.floor_notes: list[str] = []

    def log(self, message: str) -> None:
        if not self.args.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def reset(self) -> None:
        pooled.pool.clear()
        self.client.delete(self.queue, self.plain_queue)

    def worker(self, target: int, queue: str) -> Worker:
        return Worker(
            self.url,
            self.prefix,
            self.client,
            target,
            self.args.batch_size,
            queue,
            self.args.floor_batch,
        )

    def warm_up(self) -> None:
        """Open connections, load the Lua scripts, import lazily imported code paths."""
        for i in range(200):
            pooled.delay(i, "page_view")
            plain.delay(i, "page_view")
        pooled.add_many([((i, "page_view"), {}) for i in range(200)])
        self.reset()

    # 1 and 3: .delay() rates, then one worker draining what they enqueued

    def delay_and_drain(self) -> None:
        n = self.args.calls
        drains = 0

        def pooled_calls(chunk: range) -> None:
            nonlocal drains
            for i in chunk:
                drains += pooled.delay(i, "page_view").drain_needed

        def plain_calls(chunk: range) -> None:
            for i in chunk:
                plain.delay(i, "page_view")

        self.log(
            f"pooled .delay() against plain .delay(), PING and a raw EVALSHA, {n:,} calls each "
            "(no worker)"
        )
        self.reset()
        client = pooled.pool.client  # the pool's own client: the baselines use it too
        raw_key = f"{self.prefix}:bench:raw"
        payload = pooled.pool.encode([[0, "page_view"], {}])
        # The bare script writes into a twin pool, so the task's pool holds exactly n calls.
        twin = CappedPool(client, f"{POOLED}.twin", POOL_SIZE, prefix=pooled.pool.keys.prefix)
        # A call with no dedupe id and no delay runs pool_add's lean case (pool.py's _add_plain),
        # through the package's call path (redis/call.py) as the task's calls do; beside it the
        # same script with the same keys and arguments through redis-py's own path
        # (register_script: EVALSHA through the client's command path, which may retry it).
        plain_lua = script("pool_add")
        keys = [twin.keys(part) for part in plain_lua.parts or ()]
        head = twin._script_head()
        registered = client.register_script(plain_lua.source)

        # Its keys and head packed once, as the pool does (redis/call.py's Front).
        front = pack_front(client, plain_lua, keys, [*head, "plain"])

        def same_script(i: int) -> Any:
            return plain_lua(client, keys, [repr(random.random()), payload], front)

        def through_redis_py(chunk: range) -> None:
            for _ in chunk:
                registered(keys, [*head, "plain", repr(random.random()), payload])

        def unpacked(chunk: range) -> None:  # every argument packed by redis-py's send_command
            for _ in chunk:
                conn = client.connection_pool.get_connection()
                try:
                    args = [*head, "plain", repr(random.random()), payload]
                    conn.send_command("EVALSHA", plain_lua.sha, len(keys), *keys, *args)
                    conn.read_response()
                finally:
                    client.connection_pool.release(conn)

        def on_held(chunk: range) -> None:
            connection_pool = client.connection_pool
            # redis-py < 7 has no ensure_connection: there the side goes unchecked.
            ensure = getattr(connection_pool, "ensure_connection", lambda conn: None)
            conn = connection_pool.get_connection()
            try:
                for _ in chunk:
                    ensure(conn)
                    conn.send_packed_command(front.pack([repr(random.random()), payload]))
                    conn.read_response()
            finally:
                connection_pool.release(conn)

        general_front = pack_front(client, plain_lua, keys, [*head, 0])  # no dedupe window

        def through_pool_add(chunk: range) -> None:
            for _ in chunk:
                plain_lua(client, keys, [repr(random.random()), payload, "", 0], general_front)

        sides = measure_sides(
            client,
            n,
            ROUNDS,
            {
                POOLED_SIDE: pooled_calls,
                PLAIN_SIDE: plain_calls,
                **raw_sides(client, raw_key, payload, same_script),
                UNPACKED_SIDE: unpacked,
                HELD_SIDE: on_held,
                REDIS_PY_SIDE: through_redis_py,
                GENERAL_SIDE: through_pool_add,
            },
        )
        client.delete(raw_key)
        twin.clear()
        seconds = {"pooled": sides[POOLED_SIDE].seconds, "plain": sides[PLAIN_SIDE].seconds}
        self.producer_cost = sides
        stats = pooled.pool.stats()
        if stats.depth != n or stats.offered != n:
            raise BenchError(f"expected {n} calls in the pool, found {stats}")
        depth = int(self.client.llen(self.plain_queue))
        if depth != n:
            raise BenchError(f"expected {n} messages in {self.plain_queue}, found {depth}")

        pooled_drain = self.drain_pool(n)
        plain_drain = self.drain_plain(n)
        self.reset()

        self.rows["delay"] = Row(
            "pooled .delay(), calls/s",
            rate(n, seconds["pooled"]),
            rate(n, seconds["plain"]),
            "higher",
            target=">= 3x",
            target_ratio=3.0,
        )
        self.rows["drain"] = Row(
            "drained by 1 solo worker, calls/s",
            pooled_drain,
            plain_drain,
            "higher",
            target=">= 10x",
            target_ratio=10.0,
        )
        self.notes.append(
            f"- the {n:,} pooled .delay() calls sent {drains} drain message(s). The drain row "
            f"drains those calls with pool_batch_size={self.args.batch_size}, and runs the "
            f"{n:,} plain messages with Celery's default prefetch (4 per process); worker "
            "start-up is not counted."
        )

    def drain_pool(self, n: int) -> float:
        self.log(f"one worker drains the pool of {n:,}")
        with self.worker(n, QUEUE) as worker:
            start = worker.wait_ready()
            end = worker.wait_done(timeout=max(120.0, n / 200))
            wait_for(lambda: pooled.pool.stats().processed == n, 30, "the last batch to be acked")
        stats = pooled.pool.stats()
        if stats.processed != n or stats.failed or stats.depth or stats.in_flight:
            raise BenchError(f"unexpected pool accounting after the drain: {stats}")
        return rate(n, end - start)

    def drain_plain(self, n: int) -> float:
        self.log(f"one worker runs {n:,} plain tasks")
        with self.worker(n, PLAIN_QUEUE) as worker:
            start = worker.wait_ready()
            end = worker.wait_done(timeout=max(120.0, n / 100))
        depth = int(self.client.llen(self.plain_queue))
        if depth:
            raise BenchError(f"{depth} plain messages left in {self.plain_queue}")
        return rate(n, end - start)

    # 2: add_many against single adds

    def add_many(self) -> None:
        n = self.args.calls
        pool = pooled.pool
        kept = 0

        def task_many(chunk: range) -> None:
            nonlocal kept
            kept += sum(r.kept for r in pooled.add_many([((i, "page_view"), {}) for i in chunk]))

        def task_single(chunk: range) -> None:
            for i in chunk:
                pooled.delay(i, "page_view")

        def pool_many(chunk: range) -> None:
            pool.add_many([[[i, "page_view"], {}] for i in chunk])

        def pool_single(chunk: range) -> None:
            for i in chunk:
                pool.add([[i, "page_view"], {}])

        self.log(f"task.add_many() against pooled .delay(), {n:,} calls each")
        self.reset()
        task = interleaved(n, ROUNDS, {"many": task_many, "single": task_single})
        if kept != n:
            raise BenchError(f"task.add_many kept {kept} of {n} calls")
        self.log(f"pool.add_many() against pool.add(), {n:,} payloads each")
        self.reset()
        bare = interleaved(n, ROUNDS, {"many": pool_many, "single": pool_single})
        self.reset()
        self.rows["task_many"] = Row(
            "task.add_many(), calls/s",
            rate(n, task["many"]),
            rate(n, task["single"]),
            "higher",
            note="[a]",
        )
        self.rows["pool_many"] = Row(
            "pool.add_many(), calls/s",
            rate(n, bare["many"]),
            rate(n, bare["single"]),
            "higher",
            note="[b]",
        )
        self.notes.append(
            f"- add_many was called with chunks of {-(-n // ROUNDS):,} calls. [a] baseline: the "
            "same calls one by one with the pooled task's .delay(); [b] baseline: "
            "CappedPool.add() one by one (no Celery on either side)."
        )

    # 4: broker queue length during a burst

    def burst(self, n: int, task: Any, queue: str) -> tuple[float, int, int, int]:
        """Call ``task.delay`` n times while sampling the broker list ``queue``.

        Returns (seconds, max LLEN, drain_needed count, LPUSH calls on the server).
        """
        sampler = LlenSampler(self.url, queue, self.args.sample_ms / 1000)
        lpush_before = lpush_calls(self.client)
        sampler.start()
        drains = 0
        start = time.perf_counter()
        try:
            for i in range(n):
                result = task.delay(i, "page_view")
                if getattr(result, "drain_needed", False):
                    drains += 1
        finally:
            seconds = time.perf_counter() - start
            peak = sampler.finish()
        return seconds, peak, drains, lpush_calls(self.client) - lpush_before

    def bursts(self) -> None:
        n = self.args.burst
        m = self.args.plain_burst

        self.log(f"burst of {n:,} pooled .delay(), no worker")
        self.reset()
        _, idle_peak, idle_drains, _ = self.burst(n, pooled, self.queue)
        self.reset()

        self.log(f"burst of {n:,} pooled .delay() with one worker draining")
        with self.worker(0, QUEUE) as worker:
            worker.wait_ready()
            seconds, busy_peak, busy_drains, lpushes = self.burst(n, pooled, self.queue)
            wait_for(
                lambda: pooled.pool.stats().processed == n,
                max(120.0, n / 200),
                "the worker to drain the burst",
                step=0.05,
            )
        stats = pooled.pool.stats()
        self.reset()

        self.log(f"burst of {m:,} plain .delay(), no worker")
        _, plain_peak, _, plain_lpushes = self.burst(m, plain, self.plain_queue)
        self.reset()

        plain_note = "[c]" if m != n else ""
        burst_rows = {
            "peak_idle": ("max broker queue length, burst, no worker", idle_peak, plain_peak),
            "drains_idle": ("drain messages sent, burst, no worker", idle_drains, m),
            "peak_busy": ("max broker queue length, burst, 1 worker", busy_peak, plain_peak),
            "drains_busy": ("drain messages sent, burst, 1 worker", busy_drains, m),
        }
        for key, (measure, redqueue, baseline) in burst_rows.items():
            self.rows[key] = Row(
                measure,
                redqueue,
                baseline,
                "lower",
                target="<= 2",
                target_abs=2,
                note=plain_note,
            )
        self.rows["lpush_busy"] = Row(
            "messages pushed to broker, burst, 1 worker [d]",
            lpushes,
            plain_lpushes,
            "lower",
            note=plain_note,
        )
        self.notes.append(
            f"- with the worker running the burst took {seconds:.1f} s "
            f"({rate(n, seconds):,.0f} calls/s) and the worker processed "
            f"{stats.processed:,} calls ({stats.rejected} rejected, {stats.evicted} evicted); "
            f"the broker queue was sampled every {self.args.sample_ms:g} ms; the plain burst "
            "ran with no worker, so its queue simply grows to its length."
        )
        if m != n:
            self.notes.append(
                f"- [c] the plain Celery burst was {m:,} calls, not {n:,} (--plain-burst): with "
                f"no worker its queue length is simply its call count, so at {n:,} calls it "
                "would be that many times larger."
            )
        self.notes.append(
            "- [d] LPUSH calls counted by the Redis server (INFO commandstats) during the burst: "
            "every message kombu publishes, including any drain a worker re-sends."
        )

    # 5: the drain against its floor, a bare ZPOPMIN + json.loads loop on the same payloads

    def floor(self) -> None:
        n, size = self.args.floor_calls, self.args.floor_batch
        # One plain redis-py client for every direct side: the floor's and the pool's.
        client = redis.Redis.from_url(self.url)
        prefix = floor_calls.pool.keys.prefix
        # As the pooled task stores them: [args, kwargs], serialized by the pool's serializer.
        payloads = [floor_calls.pool.encode([[i, "page_view"], {}]) for i in range(n)]
        bare = f"{self.prefix}:bench:floor"
        direct = CappedPool(client, "pool_bench.direct", POOL_SIZE, prefix=prefix)
        seen = 0

        def body(user: int, event: str) -> None:
            nonlocal seen
            seen += 1

        def batch_body(calls: list[Any]) -> None:
            nonlocal seen
            seen += len(calls)

        def fill_bare() -> None:
            pipe = client.pipeline(transaction=False)
            for start in range(0, n, 1000):
                pipe.zadd(bare, {p: random.random() for p in payloads[start : start + 1000]})
            pipe.execute()

        def fill_direct() -> None:
            direct.clear()
            for start in range(0, n, 1000):
                direct.store_encoded(payloads[start : start + 1000])

        def run_floor() -> None:
            loads = json.loads
            while True:
                popped = client.zpopmin(bare, size)
                if not popped:
                    return
                for member, _ in popped:
                    loads(member)

        def run_per_call() -> None:
            while True:
                batch = direct.pop(size)
                if not batch:
                    return
                for item in batch.items:
                    body(*item.payload[0], **item.payload[1])
                direct.ack(batch)

        def run_batch() -> None:
            while True:
                batch = direct.pop(size)
                if not batch:
                    return
                batch_body([item.payload for item in batch.items])
                direct.ack(batch)

        sides = {
            "floor": (fill_bare, run_floor),
            "per_call": (fill_direct, run_per_call),
            "batch": (fill_direct, run_batch),
        }
        seconds = dict.fromkeys(sides, 0.0)
        rounds = self.args.floor_rounds
        self.log(
            f"the drain against its floor: {n:,} calls, batches of {size}, {rounds} rounds "
            "(the floor, then CappedPool directly)"
        )
        for number in range(rounds):
            names = list(sides) if number % 2 == 0 else list(reversed(sides))
            for name in names:
                fill, run = sides[name]
                fill()
                began = time.perf_counter()
                run()
                seconds[name] += time.perf_counter() - began
        if seen != 2 * n * rounds:
            raise BenchError(f"the direct drains ran {seen} bodies, not {2 * n * rounds}")
        stats = direct.stats()
        if stats.depth or stats.in_flight or stats.processed != n:
            raise BenchError(f"unexpected accounting after the direct drain: {stats}")
        direct.clear()
        client.delete(bare)
        floor = rate(n * rounds, seconds["floor"])
        # Each worker row twice, in alternating order (a worker's rate is one drain: it moves
        # with the machine more than the interleaved sides above); the mean of the two.
        worker_rates = dict.fromkeys(FLOOR_TASKS, 0.0)
        for names in (list(FLOOR_TASKS), list(reversed(FLOOR_TASKS))):
            for name in names:
                worker_rates[name] += self.drain_worker(FLOOR_TASKS[name], n) / 2
        client.close()
        targets = {"per_call": 0.4, "batch": 0.5}
        self.floor_rows = [
            Row(FLOOR_ROWS["floor"], floor, floor, "higher"),
            *(
                Row(
                    FLOOR_ROWS[name],
                    rate(n * rounds, seconds[name]),
                    floor,
                    "higher",
                    target=f">= {targets[name]}x",
                    target_ratio=targets[name],
                )
                for name in ("per_call", "batch")
            ),
            *(
                Row(
                    FLOOR_ROWS[f"worker_{name}"],
                    value,
                    floor,
                    "higher",
                    target=f">= {targets[name]}x",
                    target_ratio=targets[name],
                )
                for name, value in worker_rates.items()
            ),
        ]
        self.floor_notes = [
            f"- {n:,} calls of {len(payloads[0])}-byte payloads (as stored by the pooled task) per "
            f"side; the floor and the direct pool sides alternate over {rounds} rounds (filled "
            f"outside the timing), the worker rows drain the same {n:,} calls twice each, in "
            "alternating order (ready signal to the last body, as the drain row above; the mean "
            "rate of the two).",
            "- the floor: ZPOPMIN + json.loads on a bare sorted set of the same payloads, one "
            "redis-py client (the direct pool sides use the same client).",
        ]

    def drain_worker(self, task: Any, n: int) -> float:
        """One solo worker drains ``n`` calls of ``task`` (stored with add_many beforehand)."""
        task.pool.clear()
        calls = [((i, "page_view"), {}) for i in range(n)]
        for start in range(0, n, 1000):
            task.add_many(calls[start : start + 1000])
        self.log(f"one worker drains {n:,} calls of {task.name}")
        with self.worker(n, QUEUE) as worker:
            start = worker.wait_ready()
            end = worker.wait_done(timeout=max(120.0, n / 200))
            wait_for(lambda: task.pool.stats().processed == n, 30, "the last batch to be acked")
        stats = task.pool.stats()
        task.pool.clear()
        self.client.delete(self.queue)
        if stats.processed != n or stats.failed or stats.depth or stats.in_flight:
            raise BenchError(f"unexpected accounting after draining {task.name}: {stats}")
        return rate(n, end - start)

    def run(self) -> None:
        self.warm_up()
        sections = self.args.only or SECTIONS
        if "producer" in sections:
            self.delay_and_drain()
        if "add_many" in sections:
            self.add_many()
        if "bursts" in sections:
            self.bursts()
        if "floor" in sections:
            self.floor()


#: What --only can pick; all of them by default.
SECTIONS = ("producer", "add_many", "bursts", "floor")
FLOOR_TASKS = {"per_call": floor_calls, "batch": floor_batch}
FLOOR_ROWS = {
    "floor": "the floor: bare ZPOPMIN + json.loads",
    "per_call": "CappedPool pop + ack, a body per call",
    "batch": "CappedPool pop + ack, one body per batch",
    "worker_per_call": "1 solo worker, PoolTask, body per call",
    "worker_batch": "1 solo worker, PoolTask, pool_batch body",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per rate measure")
    parser.add_argument("--burst", type=int, default=100_000, help="pooled burst size")
    parser.add_argument(
        "--plain-burst",
        type=int,
        default=None,
        help="plain Celery burst size (default: --calls; its queue length is simply this)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH, help="pool_batch_size of the worker"
    )
    parser.add_argument(
        "--sample-ms", type=float, default=2.0, help="broker queue sampling period, ms"
    )
    parser.add_argument(
        "--floor-calls", type=int, default=100_000, help="calls per side of the floor table"
    )
    parser.add_argument(
        "--floor-batch",
        type=int,
        default=DEFAULT_FLOOR_BATCH,
        help="ZPOPMIN count of the floor, and pool_batch_size of the drains beside it",
    )
    parser.add_argument(
        "--floor-rounds", type=int, default=3, help="rounds of the floor and direct pool sides"
    )
    parser.add_argument(
        "--only", nargs="+", choices=SECTIONS, help="run only these parts (default: all)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls = min(args.calls, 2_000)
        args.burst = min(args.burst, 10_000)
        args.floor_calls = min(args.floor_calls, 10_000)
    if args.plain_burst is None:
        args.plain_burst = args.calls
    for name in ("calls", "burst", "plain_burst", "batch_size", "floor_calls", "floor_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if max(args.calls, args.burst) > POOL_SIZE:
        parser.error(f"--calls and --burst must be at most the pool size, {POOL_SIZE:,}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    prefix = f"poolbench:{uuid.uuid4().hex[:8]}"
    with EmbeddedRedis() as server:
        configure(server.url, prefix)
        pooled.pool_batch_size = args.batch_size
        bench = Bench(args, server.url, prefix)
        try:
            bench.run()
        except BenchError as exc:
            print(f"benchmark failed: {exc}", file=sys.stderr)
            return 1
        finally:
            delete_prefix(bench.client, prefix)
            bench.client.close()
            app.close()
    print(
        f"celery-redqueue pool benchmark: {args.calls:,} calls per rate measure, pooled burst "
        f"{args.burst:,} calls, plain burst {args.plain_burst:,} calls, "
        f"pool_batch_size={args.batch_size}"
    )
    if bench.rows:
        print_table([bench.rows[key] for key in ROW_ORDER if key in bench.rows], bench.notes)
    if bench.floor_rows:
        print(
            f"\nThe drain against its floor: {args.floor_calls:,} calls, batches of "
            f"{args.floor_batch} (pool_batch_size), same payloads, same Redis, same run"
        )
        print_table(bench.floor_rows, bench.floor_notes, baseline="floor (bare loop)")
    if bench.producer_cost:
        print_cost(
            f"Producer cost: {args.calls:,} calls per side, interleaved in {ROUNDS} rounds, one "
            "redis-py client, no worker (server us/script: INFO commandstats)",
            POOLED_SIDE,
            PLAIN_SIDE,
            bench.producer_cost,
        )
    elapsed = time.monotonic() - started
    print(
        f"- ratio: redqueue / baseline for rates, baseline / redqueue for queue lengths and "
        f"message counts (higher is better for redqueue). Total run time {elapsed:.0f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
