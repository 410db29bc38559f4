"""`./run-demo api-gateway` (what it runs after installing): tenants against a metered fake
upstream on loopback, with a real prefork worker; every call runs and no tenant gets a 429
after its first backoff."""

import pytest

from .conftest import ROOT


@pytest.mark.timeout(300)
def test_api_gateway_demo(run_demo):
    result = run_demo("api_gateway")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no 429 after a tenant's first backoff" in result.stdout, result.stdout
    gamma = next(line for line in result.stdout.splitlines() if line.startswith("gamma"))
    assert int(gamma.split()[5]) >= 1 and int(gamma.split()[6]) == 0  # 429s, then none
    assert "api-gateway" in (ROOT / "run-demo").read_text()
