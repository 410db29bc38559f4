"""The demo stops cleanly on SIGINT and SIGTERM: no redis-server, worker or beat left running,
no temporary directory left behind."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]


def processes_with(marker):
    """PIDs of live processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split()[2]
        except (FileNotFoundError, PermissionError, ProcessLookupError, IndexError):
            continue
        if marker.encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def start_demo(*args):
    """``python -m example_project.<args>`` running, its output (stderr too) to read as text."""
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def embedded_redis(url):
    """The demo's embedded Redis at ``url``: its pid and its data directory."""
    client = redis.Redis.from_url(url)
    try:
        return client.info("server")["process_id"], client.config_get("dir")["dir"]
    finally:
        client.close()


def stop_and_check_cleanup(proc, stop_with, url, leftovers, paths):
    """Send ``stop_with`` to the demo; it must exit by that signal saying it stopped
    everything, leaving none of ``leftovers`` (pids) running and none of ``paths``."""
    proc.send_signal(stop_with)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + stop_with, out
    assert "stopped the worker, beat and Redis" in out
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in leftovers):
        time.sleep(0.1)
    assert not [pid for pid in leftovers if alive(pid)], "processes left running"
    assert not processes_with(f"REDQUEUE_DEMO_URL={url}")
    assert not [path for path in paths if os.path.exists(path)]


def kill_leftovers(proc, leftovers):
    """Whatever a failed run left behind: do not leak it."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in leftovers:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to find stray processes")
@pytest.mark.timeout(240)
@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM])
def test_demo_cleans_up_when_stopped_mid_burst(stop_with):
    proc = start_demo("example_project.demo")
    leftovers = []
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        url = re.search(r"redis://\S+", lines[0]).group(0)
        workdir = re.search(r"run in (\S+)", lines[1]).group(1)
        redis_pid, redis_dir = embedded_redis(url)
        leftovers.append(redis_pid)
        while "firing" not in proc.stdout.readline():
            pass
        celery_pids = processes_with(f"REDQUEUE_DEMO_URL={url}")
        assert celery_pids, "the worker and beat should be running by now"
        leftovers.extend(celery_pids)
        time.sleep(0.5)  # mid-burst
        stop_and_check_cleanup(proc, stop_with, url, leftovers, [workdir, redis_dir])
    finally:
        kill_leftovers(proc, leftovers)


@pytest.mark.timeout(300)
def test_demo_output_explains_itself(run_demo):
    result = run_demo("demo", timeout=280)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    # What was fired at which pool, and how many calls in all.
    assert re.search(r"firing 20,000 page views at \S+record_page_view \(a pool of 200\)", out)
    assert "5,000 error reports of 3 kinds at" in out
    assert "25,000 calls stored" in out
    # Why "kept" exceeds the capacity, and the merged calls of the coalescing pool.
    kept = int(re.search(r"page views: ([\d,]+) kept", out).group(1).replace(",", ""))
    assert "kept exceeds the pool's 200 because" in out or kept <= 200
    merged = re.search(r"error reports: ([\d,]+) merged", out)
    assert merged and int(merged.group(1).replace(",", "")) > 0
    assert out.count(": True") == 4 and ": False" not in out  # the accounting balances
    # The command that watches it reads the demo's own Redis, not whatever listens on 6379.
    url = re.search(r"embedded Redis at (redis://\S+)", out).group(1)
    assert f"REDQUEUE_DEMO_URL={url} " in out
    assert "-A example_project.celery_app redqueue top" in out
    # The worker's and beat's log was named, and removed with the rest after a success.
    log = re.search(r"worker and beat log to (\S+)", out).group(1)
    assert not os.path.exists(log)


def test_run_demo_help_lists_the_demos():
    result = subprocess.run(
        [str(ROOT / "run-demo"), "--help"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    for demo in ("dashboard", "crawler", "django", "flask", "orders"):
        assert f"./run-demo {demo}" in result.stdout, result.stdout
    unknown = subprocess.run(
        [str(ROOT / "run-demo"), "no-such-demo"], capture_output=True, text=True, timeout=30
    )
    assert unknown.returncode == 2 and "./run-demo crawler" in unknown.stderr


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to find stray processes")
@pytest.mark.timeout(240)
def test_orders_demo_cleans_up_when_stopped():
    proc = start_demo("example_project.orders")
    leftovers = []
    try:
        url = re.search(r"redis://\S+", proc.stdout.readline()).group(0)
        redis_pid, redis_dir = embedded_redis(url)
        leftovers.append(redis_pid)
        while "published" not in proc.stdout.readline():
            pass
        celery_pids = processes_with(f"REDQUEUE_DEMO_URL={url}")
        assert celery_pids, "the worker and beat should be running by now"
        leftovers.extend(celery_pids)
        stop_and_check_cleanup(proc, signal.SIGTERM, url, leftovers, [redis_dir])
    finally:
        kill_leftovers(proc, leftovers)


@pytest.mark.timeout(300)
def test_demo_dashboard_mode_serves_the_demos_structures():
    """`./run-demo dashboard N`: the dashboard shows the demo's pools live, then stops with it."""
    proc = start_demo("example_project.demo", "dashboard", "15")
    try:
        line = ""
        while "more seconds" not in line:
            line = proc.stdout.readline()
            assert line, "the demo ended before keeping its dashboard up"
        url = re.search(r"http://\S+/", line).group(0)
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and b"<title>redqueue</title>" in page.read()
        with urllib.request.urlopen(url + "metrics", timeout=30) as page:
            metrics = page.read().decode()
        for task in ("record_page_view", "count_error"):
            processed = re.search(
                rf'redqueue_processed_total{{kind="pool",name="example_project.celery_app.{task}"}}'
                r" (\S+)",
                metrics,
            )
            assert processed and float(processed.group(1)) > 0, metrics
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        assert "dashboard stopped" in out
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=5)
    finally:
        kill_leftovers(proc, [])


def test_the_crawler_verdict_says_what_the_server_saw():
    """The crawler's verdict compares what each server saw per sliding second with the rate: a
    domain whose server saw more is named, never reported as "no domain above its rate"."""
    from example_project.crawler import max_per_second, verdict

    # 11 requests 0.1 s apart span exactly one second: a sliding second holds 10 of them ...
    assert max_per_second([i / 10 for i in range(11)]) == 10
    # ... but when the first arrives 5 ms late, one second holds all 11.
    assert max_per_second([0.005] + [i / 10 for i in range(1, 11)]) == 11
    over = " ".join(verdict(True, True, [("a", "10/s", 11, 0.031)]).split())  # unwrapped
    assert "a: 11 at 10/s" in over and "up to 31 ms" in over
    assert "no server saw more" not in over and "no domain above" not in over
    # Within the task's bucket_margin (0.1 s) that is a defect; beyond it, the margin is short.
    assert "within the task's bucket_margin (100 ms): a defect" in over
    short = " ".join(verdict(True, True, [("a", "10/s", 11, 0.15)]).split())
    assert "more than the task's bucket_margin (100 ms): raise it" in short
    assert "bucket_margin=0.1" in verdict(True, True, [])
    assert "arrival side: no server saw more" in verdict(True, True, [])
    assert "RELEASES ABOVE" in verdict(True, False, [])
