"""The crawler demo: per-domain rates against local HTTP servers, across worker processes.

Three "domains" (local HTTP servers on their own ports) serve pages that link to each other.
Each domain gets its own rate; a prefork worker crawls from one seed URL per domain. Each
fetch records when the bucket released it (the Redis server's clock) and each server when the
request arrived, so the demo shows both sides: the most releases in any sliding second (what the
bucket paces) and the most arrivals in any sliding second (what the server saw, which adds each
request's own delay between its release and its arrival). The task has ``bucket_margin=0.1``:
releases are spaced so that delays differing by up to 0.1 s still keep every server within its
domain's rate.

Run it with ``./run-demo crawler``.
"""

import os
import sys
import tempfile
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from celery_redqueue.embedded import EmbeddedRedis
from example_project.demo import celery, stop, stoppable, watch_command

ROOT = Path(__file__).resolve().parent.parent
PAGES_PER_DOMAIN = 30
RATES = {"a": "10/s", "b": "5/s", "c": "2/s"}


def start_site(name, hits):
    """A site of PAGES_PER_DOMAIN pages; each links to two pages here and one on the next site."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            # Wall clock: the same machine's as the embedded Redis server's, which times releases.
            hits.append((time.time(), f"{self.server.base}{self.path}"))
            page = int(self.path.strip("/") or 0)
            links = [
                f"/{(page * 2 + 1) % PAGES_PER_DOMAIN}",
                f"/{(page * 2 + 2) % PAGES_PER_DOMAIN}",
            ]
            body = "".join(f'<a href="{self.server.base}{link}">{link}</a>' for link in links)
            body += "".join(f'<a href="{base}/{page}">other</a>' for base in self.server.others)
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.base = f"http://127.0.0.1:{server.server_address[1]}"
    server.others = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def max_per_second(times):
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def report(client, sites, hits):
    """Print releases and arrivals per domain; return (every domain's releases within its
    rate, the domains whose server saw more than the rate in some sliding second)."""
    print("\n                most in any sliding 1 s    release -> arrival delay")
    print("domain  rate    pages  released  arrived       median       max")
    paced, over = True, []
    for name, site in sites.items():
        rate = float(RATES[name].split("/")[0])
        key = f"demo:crawler:released:{site.base.split('//')[1]}"
        entries = (entry.decode().split(" ", 1) for entry in client.lrange(key, 0, -1))
        released = {url: float(at) for at, url in entries}
        arrived = {url: at for at, url in hits[name]}
        delays = sorted(arrived[url] - released[url] for url in arrived if url in released)
        most_released = max_per_second(released.values())
        most_arrived = max_per_second(arrived.values())
        paced = paced and most_released <= rate
        if most_arrived > rate:
            over.append((name, RATES[name], most_arrived, delays[-1] - delays[0]))
        median = delays[len(delays) // 2] * 1000 if delays else 0.0
        print(
            f"{name:6}  {RATES[name]:6}  {len(hits[name]):5}  {most_released:8}  "
            f"{most_arrived:7}  {median:8.1f} ms  {(delays[-1] if delays else 0) * 1000:6.1f} ms"
        )
    return paced, over


def verdict(fetched_once, paced, over):
    """What the figures above show, and only that."""
    lines = ["done: every page fetched once." if fetched_once else "incomplete: pages missing."]
    lines.append(
        "release side: the bucket released no domain's pages faster than its rate in any "
        "sliding second."
        if paced
        else "release side: RELEASES ABOVE A DOMAIN'S RATE (see the table)."
    )
    margin = crawl_margin() * 1000
    if not over:
        lines.append(
            "arrival side: no server saw more requests in any sliding second than its rate "
            f"(bucket_margin={margin / 1000:g}: releases are spaced so that delays differing by "
            f"up to {margin:.0f} ms cannot bring rate + 1 within one second)."
        )
    else:
        named = ", ".join(f"{n}: {got} at {rate}" for n, rate, got, _ in over)
        spread = max(s for *_, s in over) * 1000
        lines.append(
            f"arrival side: A SERVER SAW MORE REQUESTS IN ONE SLIDING SECOND THAN ITS RATE "
            f"({named}). Release-to-arrival delays varied by up to {spread:.0f} ms, "
            + (
                f"more than the task's bucket_margin ({margin:.0f} ms): raise it to cover them."
                if spread > margin
                else f"within the task's bucket_margin ({margin:.0f} ms): a defect."
            )
        )
    return "\n".join(textwrap.fill(line, 100, subsequent_indent="  ") for line in lines)


def crawl_margin():
    from example_project.celery_app import crawl

    return crawl.bucket_margin


def main(log):
    hits = {name: [] for name in RATES}
    sites = {name: start_site(name, hits[name]) for name in RATES}
    for name, site in sites.items():
        site.others = [s.base for n, s in sites.items() if n != name][:1]
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as tmp:
        print(f"embedded Redis at {server.url}")
        log.announce()
        watch_command({"REDQUEUE_DEMO_URL": server.url})
        os.environ["REDQUEUE_DEMO_URL"] = server.url
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        from celery_redqueue.tasks.config import get_config
        from example_project.celery_app import app, crawl

        for name, site in sites.items():
            crawl.bucket.set_rate(site.base.split("//")[1], RATES[name])
        procs = [
            celery(
                "worker",
                "--pool=prefork",
                "--concurrency=3",
                "-l",
                "info",
                env=env,
                cwd=tmp,
                log=log,
            ),
            celery("beat", "--max-interval=1", "-s", f"{tmp}/beat", env=env, cwd=tmp, log=log),
        ]
        try:
            for site in sites.values():
                get_config(app).client().sadd("demo:crawler:seen", f"{site.base}/0")
                crawl.delay(f"{site.base}/0")
            print(f"crawling 3 domains of {PAGES_PER_DOMAIN} pages at {RATES} with 3 processes")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                s = crawl.bucket.stats()
                if s.enqueued and s.depth == 0 and s.in_flight == 0 and s.processed == s.enqueued:
                    break
                time.sleep(0.5)
            client = get_config(app).client()
            fetched_once = all(len(h) == PAGES_PER_DOMAIN for h in hits.values())
            paced, over = report(client, sites, hits)
            stats = crawl.bucket.stats()
            print(f"\nbucket: {stats.as_dict()}")
            print(verdict(fetched_once, paced, over))
            ok = fetched_once and paced and not over
            return 0 if ok else 1
        finally:
            for proc in procs:
                stop(proc)
            for site in sites.values():
                site.shutdown()


def run():
    """main(), stopped cleanly (worker, beat, Redis, temporary files) by Ctrl-C or SIGTERM."""
    return stoppable("crawler", main)


if __name__ == "__main__":
    sys.exit(run())
