"""Bucket tasks for metered APIs with `celery worker -c 4` (prefork) subprocesses: costs beside
call rates, KeyBackoff, per-key concurrency, pause and resume, a total rate across keys. Bounds
are checked on the server times each call was released at, never on how fast things ran."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from celery import Celery

from celery_redqueue import BucketTask, ConfigurationError, LeakyBucket, bucket_task

APP = "tests.integration.metered_app"


@pytest.fixture
def run(proc_env, spawn_metered, tmp_path):
    """``run(task, action="")``: store the test's calls (or act) through the app's .delay()."""

    def produce(task, action="", *extra):
        subprocess.run(
            [sys.executable, "-m", APP, task, action, *extra],
            env=proc_env,
            cwd=tmp_path,
            check=True,
        )

    return produce


@pytest.fixture
def spawn_metered(celery_procs):
    def start():
        return celery_procs(APP, "worker", "--pool=prefork", "--concurrency=4", "-l", "INFO")

    return start


def rows(client, prefix, name):
    return [json.loads(x) for x in client.lrange(f"{prefix}:{name}", 0, -1)]


def bucket(client, prefix, name, **options):
    return LeakyBucket(client, f"{APP}.{name}", prefix=prefix, **options)


def most_in_window(times, window=1.0, weights=None):
    """The largest sum of ``weights`` (1 each) over starts within any half-open sliding window
    (one starting at each time is enough; 1 us of slack for float rounding)."""
    pairs = sorted(zip(times, weights or [1] * len(times), strict=True))
    best = 0
    for i, (t, _) in enumerate(pairs):
        best = max(best, sum(w for s, w in pairs[i:] if s < t + window - 1e-6))
    return best


def worker_ready(spawn, wait_for):
    proc = spawn()
    wait_for(lambda: b" ready." in proc.log_path.read_bytes() or proc.poll() is not None, 60)
    assert proc.poll() is None, proc.log_path.read_text()
    return proc


def test_calls_and_units_per_key_stay_within_both_limits(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    run("metered")
    spawn_metered()
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:metered") == 60, timeout=90)
    done = rows(redqueue_redis, redqueue_prefix, "metered")
    for tenant in ("a", "b"):
        mine = sorted((r for r in done if r["tenant"] == tenant), key=lambda r: r["released"])
        assert sorted(r["i"] for r in mine) == list(range(30))  # all ran, once
        starts, costs = [r["released"] for r in mine], [r["cost"] for r in mine]
        assert most_in_window(starts) <= 10, tenant  # bucket_rate="10/s"
        # A call reserved ahead (due within the drain's linger) is released at its slot and
        # its body starts no sooner (this host's clock is the test Redis server's).
        assert all(r["start"] >= r["released"] - 1e-4 for r in mine), tenant
        # Units (as used, refunds included) in every sliding second: the budget plus at most
        # one call's cost (bucket_cost_rate="30/s", burst 0, GCRA); at 10 calls/s of 2..13
        # units the cost budget is the tighter limit, so the schedule is what paces them.
        assert most_in_window(starts, weights=costs) <= 30 + max(costs), tenant
    assert bucket(redqueue_redis, redqueue_prefix, "metered").stats().dead == 0


def test_units_in_every_sliding_second_stay_within_the_cost_rate(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    # An idle key sent two seconds' worth of 60-token calls 0.6 s into a second of the server's
    # clock, beside a key of mixed 5- and 60-token calls: counted per aligned second, the
    # first second's budget went before its edge and the next right after it (600 tokens).
    worker_ready(spawn_metered, wait_for)
    run("tokens", "edge")
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:tokens") == 34, timeout=90)
    done = rows(redqueue_redis, redqueue_prefix, "tokens")
    for tenant, bound in (("edge", 300), ("mixed", 300 + 60)):
        mine = sorted((r for r in done if r["tenant"] == tenant), key=lambda r: r["released"])
        assert sorted(r["i"] for r in mine) == list(range(len(mine)))  # all ran, once
        released, costs = [r["released"] for r in mine], [r["cost"] for r in mine]
        # Equal costs are exact (one every 200 ms); mixed ones at most one call's cost over.
        assert most_in_window(released, weights=costs) <= bound, (tenant, mine)
        # Each body ran at or after its release (server clock, read in the body).
        assert all(r["body"] >= r["released"] - 1e-4 for r in mine), tenant


def test_key_backoff_holds_its_key_while_another_flows(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    run("backoff")
    spawn_metered()
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:backoff") == 20, timeout=90)
    backed_off = json.loads(redqueue_redis.lindex(f"{redqueue_prefix}:backed-off", 0))
    done = rows(redqueue_redis, redqueue_prefix, "backoff")
    limited = [r for r in done if r["tenant"] == "limited"]
    free = [r for r in done if r["tenant"] == "free"]
    assert sorted(r["i"] for r in limited) == list(range(10))
    # The key released nothing for 2 s; the backed-off call ran first when it resumed, its
    # receive not counted (bucket_max_receives=1: counted, it would be dead now).
    assert min(r["released"] for r in limited) >= backed_off + 2.0 - 0.005
    first = min(limited, key=lambda r: r["released"])
    assert first["i"] == 0 and first["receives"] == 1
    assert any(backed_off < r["released"] < backed_off + 2.0 for r in free)  # others flowed
    # A body's row is written before its call is settled: wait for the last settle.
    backoff = bucket(redqueue_redis, redqueue_prefix, "backoff")
    wait_for(lambda: backoff.stats().processed == 20, timeout=30)
    assert backoff.stats().dead == 0
    assert bucket(redqueue_redis, redqueue_prefix, "backoff").key_stats("limited").backoffs == 1


def test_concurrency_two_never_runs_three_bodies_of_a_key(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    run("concurrent")
    spawn_metered()
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:concurrent") == 10, timeout=90)
    seen = [int(x) for x in redqueue_redis.lrange(f"{redqueue_prefix}:running-seen:a", 0, -1)]
    assert len(seen) == 8 and max(seen) == 2  # reached two, never three


def test_bucket_concurrency_alone_reaches_two_and_never_three(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    # No bucket_drain_concurrency: it follows bucket_concurrency (one drain runs one body).
    run("alone")
    spawn_metered()
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:alone") == 8, timeout=90)
    seen = [int(x) for x in redqueue_redis.lrange(f"{redqueue_prefix}:running-seen:a", 0, -1)]
    assert len(seen) == 8 and max(seen) == 2  # reached two, never three


def test_a_dead_workers_slots_are_freed_when_reaped(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    # Two bodies hang, holding the key's two slots; their worker is SIGKILLed. Once their
    # reservations expire (2 s), the next worker's watchdog reaps them and every call runs,
    # still never three at once.
    redqueue_redis.set(f"{redqueue_prefix}:hang", 1)
    first = worker_ready(spawn_metered, wait_for)
    run("alone")
    seen_key = f"{redqueue_prefix}:running-seen:a"
    wait_for(lambda: redqueue_redis.llen(seen_key) == 2, timeout=60)
    held = bucket(redqueue_redis, redqueue_prefix, "alone")
    assert held.key_stats("a").in_flight == 2
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    redqueue_redis.delete(f"{redqueue_prefix}:hang")
    redqueue_redis.set(f"{redqueue_prefix}:running:a", 0)  # the dead bodies' counts
    worker_ready(spawn_metered, wait_for)
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:alone") == 8, timeout=90)
    seen = [int(x) for x in redqueue_redis.lrange(seen_key, 2, -1)]
    assert len(seen) == 8 and max(seen) <= 2
    done = rows(redqueue_redis, redqueue_prefix, "alone")
    assert sorted(r["i"] for r in done) == list(range(8))
    assert sorted(r["receives"] for r in done if r["i"] < 2) == [2, 2]  # reaped, run again


def test_drain_concurrency_follows_bucket_concurrency_or_is_refused():
    # An app of its own, tasks not shared: no later test's app (or worker) finds them.
    app = Celery("follows", set_as_current=False)
    app.conf.redqueue_url = "redis://127.0.0.1:1/0"  # never reached: declarations only

    @bucket_task(app=app, shared=False, bucket_key="x", bucket_concurrency=3)
    def follows(x):
        pass

    assert follows.bucket_drain_concurrency == 3

    @bucket_task(
        app=app, shared=False, bucket_key="x", bucket_concurrency=2, bucket_drain_concurrency=5
    )
    def more(x):
        pass

    assert more.bucket_drain_concurrency == 5
    with pytest.raises(ConfigurationError, match="set bucket_drain_concurrency to at least 4"):

        @bucket_task(
            app=app, shared=False, bucket_key="x", bucket_concurrency=4, bucket_drain_concurrency=2
        )
        def fewer(x):
            pass

    # A subclass of a class whose value followed its concurrency follows its own.
    class Base(BucketTask):
        bucket_concurrency = 2

    class Wider(Base):
        bucket_concurrency = 6

    assert (Base.bucket_drain_concurrency, Wider.bucket_drain_concurrency) == (2, 6)
    assert BucketTask.bucket_drain_concurrency == 1


def test_a_paused_key_runs_nothing_until_resumed(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    run("pausable", "pause")
    spawn_metered()
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:pausable") == 5, timeout=90)
    held = bucket(redqueue_redis, redqueue_prefix, "pausable")
    wait_for(lambda: held.stats().in_flight == 0 and held.dequeue().empty, timeout=30)
    assert all(r["tenant"] == "open" for r in rows(redqueue_redis, redqueue_prefix, "pausable"))
    assert held.key_stats("held").depth == 5 and held.paused()[0][0] == "held"
    run("pausable", "resume")
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:pausable") == 10, timeout=60)
    assert held.paused() == []


def test_total_rate_holds_across_keys(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    run("total")
    spawn_metered()
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:total") == 45, timeout=90)
    done = sorted(rows(redqueue_redis, redqueue_prefix, "total"), key=lambda r: r["released"])
    assert most_in_window([r["released"] for r in done]) <= 10  # bucket_total_rate="10/s"
    first = [r["tenant"] for r in done[:15]]
    assert sorted(first.count(t) for t in "abc") == [5, 5, 5]  # fair below the total


@pytest.fixture
def upstream():
    """A loopback HTTP server; ``upstream.arrivals`` holds when each request arrived."""
    arrivals = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            arrivals.append(time.time())  # this host's clock, the test Redis server's too
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.arrivals = arrivals
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_with_a_margin_the_upstream_sees_at_most_the_rate(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for, upstream
):
    # bucket_rate="10/s", bucket_margin=0.25; each body waits 0..0.1 s before its request (the
    # path's jitter). Without the margin, releases 100 ms apart each late by its own delay put
    # 11 arrivals in some sliding second; spaced 125 ms apart, any 11 releases span 1.25 s, and
    # delays that differ by less than 0.25 s cannot bring them within one second.
    worker_ready(spawn_metered, wait_for)
    run("margined", "", upstream.url)
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:margined") == 30, timeout=90)
    done = rows(redqueue_redis, redqueue_prefix, "margined")
    assert sorted(r["i"] for r in done) == list(range(30))
    assert len(upstream.arrivals) == 30
    assert most_in_window([r["released"] for r in done], window=1.25) <= 10
    assert most_in_window(upstream.arrivals) <= 10


def test_a_bad_margin_is_refused_at_declaration(redqueue_redis, redqueue_prefix):
    app = Celery("margins", set_as_current=False)
    app.conf.redqueue_url = "redis://127.0.0.1:1/0"  # never reached: declarations only
    for bad in (-0.1, float("inf"), "0.1", True):
        with pytest.raises(ConfigurationError, match="bucket_margin must be seconds"):

            @bucket_task(app=app, shared=False, bucket_key="x", bucket_margin=bad)
            def margined(x):
                pass

        with pytest.raises(ConfigurationError, match="margin must be seconds"):
            bucket(redqueue_redis, redqueue_prefix, "m", margin=bad)
    # Every rate of the bucket is spaced over its period plus the margin.
    spaced = bucket(
        redqueue_redis, redqueue_prefix, "m", default_rate="10/s", margin=0.1, total_rate="100/m"
    )
    assert spaced.default_interval_ms == pytest.approx(110.0)
    assert spaced.limits.total_interval_ms == pytest.approx(600.0 * 60.1 / 60)
    spaced.set_rate("k", "4/s")
    assert spaced.key_stats("k").interval == pytest.approx(0.275)
    assert spaced.settings()["default_rate"] == pytest.approx(10.0)


#: As many as metered_app's ADJUSTABLE_CALLS (that module needs a worker's environment).
ADJUSTABLE_CALLS = 60


def test_set_concurrency_at_runtime_reaches_the_new_limit_and_never_more(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    # bucket_concurrency=2; raised to 3 while they run. Each body holds its slot until its
    # phase's limit (2, then 3) has been reached once: a logical wait, so a slow machine delays
    # the bodies but cannot keep them from overlapping as far as the bucket allows.
    worker_ready(spawn_metered, wait_for)
    run("adjustable")
    seen, done = f"{redqueue_prefix}:running-seen:a", f"{redqueue_prefix}:adjustable"
    wait_for(lambda: redqueue_redis.llen(done) >= 4, timeout=60)
    redqueue_redis.set(f"{redqueue_prefix}:expect:a", 3)  # bodies from now on wait for 3
    before = redqueue_redis.llen(seen)  # bodies that started before the change
    run("adjustable", "concurrency=3")
    after = redqueue_redis.llen(seen)  # the change is in: bodies from here may run 3 at once
    assert after <= ADJUSTABLE_CALLS - 12, "too few calls left to see the new limit"
    wait_for(lambda: redqueue_redis.llen(done) == ADJUSTABLE_CALLS, timeout=120)
    running = [int(x) for x in redqueue_redis.lrange(seen, 0, -1)]
    assert max(running[:before]) == 2  # the bucket's own limit, reached
    assert max(running[after:]) == 3  # the new one, reached
    assert max(running) <= 3  # and never more
    assert sorted(r["i"] for r in rows(redqueue_redis, redqueue_prefix, "adjustable")) == list(
        range(ADJUSTABLE_CALLS)
    )


def test_weights_one_two_three_share_a_total_rate(
    redqueue_redis, redqueue_prefix, run, spawn_metered, wait_for
):
    # bucket_total_rate="20/s" over keys a, b, c of weights 1, 2, 3, 40 calls each.
    worker_ready(spawn_metered, wait_for)
    run("weighted", "weights")
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:weighted") == 120, timeout=90)
    done = sorted(rows(redqueue_redis, redqueue_prefix, "weighted"), key=lambda r: r["released"])
    assert most_in_window([r["released"] for r in done]) <= 20
    # While all three are busy (c's 40 calls last 80 releases at its share): 60 releases.
    first = [r["tenant"] for r in done[:60]]
    for tenant, weight in (("a", 1), ("b", 2), ("c", 3)):
        assert abs(first.count(tenant) / 60 - weight / 6) <= 0.05, (tenant, first)
