"""`./run-demo api-gateway` (what it runs after installing): tenants against a metered fake
upstream on loopback, with a real prefork worker; every call runs and no tenant gets a 429
after its first backoff."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_api_gateway_demo():
    result = subprocess.run(
        [sys.executable, "-m", "example_project.api_gateway"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no 429 after a tenant's first backoff" in result.stdout, result.stdout
    gamma = next(line for line in result.stdout.splitlines() if line.startswith("gamma"))
    assert int(gamma.split()[5]) >= 1 and int(gamma.split()[6]) == 0  # 429s, then none
    assert "api-gateway" in (ROOT / "run-demo").read_text()
