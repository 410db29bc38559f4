#!/usr/bin/env python
"""Benchmark: what a change to one script costs, its version at a git revision beside the
working tree's, in the same run.

    .venv/bin/python bench/script_cost.py pool_add --against main
    .venv/bin/python bench/script_cost.py stream_publish --against main~1 --calls 40000
    .venv/bin/python bench/script_cost.py bucket_enqueue --against 9bf815e:bucket_enqueue_plain

It starts its own throwaway Redis (EmbeddedRedis, loopback only) and runs one public operation
that sends the script (``OPERATIONS`` below) on two structures of the same settings: one runs
the script as the revision had it (the older text substituted where the script is sent), the
other as the working tree has it (``--against REV:NAME``: script NAME as REV had it plays the
part, for a script that replaced another taking the same arguments, as bucket_enqueue's plain
call replaced bucket_enqueue_plain). An operation named ``script/variant`` sends ``script``
another way. The sides are interleaved in chunks, the order swapped every
chunk, so machine load weighs on both alike; around each chunk ``INFO commandstats`` is read,
so each side gets its own server time per script call (the time Redis spent inside the script,
without the network and the Python client). Reports; never asserts.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from celery_redqueue import CappedPool, EventStream, LeakyBucket, LeasedResources
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.redis import lua
from celery_redqueue.redis.call import Front
from celery_redqueue.structures.sets import ScheduledSet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import Side, measure

ROOT = Path(__file__).resolve().parent.parent


def _at(rev: str, name: str) -> lua.LuaScript:
    """Script ``name`` as revision ``rev`` had it, its includes read at ``rev`` too."""

    def read(n: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:celery_redqueue/lua/{n}.lua"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    original = lua._read
    lua._read = read
    try:
        lines = lua._expand(name, {name})
    finally:
        lua._read = original
    return lua.LuaScript(name, "\n".join(lua._sent(lines)) + "\n", headers="\n".join(lines))


def _pool(client: Any, prefix: str) -> Callable[[int], Any]:
    pool = CappedPool(client, "bench", capacity=10**9, prefix=prefix, drain_lease=3600)
    return lambda i: pool.add(i)


def _pool_pop(client: Any, prefix: str) -> Callable[[int], Any]:
    pool = CappedPool(client, "bench", capacity=10**9, prefix=prefix)

    def op(i: int) -> None:
        pool.add_many(range(10))
        pool.ack(pool.pop(10))

    return op


def _pool_pop_mixed(client: Any, prefix: str) -> Callable[[int], Any]:
    # Coalescing: every pop takes the general script (pool_pop replies MIXED).
    pool = CappedPool(client, "bench", capacity=10**9, prefix=prefix, coalesce=True)

    def op(i: int) -> None:
        pool.add_many(range(10))
        pool.ack(pool.pop(10))

    return op


def _stream(client: Any, prefix: str) -> Callable[[int], Any]:
    stream = EventStream(client, "bench", prefix=prefix, groups=["g"])
    return lambda i: stream.publish({"n": i})


def _lease(client: Any, prefix: str) -> Callable[[int], Any]:
    leases = LeasedResources(client, "bench", ["r1", "r2"], prefix=prefix)
    return lambda i: leases.release(leases.acquire(ttl=30))


def _set(client: Any, prefix: str) -> Callable[[int], Any]:
    sset = ScheduledSet(client, "bench", prefix=prefix)
    return lambda i: sset.add(i, delay=0)


def _bucket(client: Any, prefix: str, **options: Any) -> LeakyBucket:
    # A rate no key reaches, so every poll releases at once: the scripts' own cost is measured.
    return LeakyBucket(client, "bench", default_rate="1000000/s", prefix=prefix, **options)


def _bucket_plain(client: Any, prefix: str) -> Callable[[int], Any]:
    bucket = _bucket(client, prefix, drain_lease=3600)
    return lambda i: bucket.enqueue(f"k{i % 100}", i)


def _bucket_general(client: Any, prefix: str) -> Callable[[int], Any]:
    # A dedupe id takes bucket_enqueue's general path.
    bucket = _bucket(client, prefix, drain_lease=3600, dedupe_window=1)
    return lambda i: bucket.enqueue(f"k{i % 100}", i, dedupe_id=str(i))


def _bucket_cycle(client: Any, prefix: str) -> Callable[[int], Any]:
    bucket = _bucket(client, prefix)

    def op(i: int) -> None:
        bucket.enqueue(f"k{i % 100}", i)
        reservation = bucket.dequeue().reservation
        assert reservation is not None
        bucket.commit(reservation)

    return op


#: script -> how to build a structure and run one operation that sends it.
OPERATIONS: dict[str, Callable[[Any, str], Callable[[int], Any]]] = {
    "pool_add": _pool,
    "pool_pop": _pool_pop,
    "pool_ack": _pool_pop,
    "pool_pop_mixed": _pool_pop_mixed,
    "stream_publish": _stream,
    "lease_acquire": _lease,
    "lease_release": _lease,
    "set_add_now": _set,
    "bucket_enqueue": _bucket_plain,
    "bucket_enqueue/dedupe": _bucket_general,
    "bucket_dequeue": _bucket_cycle,
    "bucket_settle": _bucket_cycle,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script", choices=sorted(OPERATIONS))
    parser.add_argument(
        "--against", required=True, help="the git revision to compare with (REV or REV:NAME)"
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    script_name = args.script.split("/")[0]
    rev, _, old_name = args.against.partition(":")
    old = _at(rev, old_name or script_name)
    new = lua.script(script_name)
    if old.source == new.source:
        # Both sides would run the same text: a comparison of a script with itself.
        parser.error(f"{script_name} is the same at {args.against} and in the working tree")
    server = EmbeddedRedis().start()
    try:
        client = redis.Redis.from_url(server.url)
        real = lua.run_script
        using_old = [False]

        swapped: dict[int, Front] = {}

        def run(
            client: Any, script: lua.LuaScript, keys: Any, argv: Any, front: Front | None = None
        ) -> Any:
            if using_old[0] and script.name == script_name:
                if front is not None:
                    # The packed front names the tree's SHA: the old side's names the old one.
                    if id(front) not in swapped:
                        swapped[id(front)] = copy.copy(front)
                        swapped[id(front)].data = front.data.replace(
                            script.sha.encode(), old.sha.encode(), 1
                        )
                    front = swapped[id(front)]
                script = old
            return real(client, script, keys, argv, front)

        lua.run_script = run  # type: ignore[assignment]
        ops = {
            name: OPERATIONS[args.script](client, f"bench:{uuid.uuid4().hex[:8]}")
            for name in ("old", "new")
        }

        def side(name: str) -> Callable[[range], None]:
            def chunk(calls: range) -> None:
                using_old[0] = name == "old"
                op = ops[name]
                for i in calls:
                    op(i)

            return chunk

        sides: dict[str, Side] = measure(
            client, args.calls, args.rounds, {f"{args.against}": side("old"), "tree": side("new")}
        )
    finally:
        server.stop()
    print(f"\n{args.script}: {args.calls} operations per side, {args.rounds} interleaved chunks\n")
    print("| side | us/op | server us/script | scripts/op | server us/op |")
    print("|---|---|---|---|---|")
    for s in sides.values():
        per = s.scripts / s.calls if s.calls else 0
        usec = s.script_usec / s.scripts if s.scripts else 0
        server_op = s.script_usec / s.calls if s.calls else 0
        print(f"| {s.name} | {s.usec_per_call:.1f} | {usec:.2f} | {per:.2f} | {server_op:.1f} |")
    old_side, new_side = sides.values()
    if old_side.scripts and new_side.scripts:
        a = old_side.script_usec / old_side.scripts
        b = new_side.script_usec / new_side.scripts
        print(f"\nserver time per script: {100 * (b - a) / a:+.1f} %")
    print(f"time per op: {100 * (new_side.usec_per_call / old_side.usec_per_call - 1):+.1f} %")


if __name__ == "__main__":
    main()
