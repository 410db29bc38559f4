"""Smoke test of an installed wheel, run from outside the checkout: a pooled call stored by a
producer is drained by a real `celery worker` process, on an embedded Redis server.

Usage: python smoke.py (in a virtualenv holding the wheel with its [embedded] extra).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

import celery_redqueue
from celery_redqueue import CappedPool
from celery_redqueue.embedded import EmbeddedRedis

APP = """
import os
import redis
from celery import Celery
from celery_redqueue import pool_task

app = Celery("smoke", broker=os.environ["SMOKE_URL"])
app.conf.redqueue_key_prefix = "smoke"

@pool_task(app=app, pool_size=1000, pool_coalesce=True)
def hit(page, count=1):
    redis.Redis.from_url(os.environ["SMOKE_URL"]).hincrby("smoke:seen", page, count)
"""


def main() -> int:
    package = Path(celery_redqueue.__file__).resolve()
    here = Path(__file__).resolve().parent
    assert "site-packages" in package.parts, f"not the installed wheel: {package}"
    assert list((package.parent / "lua").glob("*.lua")), "the wheel has no Lua scripts"
    assert (package.parent / "ops" / "static" / "index.html").exists(), "no dashboard page"
    with EmbeddedRedis() as server, tempfile.TemporaryDirectory() as work:
        Path(work, "smoke_app.py").write_text(APP)
        env = {**os.environ, "SMOKE_URL": server.url, "PYTHONPATH": work}
        sys.path.insert(0, work)
        os.environ["SMOKE_URL"] = server.url
        from smoke_app import hit

        receipts = [hit.delay("home") for _ in range(20)] + [hit.delay("about")]
        assert all(r.kept for r in receipts), receipts
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "smoke_app", "--quiet", "worker", "-P", "solo",
             "--without-mingle", "--without-gossip", "-l", "warning"],
            cwd=work, env=env,
        )  # fmt: skip
        try:
            client = redis.Redis.from_url(server.url)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                seen = {k.decode(): int(v) for k, v in client.hgetall("smoke:seen").items()}
                if seen == {"home": 20, "about": 1}:
                    break
                time.sleep(0.1)
            else:
                print(f"smoke: the worker did not drain the pool: {seen}", file=sys.stderr)
                return 1
        finally:
            worker.terminate()
            worker.wait(30)
        stats = hit.pool.stats()
        assert stats.offered == 21 and stats.processed == 21, stats  # in two coalesced entries
        assert isinstance(hit.pool, CappedPool)
    print(f"smoke: {package.parent} from {here}: 21 calls, drained by a worker as {seen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
