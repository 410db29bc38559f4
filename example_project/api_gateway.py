"""The API-gateway demo: tenants calling a metered upstream (requests and tokens per second),
through one bucket task, across worker processes.

A local fake upstream (HTTP on 127.0.0.1) meters each tenant's requests and tokens over a sliding
one-second window and answers 429 with ``Retry-After`` past either limit; "gamma"'s quota is
spent elsewhere for the first two seconds (429, Retry-After: 2). The task meters each tenant at
the upstream's limits (``bucket_rate``, ``bucket_cost_rate`` from ``set_rate``/``set_cost_rate``;
the cost rate less one call's largest cost, the GCRA schedule's bound), with ``bucket_margin``
spacing releases so that the varying delay from release to arrival keeps the upstream within its
limits; it reports the tokens the upstream says were used, and backs the tenant off on a 429.
The demo prints per tenant the peak requests and tokens the upstream counted in any sliding
second against its limits, the 429s, and the utilisation.

Run it with ``./run-demo api-gateway``.
"""

import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from celery import Celery

from celery_redqueue import KeyBackoff, bucket_task, retry_after

ROOT = Path(__file__).resolve().parent.parent
#: Per tenant: upstream limits (requests/s, tokens/s), calls, and the range of their costs.
TENANTS = {
    "alpha": {"rps": 10, "tps": 400, "calls": 40, "cost": (20, 60)},
    "beta": {"rps": 5, "tps": 100, "calls": 30, "cost": (10, 30)},
    "gamma": {"rps": 20, "tps": 600, "calls": 40, "cost": (10, 40)},
}
MARGIN = 0.15  # seconds by which release-to-arrival delays may differ (bucket_margin)
EXHAUSTED_UNTIL = 2.0  # gamma's quota is spent elsewhere for this long after its first call

app = Celery("api_gateway")
app.conf.update(
    broker_url=os.environ.get("REDQUEUE_DEMO_URL", "redis://localhost:6379/0"),
    redqueue_url=os.environ.get("REDQUEUE_DEMO_URL", "redis://localhost:6379/0"),
    redqueue_key_prefix="demo-gateway",
    broker_transport_options={"global_keyprefix": "demo-gateway:broker:"},
    worker_hijack_root_logger=False,
)


@bucket_task(
    app=app,
    name="api_gateway.call_upstream",  # the same when this module runs as __main__
    bind=True,
    bucket_key="tenant",
    bucket_rate="5/s",
    bucket_cost="tokens",
    bucket_cost_rate="100/s",
    bucket_concurrency=2,
    bucket_drain_concurrency=6,
    bucket_margin=MARGIN,
    bucket_max_receives=3,
)
def call_upstream(self, tenant, i, tokens):
    """One request for ``tokens`` tokens; the upstream answers what it really used."""
    body = json.dumps({"tenant": tenant, "i": i, "tokens": tokens}).encode()
    request = urllib.request.Request(os.environ["DEMO_UPSTREAM"], data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            used = json.loads(response.read())["used"]
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            raise retry_after(exc.headers.get("Retry-After"), default=1) from None
        raise
    self.report_cost(used)


class Upstream(ThreadingHTTPServer):
    """Meters each tenant over a sliding one-second window; logs every request."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.started = None  # gamma's first request
        self.lock = threading.Lock()
        self.log = []  # (time, tenant, used tokens, status)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1/complete"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        server = self.server
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tenant, limits = call["tenant"], TENANTS[call["tenant"]]
        used = max(1, int(call["tokens"] * random.uniform(0.6, 1.0)))  # less than estimated
        with server.lock:
            now = time.monotonic()
            recent = [e for e in server.log if e[1] == tenant and e[3] == 200 and e[0] > now - 1]
            over = (
                len(recent) + 1 > limits["rps"] or sum(e[2] for e in recent) + used > limits["tps"]
            )
            if tenant == "gamma" and server.started is None:
                server.started = now
            exhausted = tenant == "gamma" and now - server.started < EXHAUSTED_UNTIL
            status = 429 if over or exhausted else 200
            server.log.append((now, tenant, used if status == 200 else 0, status))
        if status == 429:
            wait = EXHAUSTED_UNTIL - (now - server.started) if exhausted else 1
            self.send_response(429)
            self.send_header("Retry-After", str(max(1, round(wait))))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps({"used": used}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def peak(times, weights=None):
    """The largest sum of ``weights`` over arrivals within any one-second window."""
    pairs = sorted(zip(times, weights or [1] * len(times), strict=True))
    return max(
        (sum(w for s, w in pairs[i:] if s < t + 1.0) for i, (t, _) in enumerate(pairs)), default=0
    )


def report(upstream):
    print("\n         upstream limits     peak in any 1 s      429s            utilisation")
    print("tenant   req/s  tokens/s    req/s  tokens/s    all  after 1st  calls  (tighter limit)")
    ok = True
    for tenant, limits in TENANTS.items():
        mine = [e for e in upstream.log if e[1] == tenant]
        good = [e for e in mine if e[3] == 200]
        refused = [e for e in mine if e[3] == 429]
        first = refused[0][0] if refused else None
        after = [e for e in refused if first is not None and e[0] > first + 0.5]
        times, used = [e[0] for e in good], [e[2] for e in good]
        span = times[-1] - times[0] if len(times) > 1 else 0
        rps = (len(times) - 1) / span if span else 0
        tps = sum(used[:-1]) / span if span else 0
        use = max(rps / limits["rps"], tps / limits["tps"])
        within = peak(times) <= limits["rps"] and peak(times, used) <= limits["tps"]
        ok = ok and len(good) == limits["calls"] and not after and within
        print(
            f"{tenant:7} {limits['rps']:6} {limits['tps']:9}    {peak(times):5} "
            f"{peak(times, used):9}    {len(refused):3}  {len(after):9}  {len(good):5}  {use:6.0%}"
        )
    print(
        f"(the bucket meters each tenant at the upstream's request limit and its token limit "
        f"less one call's largest cost, spaced for a margin of {MARGIN:g} s)"
    )
    return ok


def main(log):
    from celery_redqueue.embedded import EmbeddedRedis
    from example_project.demo import celery, stop, watch_command

    upstream = Upstream()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as tmp:
        log.announce()
        watch_command({"REDQUEUE_DEMO_URL": server.url}, app="example_project.api_gateway")
        os.environ.update(REDQUEUE_DEMO_URL=server.url, DEMO_UPSTREAM=upstream.url)
        app.conf.update(broker_url=server.url, redqueue_url=server.url)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        for tenant, limits in TENANTS.items():
            call_upstream.bucket.set_rate(tenant, limits["rps"])
            call_upstream.bucket.set_cost_rate(tenant, limits["tps"] - limits["cost"][1])
        random.seed(7)
        for i in range(max(t["calls"] for t in TENANTS.values())):
            for tenant, limits in TENANTS.items():
                if i < limits["calls"]:
                    call_upstream.delay(tenant, i, random.randint(*limits["cost"]))
        worker = celery(
            "worker", "--pool=prefork", "--concurrency=4", "--loglevel=WARNING",
            env=env, cwd=tmp, log=log, app="example_project.api_gateway",
        )  # fmt: skip
        try:
            total = sum(t["calls"] for t in TENANTS.values())
            print(f"{total} calls for {len(TENANTS)} tenants through a metered upstream ...")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and call_upstream.bucket.stats().processed < total:
                time.sleep(0.3)
            ok = report(upstream)
            stats = call_upstream.bucket.stats()
            print(
                f"\nbucket: processed {stats.processed}, backoffs {stats.backoffs}, dead "
                f"{stats.dead}"
            )
            print(
                "done: every call ran, no tenant's upstream saw more than its limits in any "
                "sliding second, no 429 after a tenant's first backoff."
                if ok
                else "FAILED: see the table (calls missing, a peak above a limit, or 429s)"
            )
            return 0 if ok else 1
        finally:
            stop(worker)
            upstream.shutdown()


def run():
    """main(), stopped cleanly (worker, Redis, temporary files) by Ctrl-C or SIGTERM; the
    worker's log is named at the start and quoted when the demo fails."""
    from example_project.demo import stoppable

    return stoppable("api-gateway", main)


if __name__ == "__main__":
    sys.exit(run())

__all__ = ["KeyBackoff", "app", "call_upstream"]
