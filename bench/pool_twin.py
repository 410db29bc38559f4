#!/usr/bin/env python
"""Benchmark: what a twin script for the common pooled call would buy over pool_add's lean
case, in the same run.

    .venv/bin/python bench/pool_twin.py [--against 5ffd413] [--calls 20000] [--rounds 40]

pool_add keeps a plain call (no dedupe id, no delay, a pool with room) in a branch that runs
first. Until it replaced it, a twin script did that alone: ``pool_add_plain``, read here as
revision ``--against`` had it (its includes read there too). Both are sent the same way the
pool sends its scripts (redis/call.py, keys and head packed once), into two pools of the same
settings, in interleaved chunks (producer_cost.measure), so machine load weighs on both
alike. Issue 31 keeps a twin only where it buys more than 10 % on the producer. Starts its
own throwaway Redis (loopback only). Reports; never asserts.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path

import redis

from celery_redqueue import CappedPool
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.redis.call import pack_front
from celery_redqueue.redis.lua import LuaScript, script

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import measure
from script_cost import _at

#: The last revision with the twin (pool_add_plain.lua).
TWIN_AT = "5ffd413"


def _side(
    client: redis.Redis, pool: CappedPool, lua: LuaScript, before: list[str]
) -> Callable[[range], None]:
    keys = [pool.keys(part) for part in lua.parts or ()]
    front = pack_front(client, lua, keys, [*pool._script_head(), *before])
    payload = pool.encode([[0, "page_view"], {}])

    def chunk(calls: range) -> None:
        for _ in calls:
            lua(client, keys, [repr(random.random()), payload], front)

    return chunk


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default=TWIN_AT, help="a revision with pool_add_plain.lua")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    twin = _at(args.against, "pool_add_plain")
    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url)
        options = {"capacity": 10**9, "drain_lease": 3600}
        one = CappedPool(client, "merged", prefix="bench:twin:a", **options)
        two = CappedPool(client, "twin", prefix="bench:twin:b", **options)
        sides = measure(
            client,
            args.calls,
            args.rounds,
            {
                "pool_add, lean case": _side(client, one, script("pool_add"), ["plain"]),
                f"pool_add_plain at {args.against}": _side(client, two, twin, []),
            },
        )
        if one.stats().depth != args.calls or two.stats().depth != args.calls:
            raise SystemExit(f"expected {args.calls} calls in each pool")
    finally:
        server.stop()
    print(f"\n{args.calls} calls per side, {args.rounds} interleaved chunks\n")
    print("| script | us/call | server us/script |")
    print("|---|---|---|")
    for s in sides.values():
        print(f"| {s.name} | {s.usec_per_call:.1f} | {s.script_usec / s.scripts:.1f} |")
    merged, kept = sides.values()
    bought = 100 * (1 - kept.usec_per_call / merged.usec_per_call)
    print(f"\nthe twin would buy {bought:.1f} % per call")


if __name__ == "__main__":
    main()
