"""`./run-demo django` and `./run-demo flask` (what they run after installing): each project on
an embedded Redis with a real worker and beat, driven through its test client."""

import pytest

from .conftest import ROOT


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
def test_run_demo_project(run_demo, project, expected):
    result = run_demo("projects", project)
    assert result.returncode == 0, result.stdout + result.stderr
    for line in expected:
        assert line in result.stdout, result.stdout
    script = (ROOT / "run-demo").read_text()
    assert "example_project.projects" in script and project in script
