#!/usr/bin/env python
"""Benchmark: what a by-name call costs against ``delay()``, same run, same pool.

Run it from the repository root::

    .venv/bin/python bench/by_name_bench.py            # 5,000 calls per side
    .venv/bin/python bench/by_name_bench.py --quick    # 1,000

Each side stores ``--calls`` calls into the same kind of pool: ``delay()`` in the producer, and
``app.send_task`` by name (as a service that does not import the task), which a worker stores.
It reports the producer's time, the broker messages each side put on the broker (counted from
the queue's length before any worker runs) and, with one solo worker started afterwards, the
time until every call has been stored and run; a plain Celery task sent by name (``acks_late``,
as redqueue tasks are) is the reference. Reports; never asserts.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker

from celery_redqueue import PoolTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.testing import celery_test_config, delete_prefix


def run_side(url: str, by_name: bool, calls: int, plain: bool = False) -> dict[str, float]:
    prefix = f"bench-byname-{uuid.uuid4().hex[:8]}"
    app = Celery(f"by-name-{prefix}", set_as_current=False)
    app.conf.update(celery_test_config(url, prefix))
    client = redis.Redis.from_url(url)

    @app.task(base=PoolTask, shared=False, pool_size=calls * 2, pool_drain_interval=None)
    def record(i: int) -> None:
        pass

    done = [0]

    @app.task(shared=False, ignore_result=True, acks_late=True)
    def celery_task(i: int) -> None:
        done[0] += 1

    if plain:  # the reference: a plain Celery task, a message per call either way
        record = celery_task

    started = time.perf_counter()
    for i in range(calls):
        if by_name:
            app.send_task(record.name, args=[i])
        else:
            record.delay(i)
    produced = time.perf_counter() - started
    messages = client.llen(f"{prefix}:broker:celery")
    started = time.perf_counter()
    with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        while (done[0] if plain else record.pool.stats().processed) < calls:
            time.sleep(0.01)
    drained = time.perf_counter() - started
    delete_prefix(client, prefix)
    app.close()
    return {"produced": produced, "messages": messages, "drained": drained}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="--calls 1000")
    args = parser.parse_args(argv)
    calls = 1000 if args.quick else args.calls
    with EmbeddedRedis() as server:
        fast = run_side(server.url, False, calls)
        named = run_side(server.url, True, calls)
        reference = run_side(server.url, True, calls, plain=True)
    sides = (fast, named, reference)
    print(f"{calls} calls into one pool, one solo worker (plain Celery: acks_late too)")
    print(f"{'':34}{'delay()':>12}{'send_task':>12}{'plain Celery':>14}")
    rows = [
        ("producer, calls/s", [calls / side["produced"] for side in sides]),
        ("broker messages before the worker", [side["messages"] for side in sides]),
        ("worker: stored and run, calls/s", [calls / side["drained"] for side in sides]),
    ]
    for label, values in rows:
        print(f"{label:34}{values[0]:>12,.0f}{values[1]:>12,.0f}{values[2]:>14,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
