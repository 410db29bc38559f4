"""A killed test run leaves nothing running: SIGTERM to pytest (a CI timeout, ``kill``) stops the
session's Redis server and the `celery worker` subprocesses its tests started, and so does
SIGKILL on Linux (they die with their parent); under pytest-xdist, killing the controller ends
its workers and theirs."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("signum", "parallel"),
    [(signal.SIGTERM, "-p no:xdist"), (signal.SIGKILL, "-p no:xdist"), (signal.SIGTERM, "-n 1")],
    ids=["sigterm", "sigkill", "sigterm-xdist"],
)
def test_a_killed_run_leaves_no_server_or_worker_behind(signum, parallel, tmp_path, wait_for):
    pids_file = tmp_path / "pids.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("REDQUEUE_TEST_REDIS_URL", None)  # the run starts a server of its own
    env.update(KILLED_RUN_PIDS=str(pids_file), PYTHONPATH=str(ROOT))
    log = (tmp_path / "pytest.log").open("wb")
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel.split(),
         "tests/project/killed_run_checks.py"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the signal goes to pytest alone
    )  # fmt: skip
    try:
        wait_for(lambda: pids_file.exists() or run.poll() is not None, timeout=180)
        assert pids_file.exists(), (tmp_path / "pytest.log").read_text()[-3000:]
        pids = json.loads(pids_file.read_text())
        assert all(alive(pid) for group in pids.values() for pid in group), pids
        assert len(pids["celery worker"]) == 2, pids  # the worker and its prefork child
        os.kill(run.pid, signum)
        run.wait(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
            alive(pid) for group in pids.values() for pid in group
        ):
            time.sleep(0.1)
        left = {name: [p for p in group if alive(p)] for name, group in pids.items()}
        assert not any(left.values()), f"still running: {left}"
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        log.close()
