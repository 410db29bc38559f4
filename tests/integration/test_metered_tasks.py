"""Bucket tasks for metered APIs with `celery worker -c 4` (prefork) subprocesses: costs beside
call rates, KeyBackoff, per-key concurrency, pause and resume, a total rate across keys. Bounds
are checked on the server times each call was released at, never on how fast things ran."""

import json
import math
import subprocess
import sys

import pytest

from celery_redqueue import LeakyBucket

APP = "tests.integration.metered_app"


@pytest.fixture
def run(proc_env, spawn_metered, tmp_path):
    """``run(task, action="")``: store the test's calls (or act) through the app's .delay()."""

    def produce(task, action=""):
        subprocess.run(
            [sys.executable, "-m", APP, task, action], env=proc_env, cwd=tmp_path, check=True
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
    """The largest sum of ``weights`` (1 each) over starts within any half-open window."""
    pairs = sorted(zip(times, weights or [1] * len(times), strict=True))
    best = 0
    for i, (t, _) in enumerate(pairs):
        best = max(best, sum(w for s, w in pairs[i:] if s < t + window))
    return best


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
        # Units (as used, refunds included) per aligned one-second window: the budget at most
        # (bucket_cost_rate="30/s", burst 0), exactly; at 10 calls/s of 2..13 units the cost
        # budget is the tighter limit, so windows do fill.
        windows: dict[int, float] = {}
        for start, cost in zip(starts, costs, strict=True):
            windows[math.floor(start)] = windows.get(math.floor(start), 0) + cost
        assert max(windows.values()) <= 30, (tenant, windows)
    assert bucket(redqueue_redis, redqueue_prefix, "metered").stats().dead == 0


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
