"""`./run-demo django` and `./run-demo flask` (what they run after installing): each project on
an embedded Redis with a real worker and beat, driven through its test client."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ("django", ["views written by the worker: {'teapot': 200, 'mug': 100}",
                    "redqueue: drain shop.tasks.record_view"]),
        ("flask", ["hits counted by the worker, inside Flask's app context:",
                   "'processed': 100"]),
    ],
)  # fmt: skip
def test_run_demo_project(project, expected):
    result = subprocess.run(
        [sys.executable, "-m", "example_project.projects", project],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in expected:
        assert line in result.stdout, result.stdout
    script = (ROOT / "run-demo").read_text()
    assert "example_project.projects" in script and project in script
