#!/usr/bin/env python
"""Benchmark: what ``redqueue_tracing`` costs a pooled ``.delay()`` and a drain, in one run.

Run it from the repository root::

    .venv/bin/python bench/tracing_bench.py            # about a minute
    .venv/bin/python bench/tracing_bench.py --quick    # a few seconds

It starts its own throwaway Redis (EmbeddedRedis) and the OpenTelemetry SDK with a
BatchSpanProcessor feeding an exporter that drops what it gets (a production pipeline without
the network). Producer sides, timed over the same calls interleaved in chunks, each on a pool
of its own:

* tracing off (the default; nothing of OpenTelemetry is touched);
* tracing on, no span active (the call is stored as it is today);
* tracing on, inside an active span (the W3C context is stored with the call);
* the same plus a PRODUCER ``create`` span per call: what the package does NOT do, measured to
  show why.

Then the bytes Redis holds per call (off and traced), and the consumer side: draining the
same calls in this process, tracing off against one ``process`` span per call. Reports; never
asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from celery_redqueue import PoolTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.tasks.config import get_config
from celery_redqueue.testing import celery_test_config, delete_prefix

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import PING

OFF = "tracing off"
ON_IDLE = "tracing on, no active span"
ON_SPAN = "tracing on, inside a span"
CREATE = "... plus a PRODUCER span per call"


class DropExporter(SpanExporter):
    """Takes every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def make_app(url: str, prefix: str, traced: bool) -> Celery:
    app = Celery(f"tracing-bench-{traced}", set_as_current=False)
    app.conf.update(celery_test_config(url, prefix))
    app.conf.redqueue_tracing = traced
    app.conf.redqueue_beat = False
    return app


def pooled(app: Celery, name: str) -> Any:
    @app.task(
        base=PoolTask,
        name=name,
        pool_size=10_000_000,
        pool_batch_size=500,
        pool_drain_linger=0.0,
        shared=False,
    )
    def record(user: int, event: str = "click") -> None:
        pass

    return record


def producer_sides(
    off: Any, idle: Any, span: Any, create: Any
) -> dict[str, Callable[[range], Any]]:
    tracer = trace.get_tracer("tracing_bench")

    def plain(task: Any) -> Callable[[range], None]:
        def run(chunk: range) -> None:
            for i in chunk:
                task.delay(i, event="click")

        return run

    def in_span(chunk: range) -> None:
        with tracer.start_as_current_span("request"):
            for i in chunk:
                span.delay(i, event="click")

    def with_create(chunk: range) -> None:
        with tracer.start_as_current_span("request"):
            for i in chunk:
                with tracer.start_as_current_span(
                    f"create {create.name}", kind=trace.SpanKind.PRODUCER
                ):
                    create.delay(i, event="click")
        # Its spans' export counts against it, not against whichever side runs next.
        trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]

    return {OFF: plain(off), ON_IDLE: plain(idle), ON_SPAN: in_span, CREATE: with_create}


def interleaved(
    sides: dict[str, Callable[[range], Any]], calls: int, rounds: int
) -> dict[str, list[float]]:
    """Run every side over ``range(calls)`` in ``rounds`` chunks, taking turns (the order
    reversed every chunk); returns each side's microseconds per call, chunk by chunk."""
    out: dict[str, list[float]] = {name: [] for name in sides}
    step = max(1, -(-calls // rounds))
    for number, start in enumerate(range(0, calls, step)):
        chunk = range(start, min(calls, start + step))
        for name in list(sides) if number % 2 == 0 else list(reversed(sides)):
            began = time.perf_counter()
            sides[name](chunk)
            out[name].append((time.perf_counter() - began) / len(chunk) * 1e6)
    return out


def python_cost(tasks: dict[str, Any], calls: int) -> dict[str, float]:
    """Microseconds per call of checking and encoding a call (``_prepare_call``, where the
    tracing hook runs), without Redis: the tracing cost without the network's noise. The
    sides take turns, 15 rounds each; each keeps its best round."""
    tracer = trace.get_tracer("tracing_bench")
    best = dict.fromkeys(tasks, float("inf"))
    for _ in range(15):
        for name, task in tasks.items():
            with tracer.start_as_current_span("request") if name == ON_SPAN else _nothing():
                began = time.perf_counter()
                for i in range(calls):
                    task._prepare_call((i,), {"event": "click"})
                best[name] = min(best[name], time.perf_counter() - began)
    return {name: seconds / calls * 1e6 for name, seconds in best.items()}


def off_hook_cost(app: Celery, calls: int) -> float:
    """Microseconds of what tracing adds to the producer path when it is off: the one test
    ``get_config(app).tracing`` (best of 15 rounds)."""
    best = float("inf")
    for _ in range(15):
        began = time.perf_counter()
        for _ in range(calls):
            if get_config(app).tracing:
                raise AssertionError("tracing is off in this app")
        best = min(best, time.perf_counter() - began)
    return best / calls * 1e6


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def stored_bytes(client: redis.Redis, task: Any) -> float:
    """Mean bytes of one stored entry (id prefix and payload) in the task's pool."""
    members = client.zrange(task.pool.keys("items"), 0, 999)
    return sum(len(m) for m in members) / len(members)


def drain_seconds(task: Any) -> tuple[float, int]:
    """Time one in-process drain of everything the pool holds; returns (seconds, calls)."""
    depth = task.pool.stats().depth
    began = time.perf_counter()
    while task.pool.stats().depth:
        task.drain()
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]  # export included
    return time.perf_counter() - began, depth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    args = parser.parse_args()
    calls, rounds, drained = (3_000, 10, 1_000) if args.quick else (20_000, 40, 10_000)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    trace.set_tracer_provider(provider)
    prefix = f"tracing-bench-{uuid.uuid4().hex[:8]}"
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        off_app = make_app(server.url, prefix, traced=False)
        on_app = make_app(server.url, prefix, traced=True)
        off = pooled(off_app, "bench.off")
        idle, span, create = (pooled(on_app, f"bench.{n}") for n in ("idle", "span", "create"))
        sides = producer_sides(off, idle, span, create)
        sides[PING] = lambda chunk: [client.ping() for _ in chunk]
        for side in sides.values():  # warm up: scripts loaded, connections held
            side(range(200))
        for task in (off, idle, span, create):
            task.pool.clear()
        chunks = interleaved(sides, calls, rounds)
        base = chunks[OFF]
        print(f"\nProducer: pooled .delay(), {calls:,} calls per side, {rounds} interleaved chunks")
        print("(us per call: all chunks; and the best chunk, which load spikes touch least)\n")
        print("| side | us/call | vs off | best chunk | vs off |")
        print("|---|---|---|---|---|")
        for name in (OFF, ON_IDLE, ON_SPAN, CREATE, PING):
            mean, low = statistics.fmean(chunks[name]), min(chunks[name])
            print(
                f"| {name} | {mean:.1f} | {mean - statistics.fmean(base):+.1f} us "
                f"| {low:.1f} | {low - min(base):+.1f} us |"
            )
        cost = python_cost({OFF: off, ON_IDLE: idle, ON_SPAN: span}, calls)
        print(
            "\nWithout Redis (checking and encoding one call, best of 15, interleaved): "
            + "; ".join(f"{name} {us:.2f} us" for name, us in cost.items())
            + f" (tracing adds {cost[ON_IDLE] - cost[OFF]:+.2f} us without a span, "
            f"{cost[ON_SPAN] - cost[OFF]:+.2f} us with one); the hook itself with tracing "
            f"off: {off_hook_cost(off_app, calls):.3f} us a call"
        )
        print(
            f"Stored per call: {stored_bytes(client, off):.0f} bytes off or without a span, "
            f"{stored_bytes(client, span):.0f} bytes traced"
        )
        for task in (idle, create):
            task.pool.clear()
        off.pool.clear()
        span.pool.clear()
        off.add_many([((i,), {"event": "click"}) for i in range(drained)])
        tracer = trace.get_tracer("tracing_bench")
        with tracer.start_as_current_span("request"):
            span.add_many([((i,), {"event": "click"}) for i in range(drained)])
        off_s, off_n = drain_seconds(off)
        on_s, on_n = drain_seconds(span)
        print(
            f"Consumer: in-process drain of {off_n:,} calls, tracing off {off_s / off_n * 1e6:.1f}"
            f" us/call; {on_n:,} traced calls, one process span each "
            f"{on_s / on_n * 1e6:.1f} us/call ({(on_s - off_s) / on_n * 1e6:+.1f} us)"
        )
        provider.shutdown()
        delete_prefix(client, prefix)


if __name__ == "__main__":
    main()
