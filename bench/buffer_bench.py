#!/usr/bin/env python
"""Benchmark: buffered producers (``with task.buffer():``) against single calls, same run.

Run it from the repository root::

    .venv/bin/python bench/buffer_bench.py            # about 20 seconds
    .venv/bin/python bench/buffer_bench.py --quick    # a few seconds

A "request" is a block of ``--per-request`` calls (50 by default: a web request that fires 50
calls). Each side runs the same requests, interleaved in chunks so machine load weighs on all
sides alike; no worker runs (producer cost only). Round trips are counted by the Redis server
(``INFO commandstats``: EVALSHA for pool stores, LPUSH for Celery messages), not timed.
Reports; never asserts.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery

from celery_redqueue import PoolTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.testing import celery_test_config, delete_prefix

ROUNDS = 10


def command_calls(client: Any, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def command_usec(client: Any, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("usec", 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="requests per side")
    parser.add_argument("--per-request", type=int, default=50, help="calls per request")
    parser.add_argument("--quick", action="store_true", help="--requests 60")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 60
    per = args.per_request

    with EmbeddedRedis() as server:
        prefix = f"bufbench:{uuid.uuid4().hex[:8]}"
        client = redis.Redis.from_url(server.url)
        app = Celery("buffer_bench", set_as_current=False)
        app.conf.update(celery_test_config(server.url, prefix))
        app.conf.update(redqueue_beat=False, task_ignore_result=True)

        @app.task(name="bench.pooled", base=PoolTask, pool_size=10_000_000, shared=False)
        def pooled(user: int, event: str) -> None:
            pass

        @app.task(name="bench.plain", shared=False)
        def plain(user: int, event: str) -> None:
            pass

        def single(n: int) -> None:
            for i in range(n):
                pooled.delay(i, "page_view")

        def buffered(n: int) -> None:
            with pooled.buffer():
                for i in range(n):
                    pooled.delay(i, "page_view")

        def celery_plain(n: int) -> None:
            for i in range(n):
                plain.delay(i, "page_view")

        def ping(n: int) -> None:
            for _ in range(n):
                client.ping()

        sides: dict[str, Callable[[int], None]] = {
            "pooled .delay(), one call at a time": single,
            "pooled .delay() in `with task.buffer()`": buffered,
            "plain Celery .delay()": celery_plain,
            "raw PING round trips (one per call)": ping,
        }
        for run in sides.values():  # warm-up: scripts loaded, pool registered, connections up
            run(per)
        seconds = dict.fromkeys(sides, 0.0)
        trips = dict.fromkeys(sides, 0)
        script_usec = dict.fromkeys(sides, 0)
        chunk = max(1, args.requests // ROUNDS)
        done = 0
        while done < args.requests:
            todo = min(chunk, args.requests - done)
            order = list(sides) if (done // chunk) % 2 == 0 else list(reversed(sides))
            for name in order:
                before = sum(command_calls(client, c) for c in ("evalsha", "lpush", "ping"))
                usec_before = command_usec(client, "evalsha")
                began = time.perf_counter()
                for _ in range(todo):
                    sides[name](per)
                seconds[name] += time.perf_counter() - began
                after = sum(command_calls(client, c) for c in ("evalsha", "lpush", "ping"))
                trips[name] += after - before
                script_usec[name] += command_usec(client, "evalsha") - usec_before
            done += todo
            print(f"  {done}/{args.requests} requests", file=sys.stderr)

        calls = args.requests * per
        base = calls / seconds["pooled .delay(), one call at a time"]
        print()
        print(f"{args.requests} requests of {per} calls per side, interleaved, no worker")
        print()
        print(
            f"| {'producer':<42} | {'calls/s':>9} | {'us/call':>7} | {'vs single':>9} |"
            f" {'trips/request':>13} | {'Redis us/call':>13} |"
        )
        print(f"|{'-' * 44}|{'-' * 11}|{'-' * 9}|{'-' * 11}|{'-' * 15}|{'-' * 15}|")
        for name in sides:
            rate = calls / seconds[name]
            redis_time = f"{script_usec[name] / calls:.1f}" if script_usec[name] else "-"
            print(
                f"| {name:<42} | {rate:>9,.0f} | {1e6 / rate:>7.1f} | {rate / base:>8.1f}x |"
                f" {trips[name] / args.requests:>13.2f} | {redis_time:>13} |"
            )
        print()
        print(
            "trips/request: EVALSHA + LPUSH + PING commands the server counted per request "
            "(one command = one round trip here; the drain message a buffered flush sends is "
            "an LPUSH and counted too). Redis us/call: time inside the pool's scripts "
            "(INFO commandstats, cmdstat_evalsha) per call."
        )
        single = 1e6 * seconds["pooled .delay(), one call at a time"] / calls
        held = 1e6 * seconds["pooled .delay() in `with task.buffer()`"] / calls
        trip = 1e6 * seconds["raw PING round trips (one per call)"] / calls
        print(
            f"A buffered call costs {held:.1f} us: 1/{per} of a round trip "
            f"({trip / per:.1f} us of the {trip:.0f} us PING) plus what every call costs anyway "
            f"(checking, encoding and storing it: {held - trip / per:.1f} us). A single call "
            f"costs {single:.0f} us, so the ratio grows with the round trip: about "
            f"(RTT + {single - trip:.0f}) / (RTT/{per} + {held - trip / per:.1f})."
        )
        print(f"pool depth after the run: {pooled.pool.stats().depth}")
        delete_prefix(client, prefix)
        client.close()
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
