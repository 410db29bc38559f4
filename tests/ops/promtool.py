"""Prometheus's own checker, ``promtool`` (Debian's ``prometheus`` package; ``.ci/run``
installs it), for linting the exported metrics and unit-testing the alert rules."""

import shutil
import subprocess

import pytest


def promtool(*args, stdin=None):
    """Run ``promtool ARGS`` (skipping the test, saying why, where it is not installed)."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("no promtool on this machine (apt-get install prometheus, as .ci/run does)")
    return subprocess.run(
        [path, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
