#!/usr/bin/env python
"""Benchmark: what producers and a worker see when the Redis master behind Sentinel dies.

Run it from the repository root::

    .venv/bin/python bench/sentinel_failover.py            # 3 failovers, about 1 minute
    .venv/bin/python bench/sentinel_failover.py --runs 1   # one failover

Each run starts a Sentinel group from the embedded redis-server binary (a master, a replica,
three sentinels, ``down-after-milliseconds 1000``), points ``redqueue_url`` at the sentinels,
starts an in-process Celery worker (solo) draining a pooled task, and has one producer thread
call ``.delay()`` in a loop. Once the producer has stored ``--before`` calls the master is
killed with SIGKILL; the producer keeps calling through the failover. A stand-in for beat
(reaper and drain entries) runs every ``--beat`` seconds, as ``redqueue_beat`` would.

Printed per run and as medians: how long until the sentinels named a new master, until a
producer call succeeded again, until the worker ran a call again; what the producer saw (how
many calls raised, of which types); and the accounting on the new master: calls the old
master acknowledged that never ran and were not counted (lost with the asynchronous
replication), calls counted as lost by the reaper, and whether the pool's counters add up.
The broker is a separate plain Redis (this measures the structures' failover, not kombu's).
Reports; never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import start_worker

from celery_redqueue import PoolTask, RedQueueError
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.embedded_sentinel import EmbeddedSentinelGroup
from celery_redqueue.testing import celery_test_config


def one_run(broker_url: str, before: int, after: int, beat: float) -> dict[str, Any]:
    with EmbeddedSentinelGroup() as group:
        prefix = f"failover:{uuid.uuid4().hex[:8]}"
        app = Celery(f"failover-{prefix}", set_as_current=False)
        app.conf.update(celery_test_config(broker_url, prefix))
        app.conf.update(
            redqueue_url=group.url,
            redqueue_transport_options={"master_name": group.master_name},
            redqueue_redis_options={"socket_timeout": 2, "socket_connect_timeout": 2},
            redqueue_beat=False,
            task_ignore_result=True,
        )
        processed: list[tuple[float, int]] = []

        @app.task(
            base=PoolTask, pool_size=1_000_000, pool_batch_size=50, pool_visibility_timeout=2,
            pool_drain_interval=None, shared=False,
        )  # fmt: skip
        def record(i: int) -> None:
            processed.append((time.monotonic(), i))

        stop = threading.Event()

        def beat_standin() -> None:
            while not stop.wait(beat):
                try:
                    record.reap()
                    record.send_drain()
                except RedQueueError:
                    pass  # the reaper job fails too while there is no master

        acked: list[tuple[float, int]] = []
        errors: list[tuple[float, BaseException]] = []
        calls = 0

        def produce(until: Any) -> None:
            nonlocal calls
            while not until():
                calls += 1
                try:
                    if record.delay(calls).kept:
                        acked.append((time.monotonic(), calls))
                except Exception as exc:  # measured, not hidden: every type is reported
                    errors.append((time.monotonic(), exc))
                    time.sleep(0.005)

        keeper = threading.Thread(target=beat_standin, daemon=True)
        keeper.start()
        with start_worker(app, pool="solo", perform_ping_check=False, loglevel="ERROR"):
            began = time.monotonic()
            produce(lambda: len(acked) >= before)
            rate_before = before / (time.monotonic() - began)
            _, old_port = group.master_address()
            group.kill_master()
            killed = time.monotonic()
            n_before = len(acked)
            failover = {}

            def watch() -> None:
                group.wait_failover(old_port)
                failover["at"] = time.monotonic()

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            produce(lambda: len(acked) >= n_before + after or time.monotonic() - killed > 90)
            watcher.join(60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                stats = record.pool.stats()
                if stats.depth == 0 and stats.in_flight == 0:
                    break
                time.sleep(0.1)
        stop.set()
        keeper.join()
        stats = record.pool.stats()
        app.close()

    ran = {i for _, i in processed}
    acked_before = {i for t, i in acked if t < killed}
    resumed_at = min((t for t, _ in acked if t >= killed), default=float("nan"))
    ran_again = min((t for t, _ in processed if t >= resumed_at), default=float("nan"))
    after_ok = [t for t, _ in acked if t >= resumed_at]
    rate_after = len(after_ok) / (after_ok[-1] - after_ok[0]) if len(after_ok) > 1 else 0.0
    terminal = stats.processed + stats.failed + stats.evicted + stats.lost + stats.dead
    return {
        "failover_s": failover.get("at", float("nan")) - killed,
        "producer_s": resumed_at - killed,
        "worker_s": ran_again - killed,
        "errors": len(errors),
        "error_types": Counter(type(e).__name__ for _, e in errors),
        "all_redqueue": all(isinstance(e, RedQueueError) for _, e in errors),
        "acked_before": len(acked_before),
        "lost_untraced": len(acked_before - ran) - stats.lost,
        "counted_lost": stats.lost,
        "acked_after_lost": len({i for t, i in acked if t >= killed} - ran),
        "consistent": stats.offered == stats.accepted + stats.rejected
        and stats.accepted == terminal + stats.depth + stats.in_flight,
        "rate_before": rate_before,
        "rate_after": rate_after,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=int, default=2000, help="calls stored before the kill")
    parser.add_argument("--after", type=int, default=2000, help="calls stored after it")
    parser.add_argument("--beat", type=float, default=5.0, help="reaper/drain entry interval")
    args = parser.parse_args(argv)
    results = []
    with EmbeddedRedis() as broker:
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}", file=sys.stderr)
            results.append(one_run(broker.url, args.before, args.after, args.beat))
    rows = [
        ("sentinels named a new master after, s", "failover_s", "{:.2f}"),
        ("a producer call succeeded again after, s", "producer_s", "{:.2f}"),
        ("the worker ran a call again after, s", "worker_s", "{:.2f}"),
        ("producer calls that raised", "errors", "{}"),
        ("... all RedQueueError subclasses", "all_redqueue", "{}"),
        ("calls acknowledged before the kill", "acked_before", "{}"),
        ("... that never ran, uncounted (async replication)", "lost_untraced", "{}"),
        ("... counted as lost by the reaper (popped, killed)", "counted_lost", "{}"),
        ("calls acknowledged after the kill that never ran", "acked_after_lost", "{}"),
        ("counters add up on the new master", "consistent", "{}"),
        ("producer calls/s before the kill", "rate_before", "{:,.0f}"),
        ("producer calls/s after the failover", "rate_after", "{:,.0f}"),
    ]
    print()
    print(
        f"Sentinel failover: SIGKILL of the master after {args.before} stored calls; "
        f"1 replica, 3 sentinels (down-after 1000 ms), beat stand-in every {args.beat:g} s"
    )
    print()
    head = ["measure", *(f"run {n + 1}" for n in range(args.runs)), "median"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for label, key, fmt in rows:
        values = [r[key] for r in results]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        median = fmt.format(statistics.median(values)) if numeric else "-"
        print("| " + " | ".join([label, *(fmt.format(v) for v in values), median]) + " |")
    types = sum((r["error_types"] for r in results), Counter())
    print()
    print(f"error types over all runs: {dict(types)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
