"""The quick-start demo: embedded Redis, a real worker and beat, a burst at a small pool.

Run it with ``./run-demo`` (or ``python -m example_project.demo`` inside the virtualenv).
"""

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery_redqueue.testing.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parent.parent
BURST = 20_000


def celery(*args, env, cwd):
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "example_project.celery_app", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main():
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as tmp:
        print(f"embedded Redis at {server.url} ({server.binary})")
        os.environ["REDQUEUE_DEMO_URL"] = server.url
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        from example_project.celery_app import app, count_error, record_page_view

        procs = [
            celery("worker", "--pool=prefork", "--concurrency=2", env=env, cwd=tmp),
            celery("beat", "--max-interval=1", "-s", f"{tmp}/beat", env=env, cwd=tmp),
        ]
        try:
            print(f"firing {BURST:,} page views at a pool of {record_page_view.pool_size}...")
            started = time.perf_counter()
            receipts = [record_page_view.delay(f"/p/{i % 50}", user=i) for i in range(BURST)]
            for _ in range(5_000):
                count_error.delay(random.choice(["KeyError@cart", "Timeout@pay", "404@img"]))
            elapsed = time.perf_counter() - started
            drains = sum(r.drain_needed for r in receipts)
            kept = sum(r.kept for r in receipts)
            print(
                f"  {BURST + 5_000:,} calls in {elapsed:.2f}s; kept {kept:,} "
                f"page views at the door; {drains} drain job(s) sent to the broker"
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
                s = task.pool.stats()
                balanced = (
                    s.accepted
                    == s.processed
                    + s.failed
                    + s.evicted
                    + s.lost
                    + s.dead
                    + s.purged
                    + s.depth
                    + s.in_flight
                )
                print(
                    f"\n{task.name}\n  offered {s.offered:,}  accepted {s.accepted:,}  "
                    f"rejected {s.rejected:,}  evicted {s.evicted:,}\n"
                    f"  processed {s.processed:,}  failed {s.failed}  waiting {s.depth}  "
                    f"in flight {s.in_flight}  lost {s.lost}  dead {s.dead}\n"
                    f"  offered == accepted + rejected: {s.offered == s.accepted + s.rejected}; "
                    f"accepted == processed + failed + evicted + lost + dead + purged + waiting "
                    f"+ in flight: "
                    f"{balanced}"
                )
            if not settled():
                print("the pools did not drain within two minutes", file=sys.stderr)
                return 1
            print("\ndone: nothing piled up, everything dropped was counted.")
            return 0
        finally:
            for proc in procs:
                stop(proc)


if __name__ == "__main__":
    sys.exit(main())
