"""The crawler demo: per-domain rates against local HTTP servers, across worker processes.

Three "domains" (local HTTP servers on their own ports) serve pages that link to each other.
Each domain gets its own rate; a prefork worker crawls from one seed URL per domain, and the
servers log when each request arrived, so the demo can show the rates were held.

Run it with ``./run-demo crawler``.
"""

import os
import sys
import tempfile
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
            hits.append(time.monotonic())
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
            print("\n                       most in any 1 s window")
            print("domain  rate    pages  released  arrived at the server")
            ok = True
            for name, site in sites.items():
                key = f"demo:crawler:released:{site.base.split('//')[1]}"
                released = [float(t) for t in client.lrange(key, 0, -1)]
                most = max_per_second(released)
                ok = ok and most <= float(RATES[name].split("/")[0])
                print(
                    f"{name:6}  {RATES[name]:6}  {len(hits[name]):5}  {most:8}  "
                    f"{max_per_second(hits[name])}"
                )
            print(
                "(the bucket guarantees release times; arrivals add each request's own jitter, "
                "such as a worker process's first connection)"
            )
            stats = crawl.bucket.stats()
            print(f"\nbucket: {stats.as_dict()}")
            ok = ok and all(len(h) == PAGES_PER_DOMAIN for h in hits.values())
            print(
                "done: every page fetched once, no domain above its rate." if ok else "incomplete"
            )
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
