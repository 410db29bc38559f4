#!/usr/bin/env python
"""Crash-safety suite: real `celery worker` processes, real Redis servers, real faults.

    .venv/bin/python bench/torture.py            # every scenario, a few minutes
    .venv/bin/python bench/torture.py --quick    # three short scenarios (the test suite's)
    .venv/bin/python bench/torture.py --scenario kill-prefork --scenario proxy-drops

Each scenario starts a structures Redis and a broker Redis of its own, workers running
bench/torture_app.py (plus one `celery beat` for the reaper), and produces calls to eight tasks
while the fault happens: an at-least-once pool, an at-most-once pool, a bucket, a stream, by-name
calls (``send_task`` to a pooled task: the worker stores the message), a metered bucket (costs,
``bucket_concurrency=2``, keys paused now and then), a gathering batch pool (``pool_batch_wait``)
and an at-most-once pool with per-call results (every waiter must get an answer):

  kill-prefork / kill-threads / kill-solo   SIGKILL the worker (all its processes) in a loop
  consumer-kill    the same for prefork workers running the continuous consumer
  restart-aof      SIGKILL the structures Redis (appendonly, fsync always) and start it again
  consumer-restart the same, the workers running the continuous consumer
  redis-down       the structures Redis (appendonly) is down for 5 s, then comes back
  restart-no-aof   the same without persistence: Redis forgets everything (expected losses)
  client-kill      CLIENT KILL every normal connection every few milliseconds
  proxy-drops      producers and workers reach Redis through a proxy that loses replies
  broker-down      the broker stops for a few seconds, then comes back

Every call acknowledged by ``delay()`` (it returned) and every body run (a line in a history
file, outside Redis) is recorded. A call that raised (Redis unavailable, ReplyLostError) is
"maybe": it may run at most once more than it was acknowledged. The checks: no acknowledged
call of an at-least-once structure is never run; an at-most-once call never runs twice; nothing
runs that was never called; the pool and bucket identities hold; and the time from the fault's
end until every acknowledged call ran. It prints a table and exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
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
from dataclasses import dataclass, field
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from celery_redqueue.embedded import EmbeddedRedis  # noqa: E402
from tests.support.proxy import ReplyDroppingProxy  # noqa: E402

KINDS = ("pool", "pool_amo", "bucket", "stream", "by_name", "metered", "gather", "results")
AT_LEAST_ONCE = ("pool", "bucket", "stream", "by_name", "metered", "gather")
AT_MOST_ONCE = ("pool_amo", "results")
#: Scenarios whose structures Redis keeps its data (appendonly, fsync always) across the fault.
DURABLE = ("restart-aof", "consumer-restart", "redis-down")
SCENARIOS = (
    "kill-prefork",
    "kill-threads",
    "kill-solo",
    "consumer-kill",
    "restart-aof",
    "consumer-restart",
    "redis-down",
    "restart-no-aof",
    "client-kill",
    "proxy-drops",
    "broker-down",
)
QUICK = ("kill-solo", "client-kill", "proxy-drops")


@dataclass
class Outcome:
    scenario: str
    kind: str
    acked: int = 0
    maybe: int = 0
    never_run: int = 0
    duplicates: int = 0
    #: Calls with per-call results whose waiter would still wait (no value, no error stored).
    unanswered: int = 0
    unknown: int = 0
    recover: float | None = None
    identity: str = "-"
    violations: list[str] = field(default_factory=list)


class Run:
    """One scenario: servers, worker and beat processes, a producer, the history."""

    def __init__(self, scenario: str, calls: int, produce_for: float, recover_for: float) -> None:
        self.scenario = scenario
        self.calls = calls
        self.produce_for = produce_for
        self.recover_for = recover_for
        self.dir = Path(tempfile.mkdtemp(prefix=f"torture-{scenario}-"))
        self.prefix = f"torture:{uuid.uuid4().hex[:8]}"
        durable = scenario in DURABLE
        extra = ("--appendfsync", "always") if durable else ()
        self.redis = EmbeddedRedis(appendonly=durable, extra_args=extra).start()
        # A by-name call is its message until a worker stores it: a broker that forgets its
        # queue on restart loses those (the broker's durability, not ours), so broker-down
        # runs a durable broker.
        self.broker = EmbeddedRedis(
            appendonly=scenario == "broker-down",
            extra_args=("--appendfsync", "always") if scenario == "broker-down" else (),
        ).start()
        self.proxy: ReplyDroppingProxy | None = None
        url = self.redis.url
        if scenario == "proxy-drops":
            self.proxy = ReplyDroppingProxy(("127.0.0.1", self.redis.port)).start()
            url = self.proxy.url
        self.env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'bench'}{os.pathsep}{ROOT}",
            "TORTURE_REDQUEUE_URL": url,
            "TORTURE_BROKER_URL": self.broker.url,
            "TORTURE_RESULTS_URL": self.redis.url,
            "TORTURE_PREFIX": self.prefix,
            "TORTURE_HISTORY": str(self.dir),
        }
        self.acked: dict[str, list[str]] = {k: [] for k in KINDS}
        self.result_ids: dict[str, str] = {}  # call id -> its receipt's id (results kind)
        self.maybe: dict[str, list[str]] = {k: [] for k in KINDS}
        self.errors: collections.Counter[str] = collections.Counter()
        self.workers: list[subprocess.Popen[bytes]] = []
        self.fault_end = 0.0

    # Processes

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        log = (self.dir / "processes.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "torture_app", *args],
            env=self.env,
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a SIGKILL of its group takes its children too
        )

    def start_worker(self) -> None:
        consumer = self.scenario.startswith("consumer-")
        pool = {"kill-prefork": "prefork", "kill-threads": "threads"}.get(self.scenario, "solo")
        pool = "prefork" if consumer else pool
        concurrency = "1" if pool == "solo" else "2"
        self.workers.append(
            self._spawn("worker", "-P", pool, "-c", concurrency, "-l", "WARNING",
                        "-n", f"w{len(self.workers)}@%h", "--without-gossip", "--without-mingle",
                        *(["--redqueue-consumer"] if consumer else []))
        )  # fmt: skip

    def kill_worker(self) -> None:
        worker = self.workers.pop(0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()

    def stop_all(self) -> None:
        for process in [*self.workers, self.beat]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if self.proxy is not None:
            self.proxy.close()
        self.redis.stop()
        self.broker.stop()

    # Producing

    def produce(self, stop: threading.Event) -> None:
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("TORTURE_")})
        sys.path.insert(0, str(ROOT / "bench"))
        import torture_app

        def by_name(call_id: str) -> None:
            torture_app.app.send_task("torture_app.by_name", args=[call_id])

        def with_result(call_id: str) -> None:
            self.result_ids[call_id] = torture_app.results.delay(call_id).id

        tasks = {
            "pool": torture_app.pool_alo.delay,
            "pool_amo": torture_app.pool_amo.delay,
            "bucket": torture_app.bucket.delay,
            "stream": torture_app.stream_publish,
            "by_name": by_name,
            "metered": torture_app.metered.delay,
            "gather": torture_app.gather.delay,
            "results": with_result,
        }
        pause = self.produce_for / max(self.calls, 1)
        for n in range(self.calls):
            for kind, call in tasks.items():
                call_id = f"{kind}-{n}"
                try:
                    call(call_id)
                except Exception as exc:
                    self.errors[type(exc).__name__] += 1
                    self.maybe[kind].append(call_id)
                else:
                    self.acked[kind].append(call_id)
            if n % 25 == 0:  # a metered key paused for a moment (an upstream's 429)
                with contextlib.suppress(Exception):
                    torture_app.metered.bucket.pause(str(n % 10), 0.3)
            time.sleep(pause)
            if stop.is_set():
                break

    # Faults

    def fault(self, producing: threading.Thread) -> None:
        s = self.scenario
        rng = random.Random(1)
        if "kill-" in s and s != "client-kill":
            while producing.is_alive():
                time.sleep(rng.uniform(1.0, 2.5))
                self.kill_worker()
                self.start_worker()
        elif s.startswith("restart-") or s == "consumer-restart":
            time.sleep(self.produce_for / 2)
            self.redis.restart(kill=True)
        elif s == "redis-down":
            time.sleep(self.produce_for / 3)
            self.redis.stop(cleanup=False)
            time.sleep(5.0)
            requested, self.redis.requested_port = self.redis.requested_port, self.redis.port
            self.redis.start()
            self.redis.requested_port = requested
        elif s == "client-kill":
            killer = redis.Redis.from_url(self.redis.url, socket_timeout=2)
            while producing.is_alive():
                with contextlib.suppress(redis.exceptions.RedisError):
                    killer.client_kill_filter(_type="normal", skipme=True)
                time.sleep(rng.uniform(0.005, 0.05))
            killer.close()
        elif s == "proxy-drops" and self.proxy is not None:
            self.proxy.drop(b"EVALSHA", rate=0.03)
            producing.join()
            self.proxy.stop_dropping()
        elif s == "broker-down":
            time.sleep(self.produce_for / 3)
            self.broker.stop(cleanup=False)
            time.sleep(min(5.0, self.produce_for / 3))
            requested, self.broker.requested_port = self.broker.requested_port, self.broker.port
            self.broker.start()
            self.broker.requested_port = requested
        producing.join()
        self.fault_end = time.monotonic()

    # History

    def history(self) -> dict[str, collections.Counter[str]]:
        runs: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in KINDS}
        for path in self.dir.glob("history-*.log"):
            for line in path.read_text().splitlines():
                kind, _, call_id = line.partition(" ")
                if kind in runs and call_id:
                    runs[kind][call_id] += 1
        return runs

    def unanswered(self) -> int:
        """Acknowledged calls with per-call results whose result is not stored (yet)."""
        import torture_app
        from celery.result import AsyncResult

        try:
            return sum(
                1
                for call_id in self.acked["results"]
                if not AsyncResult(self.result_ids[call_id], app=torture_app.app).ready()
            )
        except Exception:  # the backend unreachable: nobody is answered
            return len(self.acked["results"])

    def wait_for_recovery(self) -> dict[str, float | None]:
        recovered: dict[str, float | None] = {k: None for k in KINDS}
        deadline = self.fault_end + self.recover_for
        while time.monotonic() < deadline:
            runs = self.history()
            for kind in AT_LEAST_ONCE:
                if recovered[kind] is None and all(c in runs[kind] for c in self.acked[kind]):
                    recovered[kind] = max(0.0, time.monotonic() - self.fault_end)
            if recovered["results"] is None and not self.unanswered():
                recovered["results"] = max(0.0, time.monotonic() - self.fault_end)
            if all(recovered[k] is not None for k in (*AT_LEAST_ONCE, "results")):
                break
            time.sleep(0.25)
        time.sleep(2.0)  # late duplicates and at-most-once calls still draining
        return recovered

    def identities(self) -> dict[str, str]:
        from celery_redqueue import CappedPool, LeakyBucket

        client = redis.Redis.from_url(self.redis.url)
        out = {}
        try:
            pools = (
                ("pool", "torture_app.pool_alo"),
                ("pool_amo", "torture_app.pool_amo"),
                ("by_name", "torture_app.by_name"),
                ("gather", "torture_app.gather"),
                ("results", "torture_app.results"),
            )
            for kind, name in pools:
                st = CappedPool(client, name, 100_000, prefix=self.prefix).stats()
                terminal = st.processed + st.failed + st.evicted + st.lost + st.dead + st.purged
                ok = st.offered == st.accepted + st.rejected and st.accepted == (
                    terminal + st.depth + st.in_flight
                )
                out[kind] = "holds" if ok else f"BROKEN {st}"
            for kind in ("bucket", "metered"):
                b = LeakyBucket(client, f"torture_app.{kind}", prefix=self.prefix).stats()
                terminal = b.processed + b.evicted + b.purged + b.dead
                ok = b.enqueued == terminal + b.depth + b.in_flight
                out[kind] = "holds" if ok else f"BROKEN {b}"
        finally:
            client.close()
        return out

    def run(self) -> list[Outcome]:
        try:
            self.start_worker()
            if "kill-" in self.scenario and self.scenario != "client-kill":
                self.start_worker()  # two workers: one is always up while the other restarts
            self.beat = self._spawn("beat", "-l", "WARNING", "-s", str(self.dir / "beat"))
            time.sleep(3.0)  # the workers start (their start-up is not the fault)
            stop = threading.Event()
            producing = threading.Thread(target=self.produce, args=(stop,), daemon=True)
            producing.start()
            self.fault(producing)
            recovered = self.wait_for_recovery()
            unanswered = self.unanswered()
            identities = self.identities()
        finally:
            self.stop_all()
        return self.check(self.history(), recovered, identities, unanswered)

    def check(
        self,
        runs: dict[str, collections.Counter[str]],
        recovered: dict[str, float | None],
        identities: dict[str, str],
        unanswered: int,
    ) -> list[Outcome]:
        forgetful = self.scenario == "restart-no-aof"  # Redis itself lost the stored calls
        outcomes = []
        for kind in KINDS:
            o = Outcome(self.scenario, kind, len(self.acked[kind]), len(self.maybe[kind]))
            ran = runs[kind]
            o.never_run = sum(1 for c in self.acked[kind] if c not in ran)
            o.duplicates = sum(n - 1 for n in ran.values() if n > 1)
            known = set(self.acked[kind]) | set(self.maybe[kind])
            o.unknown = sum(1 for c in ran if c not in known)
            o.recover = recovered.get(kind)
            o.identity = identities.get(kind, "-")
            if not o.acked:  # the producer failed: nothing was tested
                o.violations.append("no call acknowledged")
            if kind in AT_LEAST_ONCE and o.never_run and not forgetful:
                o.violations.append(f"{o.never_run} acknowledged calls never ran")
            if kind == "results":
                o.unanswered = unanswered
                if unanswered and not forgetful:
                    o.violations.append(f"{unanswered} waiters never answered")
            if kind in AT_MOST_ONCE and o.duplicates:
                o.violations.append(f"{o.duplicates} at-most-once calls ran twice")
            if o.unknown:
                o.violations.append(f"{o.unknown} runs of calls never made")
            if o.identity.startswith("BROKEN") and not forgetful:
                o.violations.append("identity broken")
            outcomes.append(o)
        return outcomes


def print_table(outcomes: list[Outcome], errors: dict[str, collections.Counter[str]]) -> None:
    header = ("scenario", "kind", "acked", "raised", "never run", "duplicates", "unanswered",
              "recovered in", "identity", "verdict")  # fmt: skip
    rows = []
    for o in outcomes:
        verdict = "; ".join(o.violations) or (
            "ok (Redis lost its data)" if o.scenario == "restart-no-aof" and o.never_run else "ok"
        )
        rows.append((
            o.scenario, o.kind, str(o.acked), str(o.maybe), str(o.never_run), str(o.duplicates),
            str(o.unanswered) if o.kind == "results" else "-",
            "-" if o.recover is None else f"{o.recover:.1f} s",
            o.identity if len(o.identity) < 12 else "BROKEN", verdict,
        ))  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    for scenario, counter in errors.items():
        if counter:
            raised = ", ".join(f"{n} {name}" for name, n in counter.most_common())
            print(f"- {scenario}: delay()/publish raised {raised} (counted as raised: may run)")
    print("- never run: acknowledged calls with no run in the history (at-least-once: must be 0);")
    print("  duplicates: runs beyond the first (at least once allows them; at most once: 0);")
    print("  unanswered: per-call results never stored (a waiter would wait forever: must be 0);")
    print("  recovered in: from the fault's end until every acknowledged call had run.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, short")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--calls", type=int, help="calls per task (default 400, quick 60)")
    parser.add_argument("--seconds", type=float, help="producing time (default 12, quick 6)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one scenario, results to a file
    args = parser.parse_args(argv)
    scenarios = args.scenario or (QUICK if args.quick else SCENARIOS)
    calls = args.calls or (60 if args.quick else 400)
    seconds = args.seconds or (6.0 if args.quick else 12.0)
    outcomes: list[Outcome] = []
    errors: dict[str, collections.Counter[str]] = {}
    if args.child:
        run = Run(scenarios[0], calls, seconds, recover_for=60.0)
        done = run.run()
        Path(args.child).write_text(
            json.dumps({"outcomes": [dataclasses.asdict(o) for o in done], "errors": run.errors})
        )
        return 0
    for scenario in scenarios:
        # Each scenario in a process of its own: the producer's app is configured at import.
        print(f"running {scenario} ...", file=sys.stderr, flush=True)
        out = Path(tempfile.mkdtemp(prefix="torture-")) / "result.json"
        command = [sys.executable, __file__, "--scenario", scenario, "--calls", str(calls),
                   "--seconds", str(seconds), "--child", str(out)]  # fmt: skip
        subprocess.run(command, check=True, timeout=seconds + 180)
        result = json.loads(out.read_text())
        outcomes += [Outcome(**o) for o in result["outcomes"]]
        errors[scenario] = collections.Counter(result["errors"])
    print_table(outcomes, errors)
    return 1 if any(o.violations for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
