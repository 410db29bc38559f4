"""A test run to be killed, run by test_killed_run.py in a process of its own: it starts the
session's Redis server and a `celery worker` (prefork, one child), writes their pids to the file
``KILLED_RUN_PIDS`` names, then waits to be killed."""

import json
import os
import time
from pathlib import Path

import pytest


def children(pid):
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.timeout(0)
def test_wait_to_be_killed(redqueue_redis, celery_procs, wait_for):
    worker = celery_procs(
        "tests.integration.proc_app", "worker", "--pool=prefork", "--concurrency=1", "-l", "INFO"
    )
    wait_for(lambda: b"ready" in worker.log_path.read_bytes(), timeout=120, message="the worker")
    pids = {
        "redis-server": [redqueue_redis.info("server")["process_id"]],
        "celery worker": [worker.pid, *children(worker.pid)],
        "pytest": [os.getpid()],
    }
    path = Path(os.environ["KILLED_RUN_PIDS"])
    path.with_suffix(".tmp").write_text(json.dumps(pids))
    path.with_suffix(".tmp").rename(path)
    time.sleep(600)
