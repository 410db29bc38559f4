"""example_project/django_shop: run django_shop_checks.py in a process of its own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_django_shop(redqueue_server_url, redqueue_prefix, tmp_path):
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="proj.settings",
        PYTHONPATH=os.pathsep.join([str(ROOT / "example_project" / "django_shop"), str(ROOT)]),
        SHOP_DB=str(tmp_path / "shop.sqlite3"),
        SHOP_REDIS_URL=redqueue_server_url,
        SHOP_REDQUEUE_PREFIX=redqueue_prefix,
        SHOP_LOG_DIR=str(tmp_path),
        REDQUEUE_TEST_REDIS_URL=redqueue_server_url,
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/project/django_shop_checks.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )  # fmt: skip
    logs = "".join(
        f"\n--- {log.name} ---\n" + log.read_text(errors="replace")[-3000:]
        for log in sorted(tmp_path.glob("*.log"))
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:] + logs
    assert "7 passed" in result.stdout, result.stdout[-3000:]
