#!/usr/bin/env python
"""Benchmark: an event stream with three consumer groups (StreamTask) against plain Celery
sending one task per consumer per event.

Run it from the repository root::

    .venv/bin/python bench/stream_bench.py            # 20,000 events, about a minute
    .venv/bin/python bench/stream_bench.py --quick    # 2,000 events, a few seconds
    .venv/bin/python bench/stream_bench.py --calls    # script calls only, no worker

``--calls`` times the stream's own script calls (a publish, a group's figures, a heartbeat)
beside the same scripts with every argument packed on every call (what the stream sent before
its calls' keys were packed once, redis/call.py's Front), interleaved in rounds in one process.

It starts its own throwaway Redis (EmbeddedRedis, loopback only), which is both the Celery
broker and the stream store, and prints each figure beside its same-run baseline. It reports
and never asserts. The consuming side is a ``celery worker --pool=solo -c 1`` subprocess that
imports this file as the module ``stream_bench``; its own clock stamps when it was ready and
when the body had run for every expected event, so start-up is not counted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready

from celery_redqueue import StreamTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.redis.call import pack_front
from celery_redqueue.redis.lua import script
from celery_redqueue.structures.streams import GROUP_PARTS, PUBLISH_GROUP_PARTS
from celery_redqueue.testing import celery_test_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_cost import measure  # bench/ itself, as pool_bench imports it

ENV_URL, ENV_PREFIX, ENV_TARGET = "STREAM_BENCH_URL", "STREAM_BENCH_PREFIX", "STREAM_BENCH_TARGET"
GROUPS = ("sms", "slip", "points")
PLAIN_QUEUE = "plain"

app = Celery("stream_bench", set_as_current=False)


def configure(url: str, prefix: str) -> None:
    app.conf.update(celery_test_config(url, prefix))
    app.conf.update(redqueue_beat=False, task_ignore_result=True, worker_redirect_stdouts=False)


class _WorkerSide:
    """In the worker: counts body runs and stamps the time of the last expected one."""

    def __init__(self) -> None:
        self.count = 0
        self.target = int(os.environ.get(ENV_TARGET) or 0)
        self.prefix = os.environ.get(ENV_PREFIX, "")
        url = os.environ.get(ENV_URL)
        self.client = redis.Redis.from_url(url) if url else None

    def tick(self) -> None:
        self.count += 1
        if self.count == self.target and self.client is not None:
            self.client.set(f"{self.prefix}:bench:done", repr(time.time()))


_side = _WorkerSide()
if os.environ.get(ENV_URL):
    configure(os.environ[ENV_URL], os.environ[ENV_PREFIX])


@worker_ready.connect
def _stamp_ready(**_: Any) -> None:
    if _side.client is not None:
        _side.client.set(f"{_side.prefix}:bench:ready", repr(time.time()))


def _consumer(group: str) -> Any:
    # Every body does the same trivial thing on both sides: bump a counter.
    @app.task(
        name=f"stream_bench.{group}",
        base=StreamTask,
        stream_name="orders",
        stream_group=group,
        stream_batch_size=100,
        stream_drain_interval=None,
        stream_maxlen=1_000_000,
    )
    def stream_body(event: Any) -> None:
        _side.tick()

    @app.task(name=f"stream_bench.plain_{group}", queue=PLAIN_QUEUE)
    def plain_body(event: Any) -> None:
        _side.tick()

    return stream_body, plain_body


CONSUMERS = {group: _consumer(group) for group in GROUPS}


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def call_costs(n: int, rounds: int) -> int:
    """Microseconds per script call: the stream's own calls, beside the same script and
    arguments sent bare, its keys packed once (redis/call.py's Front) or everything packed per
    call (`run_script` without a front), interleaved. Only public names: an older commit's
    stream can be timed with this file (PYTHONPATH=<its worktree>)."""
    stream = CONSUMERS["sms"][0].stream
    client = stream.client
    group = GROUPS[0]
    payload = stream.encode({"order": 1, "total": 101})
    publish_keys = [stream.keys(part) for part in stream.parts]
    for g in GROUPS:
        publish_keys += [stream.keys(f"group:{g}:{part}") for part in PUBLISH_GROUP_PARTS]
    group_keys = [stream.keys(part) for part in stream.parts]
    group_keys += [stream.keys(f"group:{group}:{part}") for part in GROUP_PARTS]
    publish_args = [stream.maxlen or 0, stream.drain_lease_ms, len(GROUPS), *GROUPS]
    calls: dict[str, tuple[Any, str, list[str], list[Any]]] = {
        "publish() per event": (
            lambda: stream.publish({"order": 1, "total": 101}),
            "stream_publish",
            publish_keys,
            [*publish_args, payload, "", ""],
        ),
        "group_figures()": (
            lambda: stream.group_figures(group),
            "stream_figures",
            group_keys,
            [group],
        ),
        "renew() (a heartbeat, no ids)": (
            lambda: stream.renew(group, "bench"),
            "stream_renew",
            group_keys,
            [group, "bench", stream.drain_lease_ms],
        ),
    }

    def repeat(call: Any) -> Any:
        def run(chunk: range) -> None:
            for _ in chunk:
                call()

        return run

    def bare(name: str, keys: list[str], args: list[Any], packed: bool) -> Any:
        lua = script(name)
        front = pack_front(client, lua, keys, []) if packed else None
        return repeat(lambda: lua(client, keys, args, front))

    stream.group_figures(group)  # registers the stream and loads the scripts: not timed
    print(
        f"{n:,} calls per side, interleaved in {rounds} rounds. stream: its own call; bare: the "
        "same script and arguments, keys packed once, or everything packed per call",
        file=sys.stderr,
    )
    print(f"\n{'script call, us per call':32} {'stream':>8} {'bare, once':>11} {'per call':>9}")
    for label, (own, name, keys, args) in calls.items():
        sides = {
            "stream": repeat(own),
            "once": bare(name, keys, args, packed=True),
            "per call": bare(name, keys, args, packed=False),
        }
        timed = measure(client, n, rounds, sides)  # producer_cost's interleaving
        us = [timed[side].usec_per_call for side in sides]
        print(f"{label:32} {us[0]:8.1f} {us[1]:11.1f} {us[2]:9.1f}")
    return 0


def consume(url: str, prefix: str, client: Any, target: int, queue: str) -> float:
    """Seconds a solo worker on ``queue`` takes (its own clock) to run ``target`` bodies."""
    client.delete(f"{prefix}:bench:ready", f"{prefix}:bench:done")
    env = dict(os.environ, **{ENV_URL: url, ENV_PREFIX: prefix, ENV_TARGET: str(target)})
    bench_dir = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (bench_dir, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "stream_bench",
                "worker",
                "--pool=solo",
                "--concurrency=1",
                "--loglevel=WARNING",
                "-Q",
                queue,
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "-n",
                f"bench-{uuid.uuid4().hex[:6]}@%h",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: client.get(f"{prefix}:bench:done"), 600, f"{target} bodies")
        except RuntimeError:
            log.seek(0)
            sys.stderr.write(log.read().decode()[-3000:])
            raise
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ready = float(client.get(f"{prefix}:bench:ready"))
    return float(client.get(f"{prefix}:bench:done")) - ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="--events 2000")
    parser.add_argument(
        "--calls", type=int, nargs="?", const=20_000, help="time script calls only (20,000)"
    )
    parser.add_argument("--rounds", type=int, default=20, help="rounds of --calls' sides")
    args = parser.parse_args()
    n = 2_000 if args.quick else args.events
    if args.calls:
        with EmbeddedRedis() as server:
            configure(server.url, f"bench:{uuid.uuid4().hex[:8]}")
            return call_costs(args.calls, args.rounds)
    events = [{"order": i, "total": 100 + i} for i in range(n)]
    prefix = f"bench:{uuid.uuid4().hex[:8]}"
    with EmbeddedRedis() as server:
        configure(server.url, prefix)
        client = redis.Redis.from_url(server.url)
        first = CONSUMERS["sms"][0]
        stream = first.stream
        plains = [plain for _, plain in CONSUMERS.values()]
        broker = f"{prefix}:broker:"

        print(f"{n:,} events, groups {GROUPS}", file=sys.stderr)
        half = n // 2
        started = time.perf_counter()
        for event in events[:half]:
            stream.publish(event)
        publish_one = time.perf_counter() - started
        started = time.perf_counter()
        stream.publish_many(events[half:])
        publish_many = time.perf_counter() - started
        drains = client.llen(f"{broker}celery")
        started = time.perf_counter()
        for event in events:
            for plain in plains:
                plain.delay(event)
        plain_publish = time.perf_counter() - started
        plain_messages = client.llen(f"{broker}{PLAIN_QUEUE}")

        print("consuming the stream...", file=sys.stderr)
        stream_seconds = consume(server.url, prefix, client, n * len(GROUPS), "celery")
        print("consuming the plain tasks...", file=sys.stderr)
        plain_seconds = consume(server.url, prefix, client, n * len(GROUPS), PLAIN_QUEUE)
        lag = {g: t.stream.group_figures(g).lag for g, (t, _) in CONSUMERS.items()}

    rows = [
        ("publish, events/s (publish() per event vs 3 x delay())", half / publish_one,
         n / plain_publish),
        ("publish, events/s (publish_many() vs 3 x delay())", (n - half) / publish_many,
         n / plain_publish),
        ("consumed per group, events/s (1 solo worker, 3 groups)", n / stream_seconds,
         n / plain_seconds),
        ("broker messages for all events", drains, plain_messages),
    ]  # fmt: skip
    print(f"\n{'measure':58} {'stream':>12} {'plain Celery':>13} {'ratio':>7}")
    for label, ours, theirs in rows:
        better = theirs / ours if label.startswith("broker") else ours / theirs
        print(f"{label:58} {ours:12,.0f} {theirs:13,.0f} {better:6.1f}x")
    print(
        f"\nconsumed: every group caught up (lag {lag}); both sides ran the same trivial body "
        f"{n * len(GROUPS):,} times in one solo worker subprocess; ratio > 1x: the stream did "
        "better."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
