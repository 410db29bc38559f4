"""Lost replies on the unique-lock scripts THROUGH the Celery glue (`celery_redqueue.unique`):
the app's redqueue client goes through a ReplyDroppingProxy that loses the reply after Redis
ran the script, and the package sends it again. Whichever script's reply is lost (the call
site's acquire, the worker's takeover or running acquire, the release, a hand-back), no lock is
leaked, no duplicate is let in, and every body runs once."""

import logging

import pytest

from celery_redqueue import UniqueLockedError, unique
from celery_redqueue.redis.lua import script


def sha(name):
    return script(name).sha.encode()


@pytest.fixture
def lossy_app(app, reply_proxy, redqueue_redis):
    """The test's app with its redqueue structures behind the proxy (the broker is direct)."""
    for name in ("unique_acquire", "unique_renew", "unique_release"):
        redqueue_redis.script_load(script(name).source)  # a lost reply, not a NOSCRIPT
    app.conf.redqueue_url = reply_proxy.url
    return app


def _task(app, mode, ran):
    @unique(key=["job"], mode=mode, ttl=10)
    @app.task(name=f"lossy_{mode}", bind=True)
    def lossy(self, job):
        ran.append((self.request.id, self.request.retries))
        if job == "retry" and self.request.retries == 0:
            raise self.retry(countdown=0)

    return lossy


@pytest.mark.parametrize(
    ("mode", "where"),
    [
        ("until_done", "call_site"),
        ("queued", "call_site"),
        ("until_done", "worker"),  # the takeover of the call site's lock
        ("queued", "worker"),  # the release of the call site's lock as the body starts
        ("running", "worker"),
    ],
)
def test_a_lost_acquire_reply_neither_leaks_nor_doubles(
    lossy_app, worker, reply_proxy, redqueue_redis, wait_for, mode, where
):
    ran = []
    task = _task(lossy_app, mode, ran)
    locks = task.unique_locks()
    if where == "call_site":
        reply_proxy.drop(sha("unique_acquire"))
    first = task.delay("k").id
    if mode != "running":
        # The re-sent acquire returned the lock the first send took: a duplicate is refused.
        with pytest.raises(UniqueLockedError) as refused:
            task.delay("k")
        assert refused.value.holder == first
    if where == "worker":
        reply_proxy.drop(sha("unique_acquire") if mode != "queued" else sha("unique_release"))
    with worker(lossy_app):
        wait_for(lambda: len(ran) == 1 and not locks.held(), timeout=60, message="the body")
    assert reply_proxy.dropped == 1
    assert ran == [(first, 0)]
    stats = locks.stats()
    calls_taken = {"until_done": 2, "queued": 1, "running": 1}[mode]
    assert (stats.acquired, stats.released, stats.held) == (calls_taken, 1, 0)
    assert stats.refused == (0 if mode == "running" else 1)
    assert stats.lost == stats.expired == 0


@pytest.mark.parametrize("mode", ["until_done", "running"])
def test_a_lost_release_reply_frees_the_key_once(
    lossy_app, worker, reply_proxy, redqueue_redis, wait_for, caplog, mode
):
    caplog.set_level(logging.WARNING, "celery_redqueue.tasks.unique")
    ran = []
    task = _task(lossy_app, mode, ran)
    locks = task.unique_locks()
    first = task.delay("k").id
    reply_proxy.drop(sha("unique_release"))
    with worker(lossy_app):
        wait_for(lambda: len(ran) == 1 and not locks.held(), timeout=60, message="the body")
        assert reply_proxy.dropped == 1
        # The key is free: the next call runs (and its lock is not released by a late re-send).
        second = task.delay("k").id
        wait_for(lambda: len(ran) == 2 and not locks.held(), timeout=60, message="the next")
    assert ran == [(first, 0), (second, 0)]
    stats = locks.stats()
    assert (stats.released, stats.held, stats.lost, stats.expired, stats.refused) == (2, 0, 0, 0, 0)
    # The re-send was answered "already released", not taken for a lock lost to another.
    assert "lost before release" not in caplog.text


def test_a_lost_hand_back_reply_keeps_the_key_for_the_retry(
    lossy_app, worker, reply_proxy, redqueue_redis, wait_for, caplog
):
    """until_done: the retry's hand-back is a release; losing its reply neither frees the key
    for another call nor keeps it from the retry."""
    caplog.set_level(logging.WARNING, "celery_redqueue.tasks.unique")
    ran = []
    task = _task(lossy_app, "until_done", ran)
    locks = task.unique_locks()
    first = task.delay("retry").id
    reply_proxy.drop(sha("unique_release"))
    with worker(lossy_app):
        wait_for(lambda: len(ran) == 2 and not locks.held(), timeout=60, message="the retry")
    assert reply_proxy.dropped == 1
    assert ran == [(first, 0), (first, 1)]
    stats = locks.stats()
    assert (stats.handed_back, stats.released, stats.held) == (1, 1, 0)
    # Call site, first run's takeover, the retry's takeover: no refusal of its own lock.
    assert (stats.acquired, stats.refused, stats.lost, stats.expired) == (3, 0, 0, 0)
    assert "lost before release" not in caplog.text
