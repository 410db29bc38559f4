"""`celery -A app redqueue ...` operator commands, run as a user runs them."""

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from celery_redqueue import CappedPool, LeakyBucket, LeasedResources
from tests.integration.conftest import ROOT

RECORD = "tests.integration.proc_app.record"
COMMAND = [sys.executable, "-m", "celery", "-A", "tests.integration.proc_app", "redqueue"]


def redqueue(env, *args, check=True):
    result = subprocess.run(
        [*COMMAND, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def make_pool(client, prefix, **options):
    return CappedPool(client, RECORD, 1000, prefix=prefix, **options)


def test_stats_prints_every_counter_and_checks_identities(
    proc_env, redqueue_redis, redqueue_prefix
):
    pool = make_pool(redqueue_redis, redqueue_prefix, delivery="at_least_once", max_receives=1)
    pool.add_many(range(10))
    pool.ack(pool.pop(4), failures={0: "boom"})
    out = redqueue(proc_env, "stats", RECORD).stdout
    assert f"pool:{RECORD}" in out
    assert re.search(r"offered\s+10\b", out) and re.search(r"processed\s+3\b", out)
    assert re.search(r"dead\s+1\b", out) and re.search(r"depth\s+6\b", out)
    assert out.count(": ok") == 2 and "MISMATCH" not in out
    data = json.loads(redqueue(proc_env, "stats", RECORD, "--json").stdout)
    assert data["identities_hold"] and data["counters"]["accepted"] == 10

    # Counters that do not add up are reported, with a failing exit status.
    redqueue_redis.hincrby(pool.keys("stats"), "accepted", 1)
    broken = redqueue(proc_env, "stats", RECORD, check=False)
    assert broken.returncode == 1 and "MISMATCH (11 != 10)" in broken.stdout

    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix)
    bucket.enqueue_many([("a", 1), ("b", 2)])
    bucket.commit(bucket.dequeue().reservation)
    out = redqueue(proc_env, "stats", "bucket:crawl").stdout
    assert re.search(r"enqueued\s+2\b", out) and ": ok" in out


def test_drain_sends_a_job_only_for_the_apps_tasks(proc_env, redqueue_redis, redqueue_prefix):
    make_pool(redqueue_redis, redqueue_prefix).add([[1], {}])
    broker = f"{redqueue_prefix}:broker:celery"
    before = redqueue_redis.llen(broker)
    out = redqueue(proc_env, "drain", RECORD).stdout
    assert "drain job sent" in out
    assert redqueue_redis.llen(broker) == before + 1
    message = json.loads(redqueue_redis.lindex(broker, 0))
    assert message["headers"]["task"] == RECORD and message["headers"]["redqueue_drain"] == 1

    LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix).enqueue("a", 1)
    refused = redqueue(proc_env, "drain", "crawl", check=False)
    assert refused.returncode == 1 and "no task of this app is named 'crawl'" in refused.stderr
    assert redqueue_redis.llen(broker) == before + 1


def test_keys_and_set_rate(proc_env, redqueue_redis, redqueue_prefix):
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix, default_rate="2/s")
    bucket.enqueue_many([(f"site{i}.example", n) for i in range(8) for n in range(i + 1)])
    out = redqueue(proc_env, "keys", "crawl", "--top", "3").stdout
    listed = re.findall(r"^(site\d\.example)\s+(\d+)", out, re.MULTILINE)
    assert listed == [("site7.example", "8"), ("site6.example", "7"), ("site5.example", "6")]

    out = redqueue(proc_env, "set-rate", "crawl", "site7.example", "10/s", "--burst", "4").stdout
    assert "rate of 'site7.example' set to 10/s (burst 4)" in out
    stats = bucket.key_stats("site7.example")
    assert stats.interval == 0.1 and stats.burst == 4
    rows = json.loads(redqueue(proc_env, "keys", "crawl", "--search", "site7", "--json").stdout)
    assert [(r["key"], r["rate"], r["custom_rate"]) for r in rows] == [
        ("site7.example", 10.0, True)
    ]

    bad = redqueue(proc_env, "set-rate", "crawl", "x", "soon", check=False)
    assert bad.returncode == 1 and "rate" in bad.stderr
    not_bucket = redqueue(proc_env, "keys", RECORD, check=False)
    assert not_bucket.returncode == 1 and "no bucket named" in not_bucket.stderr


def test_leases_lists_each_resource(proc_env, redqueue_redis, redqueue_prefix):
    resources = LeasedResources(redqueue_redis, "creds", ["a", "b", "c"], prefix=redqueue_prefix)
    lease = resources.acquire(ttl=60)
    out = redqueue(proc_env, "leases", "creds").stdout
    assert "2 free, 1 held, 0 expired of 3" in out
    assert re.search(rf"{lease.resource}\s+1 held expires in \d+\.\ds", out)
    assert len(re.findall(r"\bfree$", out, re.MULTILINE)) == 2


def test_metrics_command_prints_the_text_format(proc_env, redqueue_redis, redqueue_prefix):
    make_pool(redqueue_redis, redqueue_prefix).add_many(range(5))
    text = redqueue(proc_env, "metrics").stdout
    depth = {
        s.labels["name"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "redqueue_depth"
    }
    assert depth == {RECORD: 5}


def test_top_redraws_in_place(proc_env, redqueue_redis, redqueue_prefix):
    pool = make_pool(redqueue_redis, redqueue_prefix)
    pool.add_many(range(12))
    out = redqueue(proc_env, "top", "--iterations", "2", "--interval", "0.2").stdout
    frames = out.split("\x1b[H")[1:]
    assert len(frames) == 2 and all(frame.rstrip().endswith("\x1b[J") for frame in frames)
    assert re.search(rf"pool:{re.escape(RECORD)}\s+12\b", frames[1])


@contextlib.contextmanager
def ctrl_c_reaches_children():
    """Start the processes a test stops with Ctrl-C (SIGINT) inside this.

    A suite run as a background job of a non-interactive shell (``./run-tests >log 2>&1 &``, a
    CI runner's) inherits SIGINT *ignored*, and an ignored signal stays ignored across exec:
    Python then installs no KeyboardInterrupt handler, so ``top`` or ``dashboard`` never saw
    the Ctrl-C and the test waited out its timeout (only when launched that way, hence
    "intermittent"). A *handled* signal is reset to its default on exec, so handling SIGINT
    here while the child starts gives it the default a terminal's foreground job has."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def read_until(fd, pattern, timeout=60.0):
    seen = b""
    deadline = time.monotonic() + timeout
    while not re.search(pattern, seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {pattern!r}; got {seen[-500:]!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return seen


def test_top_in_a_terminal_refreshes_and_leaves_on_ctrl_c(
    proc_env, redqueue_redis, redqueue_prefix
):
    pool = make_pool(redqueue_redis, redqueue_prefix)
    pool.add_many(range(3))
    controller, terminal = pty.openpty()
    with ctrl_c_reaches_children():
        proc = subprocess.Popen(
            [*COMMAND, "top", "--interval", "0.3"],
            env=proc_env,
            cwd=ROOT,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
        )
    os.close(terminal)
    try:
        read_until(controller, rb"pool:\S+\s+3\b")
        pool.add_many(range(4))  # the next frames show the new depth, in place
        read_until(controller, rb"\x1b\[H[^\x1b]*pool:\S+\s+7\b")
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(controller)


def test_dashboard_command_serves_on_loopback(proc_env, redqueue_redis, redqueue_prefix):
    make_pool(redqueue_redis, redqueue_prefix).add(1)
    env = dict(proc_env, REDQUEUE_DASHBOARD_TOKEN="from-the-environment")
    with ctrl_c_reaches_children():
        proc = subprocess.Popen(
            [*COMMAND, "dashboard", "--port", "0"],
            env=env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    try:
        lines = []
        match = None
        while match is None and len(lines) < 50:  # Celery may warn first
            lines.append(proc.stderr.readline())
            match = re.search(
                r"on (http://127\.0\.0\.1:\d+/) \(actions need the token\)", lines[-1]
            )
            assert lines[-1], "".join(lines)
        assert match, "".join(lines)
        with urllib.request.urlopen(match.group(1) + "api/overview", timeout=30) as response:
            overview = json.load(response)
        assert [v["id"] for v in overview["structures"]] == [f"pool:{RECORD}"]
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C stops it cleanly
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stderr.close()


def test_list_lines_up_the_figures_of_long_names(proc_env, redqueue_redis, redqueue_prefix):
    long_name = "proj.reporting.tasks.record_a_page_view_with_a_very_long_name"
    CappedPool(redqueue_redis, long_name, 10, prefix=redqueue_prefix).add_many(range(3))
    CappedPool(redqueue_redis, "short", 10, prefix=redqueue_prefix).add(1)
    lines = redqueue(proc_env, "list").stdout.splitlines()
    header = next(line for line in lines if line.startswith("structure"))
    depth_end = header.index("depth") + len("depth")
    rows = {line.split()[0]: line for line in lines if line.startswith("pool:")}
    assert set(rows) == {f"pool:{long_name}", "pool:short"}
    for name, row in rows.items():
        # The depth column ends where its heading ends, whatever the name's length.
        assert row[:depth_end].split()[-1] == ("3" if "long" in name else "1"), row
        assert row[depth_end] == " "


def test_keys_lists_paused_keys_and_per_key_overrides(proc_env, redqueue_redis, redqueue_prefix):
    bucket = LeakyBucket(
        redqueue_redis,
        "metered",
        prefix=redqueue_prefix,
        default_rate="2/s",
        concurrency=3,
        cost_rate="600/m",
    )
    bucket.enqueue_many([("acme", 1), ("globex", 2), ("initech", 3)])
    bucket.set_rate("acme", "10/s", burst=2)
    bucket.set_cost_rate("globex", "60/s")
    out = redqueue(proc_env, "set-concurrency", "metered", "initech", "1").stdout
    assert "concurrency of 'initech' set to 1" in out
    bad = redqueue(proc_env, "set-concurrency", "metered", "initech", "two", check=False)
    assert bad.returncode == 2 and "an integer >= 1 or 'default'" in bad.stderr
    bucket.pause("acme", 600)
    bucket.pause("initech")

    # The busiest keys say which are paused, and until when.
    rows = {r["key"]: r for r in json.loads(redqueue(proc_env, "keys", "metered", "--json").stdout)}
    assert rows["acme"]["paused"] and rows["acme"]["paused_until"] > time.time() + 500
    assert rows["initech"]["paused"] and rows["initech"]["paused_until"] is None
    assert not rows["globex"]["paused"] and rows["globex"]["paused_until"] is None
    out = redqueue(proc_env, "keys", "metered").stdout
    assert re.search(r"^initech\s.*until resumed$", out, re.MULTILINE), out
    assert re.search(r"^acme\s.*until \d\d:\d\d:\d\d$", out, re.MULTILINE), out
    assert re.search(r"^globex\s.*\s-$", out, re.MULTILINE), out

    paused = json.loads(redqueue(proc_env, "keys", "metered", "--paused", "--json").stdout)
    assert paused["paused_count"] == 2
    assert [r["key"] for r in paused["paused"]] == ["acme", "initech"]  # soonest to end first
    out = redqueue(proc_env, "keys", "metered", "--paused").stdout
    assert "2 key(s) paused" in out and re.search(r"initech\s+until resumed", out)

    over = json.loads(redqueue(proc_env, "keys", "metered", "--overrides", "--json").stdout)
    assert over["defaults"] == {
        "rate": 2.0,
        "burst": 0.0,
        "concurrency": 3,
        "cost_rate": 10.0,
        "cost_burst": 0.0,
    }
    assert over["overrides"] == [
        {"key": "acme", "rate": 10.0, "burst": 2.0},
        {"key": "globex", "cost_rate": 60.0, "cost_burst": 0.0},
        {"key": "initech", "concurrency": 1},
    ]
    out = redqueue(proc_env, "keys", "metered", "--overrides").stdout
    assert "every key: rate 2/s, burst 0, concurrency 3 per key, cost 10/s (burst 0)" in out
    assert re.search(r"acme\s+10\s+2\s+-\s+-\s+-", out) and re.search(
        r"globex\s+-\s+-\s+60\s+0", out
    )
    assert re.search(r"initech\s+-\s+-\s+-\s+-\s+1$", out, re.MULTILINE), out
    back = redqueue(proc_env, "set-concurrency", "metered", "initech", "default").stdout
    assert "concurrency of 'initech' set to the bucket's own" in back
    assert bucket.settings()["concurrency"] == 3

    both = redqueue(proc_env, "keys", "metered", "--paused", "--search", "acme", check=False)
    assert both.returncode == 2 and "does not apply to --paused" in both.stderr

    bare = LeakyBucket(redqueue_redis, "bare", prefix=redqueue_prefix)
    bare.enqueue("k", 1)
    out = redqueue(proc_env, "keys", "bare", "--overrides").stdout
    assert "no key has a rate or cost budget of its own" in out
    assert "0 key(s) paused" in redqueue(proc_env, "keys", "bare", "--paused").stdout


def test_a_unique_suffix_of_a_task_name_names_its_structure(
    proc_env, redqueue_redis, redqueue_prefix
):
    make_pool(redqueue_redis, redqueue_prefix).add_many(range(3))
    for suffix in ("record", "proc_app.record", "pool:record"):
        out = redqueue(proc_env, "stats", suffix).stdout
        assert f"pool:{RECORD}" in out and re.search(r"offered\s+3\b", out), (suffix, out)
    # Only whole parts of the name: "cord" is no suffix of "...proc_app.record".
    partial = redqueue(proc_env, "stats", "cord", check=False)
    assert partial.returncode == 1 and "no pool, bucket, stream, lease or unique named 'cord'" in (
        partial.stderr
    )

    # A suffix that fits two structures names them both and picks neither.
    CappedPool(redqueue_redis, "other_app.record", 10, prefix=redqueue_prefix).add(1)
    ambiguous = redqueue(proc_env, "stats", "record", check=False)
    assert ambiguous.returncode == 1, ambiguous.stdout
    assert f"'record' could name any of pool:other_app.record, pool:{RECORD}" in ambiguous.stderr
    assert "offered" not in ambiguous.stdout
    # The full name still works, and so does a suffix that is unique.
    assert "pool:other_app.record" in redqueue(proc_env, "stats", "other_app.record").stdout
    assert f"pool:{RECORD}" in redqueue(proc_env, "stats", "proc_app.record").stdout


def test_a_command_without_an_app_says_which_is_missing(proc_env, tmp_path):
    env = {k: v for k, v in proc_env.items() if k != "CELERY_APP"}
    result = subprocess.run(
        [sys.executable, "-m", "celery", "redqueue", "list"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no Celery app given: run celery -A proj redqueue list" in result.stderr
    assert "Traceback" not in result.stderr
    # CELERY_APP names the app as -A does.
    env["CELERY_APP"] = "tests.integration.proc_app"
    named = subprocess.run(
        [sys.executable, "-m", "celery", "redqueue", "list"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert named.returncode == 0, named.stdout + named.stderr
