"""`celery -A app redqueue ...` as a user runs it, against the test's Redis and prefix."""

import subprocess
import sys

from celery_redqueue import CappedPool, LeakyBucket

from .conftest import ROOT


def redqueue(env, *args, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.integration.proc_app", "redqueue", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_list_dead_requeue_purge(proc_env, redqueue_redis, redqueue_prefix):
    pool = CappedPool(
        redqueue_redis,
        "tests.integration.proc_app.durable",
        1000,
        policy="newest",
        prefix=redqueue_prefix,
        delivery="at_least_once",
        max_receives=1,
    )
    pool.add_many([[[i], {}] for i in range(3)])
    batch = pool.pop(10)
    pool.ack(batch, failures={0: "ValueError: bad 0", 1: "ValueError: bad 1"})
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix)
    bucket.enqueue("example.com", {"url": "/"})

    listing = redqueue(proc_env, "list").stdout
    assert "pool:tests.integration.proc_app.durable" in listing
    assert "bucket:crawl" in listing

    letters = redqueue(proc_env, "dead", "pool:tests.integration.proc_app.durable").stdout
    assert "ValueError: bad 0" in letters and "ValueError: bad 1" in letters

    requeued = redqueue(proc_env, "requeue", "tests.integration.proc_app.durable", "--limit", "1")
    assert "requeued 1; drain job sent" in requeued.stdout
    assert pool.stats().dead == 1 and pool.stats().depth == 1
    assert redqueue_redis.llen(f"{redqueue_prefix}:broker:celery") == 1  # the drain job

    purged = redqueue(proc_env, "purge", "pool:tests.integration.proc_app.durable", "--yes")
    assert "purged 1" in purged.stdout
    assert pool.stats().purged == 1

    missing = redqueue(proc_env, "dead", "nope", check=False)
    assert missing.returncode != 0 and "no pool or bucket or stream named 'nope'" in missing.stderr
