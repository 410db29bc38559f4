"""`./run-demo api-gateway` (what it runs after installing): tenants against a metered fake
upstream on loopback, with a real prefork worker; every call runs and no tenant gets a 429
after its first backoff."""

import os
import re

import pytest

from .conftest import ROOT


@pytest.mark.timeout(300)
def test_api_gateway_demo(run_demo):
    result = run_demo("api_gateway")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no 429 after a tenant's first backoff" in result.stdout, result.stdout
    gamma = next(line for line in result.stdout.splitlines() if line.startswith("gamma"))
    assert int(gamma.split()[5]) >= 1 and int(gamma.split()[6]) == 0  # 429s, then none
    # What the upstream counted over sliding seconds stays within its limits (bucket_margin).
    for tenant in ("alpha", "beta", "gamma"):
        row = next(line for line in result.stdout.splitlines() if line.startswith(tenant))
        rps, tps, peak_rps, peak_tps = (int(x) for x in row.split()[1:5])
        assert peak_rps <= rps and peak_tps <= tps, row
    assert "api-gateway" in (ROOT / "run-demo").read_text()
    # The command that watches it reads the demo's own Redis, not whatever listens on 6379.
    assert re.search(
        r"REDQUEUE_DEMO_URL=redis://\S+ \S+ -A example_project.api_gateway redqueue top",
        result.stdout,
    )
    # The worker's log was named (not thrown away), and removed with the rest after a success.
    log = re.search(r"worker and beat log to (\S+)", result.stdout).group(1)
    assert not os.path.exists(log)
