#!/usr/bin/env python
"""Benchmark: redqueue beside the peers users pick for the same jobs, in one run.

Run it from the repository root, with the bench extra installed
(``.venv/bin/pip install -e '.[dev,bench]'``)::

    .venv/bin/python bench/peers_bench.py            # about 2 minutes on 2 cores
    .venv/bin/python bench/peers_bench.py --quick    # about 1 minute

Part A, batching: a pooled batch task (``PoolTask``, ``pool_batch=True``) beside a
celery-batches task (``Batches``, ``flush_every=100``): producer rate, time to drain, broker
queue peak, Redis bytes per stored call, and calls lost when the worker is killed (SIGKILL)
mid-drain.

Part B, per-key rate limits: a bucket task (``BucketTask``) beside Celery's ``rate_limit``
(per worker and task, not per key: once at the per-key rate, once at the aggregate rate) and
beside the common recipe of checking the ``limits`` library (moving window, Redis storage) in
the body and calling ``self.retry()``: peak starts per key in any one-second window, broker
messages per item, and time to finish.

It starts its own throwaway Redis (EmbeddedRedis, loopback only), which is the broker and the
store of every side. Workers are ``celery worker`` subprocesses importing this file as the
module ``peers_bench``. The script reports; it never asserts (exit status 1 only when a measure
could not be completed). See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_ready
from celery_batches import Batches  # type: ignore[import-untyped]
from limits import RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from celery_redqueue import BucketTask, PoolTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.testing import celery_test_config

ENV_URL = "PEERS_BENCH_REDIS_URL"
ENV_PREFIX = "PEERS_BENCH_PREFIX"
ENV_PREFETCH = "PEERS_BENCH_PREFETCH"

#: Part B: every key's rate, keys, items per key.
RATE = 5
KEYS = 4
BATCH = 100  # pool_batch_size and celery-batches' flush_every
KILL_TIMEOUT = 3.0  # pool_visibility_timeout of the pools in the kill measure

app = Celery("peers_bench", set_as_current=False)


def configure(url: str, prefix: str, prefetch: int = 4) -> None:
    app.conf.update(celery_test_config(url, prefix))
    app.conf.update(
        redqueue_beat=False,
        task_ignore_result=True,
        worker_redirect_stdouts=False,
        worker_prefetch_multiplier=prefetch,
    )


class _Side:
    """Worker-side recorder: each body writes what it ran to Redis, in one round trip."""

    def __init__(self) -> None:
        url = os.environ.get(ENV_URL)
        self.prefix = os.environ.get(ENV_PREFIX, "")
        self.client = redis.Redis.from_url(url) if url else None
        self._limiter: MovingWindowRateLimiter | None = None

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, "bench", *parts))

    def ran(self, side: str, ids: list[int], work_ms: float) -> None:
        if work_ms:
            time.sleep(work_ms / 1000)
        assert self.client is not None
        pipe = self.client.pipeline(transaction=False)
        pipe.sadd(self.key("ids", side), *ids)
        pipe.incrby(self.key("runs", side), len(ids))
        pipe.set(self.key("last", side), repr(time.time()))
        pipe.execute()

    def started(self, side: str, key: str) -> None:
        assert self.client is not None
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self.key("starts", side, key), repr(time.time()))
        pipe.set(self.key("last", side), repr(time.time()))
        pipe.execute()

    @property
    def limiter(self) -> MovingWindowRateLimiter:
        if self._limiter is None:
            self._limiter = MovingWindowRateLimiter(storage_from_string(os.environ[ENV_URL]))
        return self._limiter


side = _Side()
if os.environ.get(ENV_URL):  # imported by a worker subprocess
    configure(os.environ[ENV_URL], os.environ[ENV_PREFIX], int(os.environ[ENV_PREFETCH]))


@worker_ready.connect
def _stamp_ready(**_: Any) -> None:
    if side.client is not None:
        side.client.set(side.key("ready"), repr(time.time()))


# Part A: batching. Every call is (id, work_ms); a batch sleeps its calls' work, then records.


def _pool_options(queue: str, **extra: Any) -> dict[str, Any]:
    return dict(
        base=PoolTask, pool_batch=True, pool_size=1_000_000, pool_batch_size=BATCH,
        pool_drain_interval=None, pool_visibility_timeout=KILL_TIMEOUT, queue=queue, **extra,
    )  # fmt: skip


@app.task(name="peers.pooled", **_pool_options("pool_q"))
def pooled(calls: list[Any]) -> None:
    side.ran("pooled", [c.args[0] for c in calls], sum(c.args[1] for c in calls))


@app.task(name="peers.pooled_alo", **_pool_options("pool_alo_q", pool_delivery="at_least_once"))
def pooled_alo(calls: list[Any]) -> None:
    side.ran("pooled_alo", [c.args[0] for c in calls], sum(c.args[1] for c in calls))


@app.task(name="peers.batches", base=Batches, flush_every=BATCH, flush_interval=1, queue="b_q")
def batched(requests: list[Any]) -> None:
    side.ran("batches", [r.args[0] for r in requests], sum(r.args[1] for r in requests))


# Part B: per-key rate limits. Every call is (key, n).


@app.task(
    name="peers.bucket", base=BucketTask, bucket_key="key", bucket_rate=f"{RATE}/s",
    bucket_drain_interval=None, queue="bucket_q",
)  # fmt: skip
def bucketed(key: str, n: int) -> None:
    side.started("bucket", key)


@app.task(name="peers.rl_key", rate_limit=f"{RATE}/s", queue="rl_key_q")
def rl_key(key: str, n: int) -> None:
    side.started("rl_key", key)


@app.task(name="peers.rl_all", rate_limit=f"{RATE * KEYS}/s", queue="rl_all_q")
def rl_all(key: str, n: int) -> None:
    side.started("rl_all", key)


@app.task(name="peers.limits", bind=True, max_retries=None, queue="limits_q")
def limits_recipe(self: Any, key: str, n: int) -> None:
    item = RateLimitItemPerSecond(RATE)
    if not side.limiter.hit(item, "peers", key):
        reset = side.limiter.get_window_stats(item, "peers", key).reset_time
        raise self.retry(countdown=max(reset - time.time(), 0.01))
    side.started("limits", key)


# Driving


class BenchError(RuntimeError):
    pass


def wait_for(check: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(step)


class Worker:
    """A ``celery worker`` subprocess of this file's app on ``queues``."""

    def __init__(self, url: str, prefix: str, queues: str, *args: str, prefetch: int = 4) -> None:
        env = dict(os.environ)
        bench_dir = str(Path(__file__).resolve().parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (bench_dir, env.get("PYTHONPATH")) if p)
        env.update({ENV_URL: url, ENV_PREFIX: prefix, ENV_PREFETCH: str(prefetch)})
        self.log = tempfile.NamedTemporaryFile(prefix="peers-worker-", suffix=".log")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "peers_bench",
                "worker",
                "-Q",
                queues,
                "--loglevel=WARNING",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "-n",
                f"peers-{uuid.uuid4().hex[:6]}@%h",
                *args,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        if self.process.poll() is not None:
            self.log.flush()
            tail = Path(self.log.name).read_text(errors="replace")[-3000:]
            raise BenchError(f"a worker exited early:\n{tail}")
        return True

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@contextmanager
def worker(url: str, prefix: str, queues: str, *args: str, prefetch: int = 4) -> Iterator[Worker]:
    side.client.delete(side.key("ready"))  # type: ignore[union-attr]
    w = Worker(url, prefix, queues, *args, prefetch=prefetch)
    try:
        yield w
    finally:
        w.stop()


class Bench:
    def __init__(self, url: str, quick: bool) -> None:
        self.url = url
        self.prefix = f"peers:{uuid.uuid4().hex[:8]}"
        configure(url, self.prefix)
        side.prefix = self.prefix
        side.client = redis.Redis.from_url(url)
        self.client = side.client
        self.calls = 3000 if quick else 10000
        self.kill_calls = 1500 if quick else 3000
        self.items = 8 if quick else 12  # part B, per key

    def count(self, command: str) -> int:
        return int(self.client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))

    def done(self, name: str) -> int:
        return int(self.client.scard(side.key("ids", name)))

    def runs(self, name: str) -> int:
        return int(self.client.get(side.key("runs", name)) or 0)

    def memory(self, pattern: str) -> int:
        total = 0
        for key in self.client.scan_iter(match=pattern, count=1000):
            total += int(self.client.memory_usage(key, samples=0) or 0)
        return total

    def queue(self, name: str) -> str:
        return f"{self.prefix}:broker:{name}"

    # Part A

    def producing(self) -> dict[str, dict[str, float]]:
        """Interleaved producer rates (no worker), then each side's queue peak and bytes."""
        sides: dict[str, Callable[[int], Any]] = {
            "pooled": lambda i: pooled.delay(i, 0),
            "batches": lambda i: batched.delay(i, 0),
        }
        seconds = dict.fromkeys(sides, 0.0)
        step = self.calls // 10
        for chunk, start in enumerate(range(0, self.calls, step)):
            order = list(sides) if chunk % 2 == 0 else list(reversed(sides))
            for name in order:
                began = time.perf_counter()
                for i in range(start, start + step):
                    sides[name](i)
                seconds[name] += time.perf_counter() - began
        pool_keys = f"{self.prefix}:{{pool:peers.pooled}}:*"
        return {
            "pooled": {
                "rate": self.calls / seconds["pooled"],
                "peak": int(self.client.llen(self.queue("pool_q"))),
                "bytes": (self.memory(pool_keys) + self.memory(self.queue("pool_q"))) / self.calls,
            },
            "batches": {
                "rate": self.calls / seconds["batches"],
                "peak": int(self.client.llen(self.queue("b_q"))),
                "bytes": self.memory(self.queue("b_q")) / self.calls,
            },
        }

    def draining(self, name: str, queues: str, prefetch: int) -> float:
        """Seconds from the worker's ready signal until it ran every produced call."""
        with worker(self.url, self.prefix, queues, "--pool=solo", prefetch=prefetch) as w:
            ready = self.ready(w)
            wait_for(lambda: w.alive() and self.done(name) >= self.calls, 120, f"{name} drain")
            return float(self.client.get(side.key("last", name)) or 0) - ready

    def killing(self, name: str, task: Any, queue: str, prefetch: int) -> dict[str, int]:
        """Start a worker on a backlog of slow calls, SIGKILL it a third of the way through."""
        ids = range(10_000_000, 10_000_000 + self.kill_calls)
        with worker(self.url, self.prefix, queue, "--pool=solo", prefetch=prefetch) as w:
            for i in ids:
                task.delay(i, 2)  # 2 ms of work a call: 0.2 s a batch
            before = self.done(name)
            runs, lost = self.runs(name), task.pool.stats().lost if name != "batches" else 0
            third = before + self.kill_calls // 3
            wait_for(lambda: w.alive() and self.done(name) >= third, 120, f"{name} progress")
            w.kill()
        return {"produced": self.kill_calls, "before": before, "runs": runs, "lost": lost}

    def finish_kills(self, sides: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """One fresh worker on every kill queue; reap the pools; wait until nothing moves."""
        time.sleep(KILL_TIMEOUT + 0.5)  # in-flight pool batches are past their timeout now
        # What beat would do, as it does not run here: the reaper job takes back the killed
        # batch (lost or returned), and the pools' drain entries (pool_drain_interval, 60 s by
        # default) send a drain job: the killed worker held the drain job, so the drain flag
        # stays armed and new calls send none.
        pooled.reap()
        pooled_alo.reap()
        pooled.send_drain()
        pooled_alo.send_drain()
        queues = "pool_q,pool_alo_q,b_q"
        with worker(self.url, self.prefix, queues, "--pool=solo", prefetch=0) as w:
            last = -1
            while True:
                total = sum(self.runs(n) for n in sides)
                if total == last:
                    break
                last = total
                time.sleep(2.5)
                w.alive()
        results = {}
        for name, info in sides.items():
            task = {"pooled": pooled, "pooled_alo": pooled_alo}.get(name)
            results[name] = {
                "produced": info["produced"],
                "ran": self.done(name) - info["before"],
                "ran_twice": self.runs(name) - info["runs"] - (self.done(name) - info["before"]),
                "counted_lost": task.pool.stats().lost - info["lost"] if task else 0,
                "unacked_ran": 0,
                "unacked_waiting": 0,
            }
        # kombu keeps a delivered, unacknowledged message in its "unacked" hash and restores
        # it after visibility_timeout (1 h by default): ran or not, it will run (again) then.
        done = {int(i) for i in self.client.smembers(side.key("ids", "batches"))}
        for raw in self.client.hvals(f"{self.prefix}:broker:unacked"):
            message, _, routing_key = json.loads(raw)
            if routing_key == "b_q":
                call_id = json.loads(base64.b64decode(message["body"]))[0][0]
                ran = "unacked_ran" if call_id in done else "unacked_waiting"
                results["batches"][ran] += 1
        return results

    # Part B

    def limiting(self, name: str, task: Any, queue: str) -> dict[str, float]:
        """KEYS keys, items grouped by key (one hot key after another), RATE/s each."""
        total = KEYS * self.items
        with worker(self.url, self.prefix, queue, "--pool=threads", "--concurrency=4") as w:
            self.ready(w)
            lpush = self.count("lpush")
            began = time.time()
            for k in range(KEYS):
                for n in range(self.items):
                    task.delay(f"key{k}", n)
            timeout = 30 + total / RATE * 2
            wait_for(lambda: w.alive() and self._starts(name) >= total, timeout, f"{name} done")
            messages = self.count("lpush") - lpush
            last = float(self.client.get(side.key("last", name)) or 0)
        peaks = []
        for k in range(KEYS):
            times = [
                float(t) for t in self.client.lrange(side.key("starts", name, f"key{k}"), 0, -1)
            ]
            peaks.append(peak_per_second(times))
        return {"peak": max(peaks), "messages": messages / total, "seconds": last - began}

    def _starts(self, name: str) -> int:
        return sum(int(self.client.llen(side.key("starts", name, f"key{k}"))) for k in range(KEYS))

    def ready(self, w: Worker) -> float:
        """Wait for the worker's ``worker_ready`` signal; returns its timestamp."""
        stamp = wait_for(lambda: w.alive() and self.client.get(side.key("ready")), 90, "ready")
        return float(stamp)


def peak_per_second(times: list[float]) -> int:
    """Most starts in any half-open one-second window [t, t+1)."""
    times.sort()
    best = j = 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def row(cells: list[str], widths: list[int]) -> str:
    pairs = enumerate(zip(cells, widths, strict=True))
    padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs]
    return "| " + " | ".join(padded) + " |"


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    print(title)
    print()
    print(row(header, widths))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(row(r, widths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (about 1 minute)")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {text}", file=sys.stderr)

    with EmbeddedRedis() as server:
        bench = Bench(server.url, args.quick)
        try:
            say(f"part A: producing {bench.calls} calls per side, interleaved")
            prod = bench.producing()
            say("part A: draining the pool")
            drain_pool = bench.draining("pooled", "pool_q", 4)
            say("part A: draining celery-batches")
            drain_batches = bench.draining("batches", "b_q", 0)
            kills = {}
            for name, task, queue in (
                ("pooled", pooled, "pool_q"),
                ("pooled_alo", pooled_alo, "pool_alo_q"),
                ("batches", batched, "b_q"),
            ):
                say(f"part A: kill -9 mid-drain: {name}")
                kills[name] = bench.killing(name, task, queue, 0 if name == "batches" else 4)
            say("part A: a fresh worker finishes what is left")
            lost = bench.finish_kills(kills)
            limited = {}
            for name, task, queue in (
                ("bucket", bucketed, "bucket_q"),
                ("rl_key", rl_key, "rl_key_q"),
                ("rl_all", rl_all, "rl_all_q"),
                ("limits", limits_recipe, "limits_q"),
            ):
                say(f"part B: {name}")
                limited[name] = bench.limiting(name, task, queue)
        except BenchError as exc:
            print(f"bench could not complete: {exc}", file=sys.stderr)
            return 1
    report(bench, prod, drain_pool, drain_batches, lost, limited)
    say("done")
    return 0


def report(
    bench: Bench,
    prod: dict[str, dict[str, float]],
    drain_pool: float,
    drain_batches: float,
    lost: dict[str, dict[str, int]],
    limited: dict[str, dict[str, float]],
) -> None:
    def never(info: dict[str, int]) -> int:
        return info["produced"] - info["ran"] - info["counted_lost"] - info["unacked_waiting"]

    p, b = prod["pooled"], prod["batches"]
    table(
        f"Part A: batching ({bench.calls} calls, batches of {BATCH}; kill: {bench.kill_calls} "
        "calls of 2 ms, SIGKILL a third of the way)",
        ["measure", "redqueue pool_batch", "celery-batches", "ratio"],
        [
            ["producer .delay(), calls/s", f"{p['rate']:,.0f}", f"{b['rate']:,.0f}",
             f"{p['rate'] / b['rate']:.1f}x"],
            [f"time to drain {bench.calls} calls, s (1 solo worker)", f"{drain_pool:.2f}",
             f"{drain_batches:.2f}", f"{drain_batches / drain_pool:.1f}x"],
            ["broker queue peak, messages", f"{p['peak']:.0f}", f"{b['peak']:.0f}",
             f"{b['peak'] / max(p['peak'], 1):,.0f}x"],
            ["Redis bytes per stored call", f"{p['bytes']:.0f}", f"{b['bytes']:.0f}",
             f"{b['bytes'] / p['bytes']:.1f}x"],
        ],
    )  # fmt: skip
    sides = [lost["pooled_alo"], lost["pooled"], lost["batches"]]

    def line(label: str, value: Callable[[dict[str, int]], Any]) -> list[str]:
        return [label, *(str(value(info)) for info in sides)]

    table(
        "Part A: worker killed (SIGKILL) mid-drain, then a fresh worker finishes (calls)",
        ["calls", "pool at_least_once", "pool at_most_once", "celery-batches"],
        [
            line("produced", lambda i: i["produced"]),
            line("ran (distinct)", lambda i: i["ran"]),
            line("ran twice", lambda i: i["ran_twice"]),
            line("counted as lost (pool stats)", lambda i: i["counted_lost"]),
            line(
                "not run, unacked in kombu until visibility_timeout", lambda i: i["unacked_waiting"]
            ),
            line("ran, unacked in kombu: runs again then", lambda i: i["unacked_ran"]),
            line("lost without a trace", never),
        ],
    )
    names = {
        "bucket": "redqueue BucketTask",
        "rl_key": f"Celery rate_limit={RATE}/s",
        "rl_all": f"Celery rate_limit={RATE * KEYS}/s",
        "limits": "limits + self.retry()",
    }
    rows = []
    for name, label in names.items():
        f = limited[name]
        rows.append([label, f"{f['peak']:.0f}", f"{f['messages']:.2f}", f"{f['seconds']:.1f}"])
    table(
        f"Part B: {KEYS} keys x {bench.items} items at {RATE}/s per key, sent one key after "
        f"another; 1 worker, 4 threads. Evenly spaced (GCRA) a key needs "
        f"{(bench.items - 1) / RATE:.1f} s; a moving window lets {RATE} start at once and "
        f"needs {(bench.items - 1) // RATE:.0f} s",
        ["side", f"peak/key/s (limit {RATE})", "broker msgs/item", "time to finish, s"],
        rows,
    )


if __name__ == "__main__":
    sys.exit(main())
