"""Weighted fairness under slot contention (issue 32): three busy keys of weights 1, 2, 3, a
per-key rate far above what the worker can run, and fewer drain slots than busy keys. No total
rate: what the keys contend for is the worker. Each key's share of the releases while all three
are busy follows its weight (within 5 %, absolute, of 1/6, 2/6, 3/6). Shares are counted on the
order of the releases (the server times they were released at), never on how fast they came."""

import json
import subprocess
import sys

from celery_redqueue import BucketTask

from .conftest import running_worker

WEIGHTS = {"a": 1, "b": 2, "c": 3}
#: Calls per key, stored before the worker starts.
CALLS = 150
#: Releases counted: c (half of them) has 2 * CALLS calls' worth, so all three are busy.
COUNTED = 240


def assert_shares(released):
    """``released``: (release time, key) of every call. Shares of the first COUNTED."""
    order = [key for _, key in sorted(released)]
    first = order[:COUNTED]
    got = {key: first.count(key) / COUNTED for key in WEIGHTS}
    for key, weight in WEIGHTS.items():
        assert abs(got[key] - weight / 6) <= 0.05, (key, got, "".join(order[:60]))


def test_weights_share_one_drain_slot(app, wait_for):
    """An in-process (solo) worker: one slot."""
    released = []

    @app.task(
        base=BucketTask,
        bind=True,
        bucket_key="tenant",
        bucket_rate="10000/s",
        bucket_drain_concurrency=1,
    )
    def weighted(self, tenant, i):
        released.append((self.reservation.released_at, tenant))

    for key, weight in WEIGHTS.items():
        if weight > 1:
            weighted.bucket.set_weight(key, weight)
    for i in range(CALLS):
        for key in WEIGHTS:
            weighted.delay(key, i)
    with running_worker(app):
        wait_for(lambda: len(released) == 3 * CALLS, timeout=120, message="every call")
    assert sorted(key for _, key in released) == sorted(list(WEIGHTS) * CALLS)
    assert_shares(released)


def test_weights_share_two_slots_of_a_prefork_worker(
    redqueue_redis, redqueue_prefix, proc_env, celery_procs, tmp_path, wait_for
):
    """`celery worker -c 2` and bucket_drain_concurrency=2: two slots for three busy keys."""
    app = "tests.integration.weighted_app"
    produce = [sys.executable, "-m", app, json.dumps(WEIGHTS), str(CALLS)]
    subprocess.run(produce, env=proc_env, cwd=tmp_path, check=True)
    proc = celery_procs(app, "worker", "--pool=prefork", "--concurrency=2", "-l", "INFO")
    records = f"{redqueue_prefix}:weighted"
    wait_for(
        lambda: redqueue_redis.llen(records) == 3 * CALLS or proc.poll() is not None,
        timeout=120,
        message="every call",
    )
    assert proc.poll() is None, proc.log_path.read_text()[-4000:]
    rows = [json.loads(x) for x in redqueue_redis.lrange(records, 0, -1)]
    assert sorted(r["tenant"] for r in rows) == sorted(list(WEIGHTS) * CALLS)
    assert_shares([(r["released"], r["tenant"]) for r in rows])
