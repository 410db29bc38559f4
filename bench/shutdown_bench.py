#!/usr/bin/env python
"""Benchmark: SIGTERM-to-served, the time from a draining worker's warm shutdown to another
worker's first stored call, per kind (at-least-once pool, bucket, stream).

Run it from the repository root::

    .venv/bin/python bench/shutdown_bench.py            # 3 rounds per kind
    .venv/bin/python bench/shutdown_bench.py --rounds 1

Per round: worker A (``celery worker -c 1``, prefork) drains a backlog of slow calls
(bench/shutdown_app.py: 50 ms each, drains that would hold A for 600 s); worker B starts and
is ready; A's main process gets SIGTERM. Printed: SIGTERM to B's first call, SIGTERM to A's
exit, and, as the floor measured in the same round, B's first call after a fresh drain job
sent to an idle B (the path's own latency). Without the shutdown hand-over, B's first call
comes after A's drain ends: its time budget (600 s here). Reports; never asserts.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.tasks.stream import publish

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("pool", "bucket", "stream")
BACKLOG = 400


def start(env: dict[str, str], name: str, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "celery", "-A", "shutdown_app", "worker", "-c", "1"]
    command += ["--pool=prefork", "--loglevel=INFO", f"--hostname={name}@%h"]
    command += ["--without-mingle", "--without-gossip"]
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            env={**env, "SHUTDOWN_WORKER": name},
            cwd=ROOT / "bench",
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.002)
    return value


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def one_round(app_module, client: redis.Redis, env, kind: str, logs: Path) -> tuple[float, ...]:  # type: ignore[no-untyped-def]
    key = f"{app_module.PREFIX}:ran:{kind}"
    client.delete(key)
    task = {"pool": app_module.pooled, "bucket": app_module.metered}.get(kind)

    def send(i: int) -> None:
        if task is None:
            publish(app_module.app, app_module.STREAM, i)
        else:
            task.delay(i)

    def records() -> list[tuple[str, float]]:
        return [(w.decode(), float(t)) for w, t in (e.split() for e in client.lrange(key, 0, -1))]

    a = start(env, "A", logs / f"{kind}-a.log")
    b = None
    try:
        for i in range(BACKLOG):
            send(i)
        wait(lambda: len(records()) >= 5, 120, "A draining")
        b = start(env, "B", logs / f"{kind}-b.log")
        wait(lambda: "ready." in (logs / f"{kind}-b.log").read_text(), 120, "B ready")
        time.sleep(0.5)
        sigterm = time.time()
        os.kill(a.pid, signal.SIGTERM)
        first = wait(
            lambda: [t for w, t in records() if w == "B" and t > sigterm], 120, "B serving"
        )[0]
        a.wait(timeout=120)
        exited = time.time()
        # The floor: B drains what is left, then a fresh call on an idle B.
        wait(lambda: client.llen(key) >= BACKLOG, 600, "the backlog served")
        time.sleep(1.0)
        sent = time.time()
        send(BACKLOG)
        fresh = wait(lambda: [t for w, t in records()[BACKLOG:] if w == "B"], 60, "fresh")[0]
        return first - sigterm, exited - sigterm, fresh - sent - app_module.SLOW
    finally:
        stop(a)
        if b is not None:
            b.send_signal(signal.SIGTERM)
            try:
                b.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop(b)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as tmp:
        prefix = f"bench-shutdown-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "SHUTDOWN_URL": server.url, "SHUTDOWN_PREFIX": prefix}
        os.environ.update(SHUTDOWN_URL=server.url, SHUTDOWN_PREFIX=prefix)
        sys.path.insert(0, str(ROOT / "bench"))
        import shutdown_app

        client = redis.Redis.from_url(server.url)
        print(f"{'kind':8} {'SIGTERM->B served':>18} {'SIGTERM->A exit':>16} {'fresh call':>11}")
        for kind in KINDS:
            rows = [
                one_round(shutdown_app, client, env, kind, Path(tmp)) for _ in range(args.rounds)
            ]
            med = [statistics.median(col) * 1000 for col in zip(*rows, strict=True)]
            print(f"{kind:8} {med[0]:>15.0f} ms {med[1]:>13.0f} ms {med[2]:>8.1f} ms")
        print(f"(medians of {args.rounds} rounds; each call's body takes 50 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
