"""The crash-safety suite's short version (bench/torture.py --quick): a SIGKILL loop of solo
workers, a CLIENT KILL storm and a reply-dropping proxy, against real `celery worker` and
`celery beat` processes and real Redis servers. Fails on any violation: an acknowledged call of
an at-least-once pool, bucket or stream that never ran, an at-most-once call run twice, a run
of a call never made, a broken identity."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_the_quick_torture_run_finds_no_violation():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "torture.py"), "--quick", "--calls", "40"],
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 24  # 3 scenarios x 8 kinds
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        kind, acked, never_run = cells[1], int(cells[2]), int(cells[4])
        assert acked > 0, row
        if kind not in ("pool_amo", "results"):
            assert never_run == 0, row
