"""The quick-start demo: embedded Redis, a real worker and beat, a burst at two small pools.

Run it with ``./run-demo`` (or ``python -m example_project.demo`` inside the virtualenv). Ctrl-C
or SIGTERM at any moment stops the worker, beat and Redis and removes the temporary files.

``./run-demo dashboard [SECONDS]`` also serves ``celery -A example_project.celery_app redqueue
dashboard`` during the burst and keeps it up SECONDS (default 300) afterwards, with a trickle of
calls so the rates move.
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from celery_redqueue.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parent.parent
PAGE_VIEWS = 20_000
ERROR_REPORTS = 5_000
FINGERPRINTS = ["KeyError@cart", "Timeout@pay", "404@img"]


DEMO_APP = "example_project.celery_app"


class CeleryLog:
    """Where a demo's worker and beat write: a file the demo names when it starts (``tail -f``
    it to watch them), removed with the other temporary files when the demo succeeds or is
    stopped, kept and its end quoted when the demo fails (a broken worker shows there, not only
    as "did not drain")."""

    def __init__(self, demo):
        # Its own temporary directory: the demo's working directory goes when the demo ends,
        # and a failed demo's log must outlive it.
        self.dir = Path(tempfile.mkdtemp(prefix=f"redqueue-{demo}-log-"))
        self.path = self.dir / "worker-and-beat.log"
        self.file = self.path.open("ab")

    def announce(self):
        print(f"worker and beat log to {self.path} (kept if the demo fails)", flush=True)

    def close(self, status):
        """Status 0 or None (stopped by a signal): remove the log; else keep and quote it."""
        self.file.close()
        if not status:
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        tail = self.path.read_text(errors="replace").splitlines()[-40:]
        print(
            f"\nthe demo failed; the worker's and beat's log is kept at {self.path}. It ends with:",
            *(f"  | {line}" for line in tail),
            sep="\n",
            file=sys.stderr,
        )


def celery(*args, env, cwd, log, app=DEMO_APP):
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", app, *args],
        env=env,
        cwd=cwd,
        stdout=log.file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def watch_command(settings, app=DEMO_APP, cd=None):
    """Print the command that watches this demo from another terminal. The CLI reads the Redis
    its app is configured with, so it is given the demo's (else it reads whatever listens on
    6379). ``cd``: a directory, relative to the repository root, to run it from."""
    here = ROOT / cd if cd else ROOT
    executable = Path(sys.executable).parent / "celery"
    if executable.is_relative_to(ROOT):
        executable = Path(os.path.relpath(executable, here))
    assignments = " ".join(f"{name}={value}" for name, value in settings.items())
    print(
        "watch it from the repository root in another terminal while it runs (stats, list and"
        f" dashboard work the same way):\n  {f'cd {cd} && ' if cd else ''}{assignments}"
        f" {executable} -A {app} redqueue top",
        flush=True,
    )


def stop(proc):
    """Stop a worker or beat and every process of its group (prefork children too)."""
    # Cleanup has begun: a Ctrl-C or SIGTERM arriving now must not skip the remaining processes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupt(signum, frame):
    # Once: a second Ctrl-C must not cut the cleanup short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def report(task):
    s = task.pool.stats()
    balanced = s.accepted == (
        s.processed + s.failed + s.evicted + s.lost + s.dead + s.purged + s.depth + s.in_flight
    )
    print(
        f"\n{task.name} (pool of {task.pool_size}, policy {task.pool_policy}"
        f"{', coalescing' if task.pool_coalesce else ''})\n"
        f"  offered {s.offered:,} = accepted {s.accepted:,} + rejected {s.rejected:,}: "
        f"{s.offered == s.accepted + s.rejected}\n"
        f"  accepted {s.accepted:,} = processed {s.processed:,} + evicted {s.evicted:,} + failed "
        f"{s.failed} + lost {s.lost} + dead {s.dead} + purged {s.purged} + waiting {s.depth} + "
        f"in flight {s.in_flight}: {balanced}"
    )


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_dashboard(env, cwd, log):
    """`celery -A example_project.celery_app redqueue dashboard` on a free port, once it answers."""
    port = free_port()
    proc = celery("redqueue", "dashboard", "--port", str(port), env=env, cwd=cwd, log=log)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise SystemExit("the dashboard did not start")


def trickle(seconds, url):
    """Keep the dashboard's figures moving: a few calls a second for `seconds`."""
    from example_project.celery_app import count_error, record_page_view

    print(
        f"\ndashboard at {url} (and {url}metrics) for {seconds:g} more seconds, "
        "with a trickle of calls; Ctrl-C stops it all"
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for i in range(20):
            record_page_view.delay(f"/p/{i}", user=i)
        count_error.delay(random.choice(FINGERPRINTS))
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    print("dashboard stopped")


def run(server, tmp, log, dashboard_seconds=None):
    print(f"embedded Redis at {server.url} ({server.binary})")
    print(f"worker and beat run in {tmp}")
    log.announce()
    watch_command({"REDQUEUE_DEMO_URL": server.url})
    os.environ["REDQUEUE_DEMO_URL"] = server.url
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    from example_project.celery_app import app, count_error, record_page_view

    procs = [
        celery(
            "worker", "--pool=prefork", "--concurrency=2", "-l", "info", env=env, cwd=tmp, log=log
        ),
        celery("beat", "--max-interval=1", "-s", f"{tmp}/beat", env=env, cwd=tmp, log=log),
    ]
    try:
        if dashboard_seconds is not None:
            dashboard, url = start_dashboard(env, tmp, log)
            procs.append(dashboard)
            print(f"dashboard at {url}: open it now to watch the burst")
        print(
            f"\nfiring {PAGE_VIEWS:,} page views at {record_page_view.name} (a pool of "
            f"{record_page_view.pool_size}) and {ERROR_REPORTS:,} error reports of "
            f"{len(FINGERPRINTS)} kinds at {count_error.name} (a coalescing pool), while the "
            "worker drains both..."
        )
        started = time.perf_counter()
        views = [record_page_view.delay(f"/p/{i % 50}", user=i) for i in range(PAGE_VIEWS)]
        errors = [count_error.delay(random.choice(FINGERPRINTS)) for _ in range(ERROR_REPORTS)]
        elapsed = time.perf_counter() - started
        kept = sum(r.kept for r in views)
        drains = sum(r.drain_needed for r in views) + sum(r.drain_needed for r in errors)
        merged = Counter(r.merged for r in errors)
        size = record_page_view.pool_size
        print(
            f"  {PAGE_VIEWS + ERROR_REPORTS:,} calls stored in {elapsed:.2f}s; "
            f"{drains} drain job(s) sent to the broker\n"
            f"  page views: {kept:,} kept at the door, {PAGE_VIEWS - kept:,} refused. kept exceeds "
            f"the pool's {size} because\n"
            "  it counts admissions over the whole burst: a sampling pool admits a call whose "
            "random score\n"
            "  beats the worst one it holds (evicting that one), and the worker empties the pool "
            f"meanwhile;\n  the pool never holds more than {size} calls at once.\n"
            f"  error reports: {merged[True]:,} merged into an equal waiting report (its body "
            f"runs once, with a count),\n  {merged[False]:,} stored as new entries"
        )
        broker = app.connection().default_channel.client.llen("celery")
        print(f"  broker queue length right after the burst: {broker}")
        pools = (record_page_view.pool, count_error.pool)

        def settled():
            return all(p.stats().depth == 0 and p.stats().in_flight == 0 for p in pools)

        deadline = time.monotonic() + 120
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.2)
        for task in (record_page_view, count_error):
            report(task)
        if not settled():
            print("the pools did not drain within two minutes", file=sys.stderr)
            return 1
        print("\ndone: nothing piled up, everything dropped was counted.")
        if dashboard_seconds is not None:
            trickle(dashboard_seconds, url)
        return 0
    finally:
        for proc in procs:
            stop(proc)


def main(argv=()):
    dashboard_seconds = None
    if argv and argv[0] == "dashboard":
        dashboard_seconds = float(argv[1]) if len(argv) > 1 else 300.0
    elif argv:
        raise SystemExit("usage: python -m example_project.demo [dashboard [SECONDS]]")
    return stoppable("demo", lambda log: demo(log, dashboard_seconds))


def demo(log, dashboard_seconds):
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory(prefix="redqueue-demo-") as tmp:
        return run(server, tmp, log, dashboard_seconds)


def stoppable(name, body):
    """Run ``body(log)``, stopped cleanly (worker, beat, Redis, temporary files) by Ctrl-C or
    SIGTERM; the worker's and beat's log is quoted and kept when it fails."""
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    log = CeleryLog(name)
    status = 1  # an exception on the way out is a failure too: quote the log
    try:
        status = body(log)
        return status
    except Interrupted as stopped:
        status = None
        print(f"\n{stopped}: stopped the worker, beat and Redis; removed the temporary files")
        return 128 + stopped.signum
    finally:
        log.close(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
