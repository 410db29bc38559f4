"""Lost replies on debounce (issue 33): the connection drops after Redis ran pool_debounce (or
pool_due, which offers the held call) and before its reply arrived. A real TCP proxy
(ReplyDroppingProxy) loses the reply and the package sends the script again. The re-sent call
finds its call id's record and replies what the first run did: a burst's merged count stays
exact (no call counted twice), the latest arguments still win, the body runs once per burst and
no call is lost."""

import time

import pytest

from celery_redqueue import CappedPool, PoolTask
from celery_redqueue.redis.lua import script


def sha(name):
    return script(name).sha.encode()


@pytest.fixture(autouse=True)
def scripts_loaded(redqueue_redis):
    """The scripts are on the server before a reply is lost (a lost NOSCRIPT reply tells
    nothing: that script did not run)."""
    for name in ("pool_debounce", "pool_due", "pool_pop", "pool_pop_mixed", "pool_ack"):
        redqueue_redis.script_load(script(name).source)


def drain(pool, calls, until=30.0):
    """Pop and ack until ``calls`` calls came out (debounced calls are due one window after
    their last call): {payload: count}."""
    got = {}
    end = time.monotonic() + until
    while sum(got.values()) < calls and time.monotonic() < end:
        batch = pool.pop(100)
        if not batch:
            time.sleep(0.02)
            continue
        for item in batch.items:
            assert item.payload not in got, f"{item.payload!r} delivered twice"
            got[item.payload] = item.count
        assert pool.ack(batch)
    return got


def test_lost_debounce_replies_count_each_call_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix, assert_identities
):
    options = {"prefix": redqueue_prefix, "debounce": 0.5}
    direct = CappedPool(redqueue_redis, "d", 100, **options)
    lossy = CappedPool(retrying_client, "d", 100, **options)
    receipts = []
    for n in range(10):
        if n % 2 == 0 or n == 9:  # the first call's reply, every other one, and the last's
            reply_proxy.drop(sha("pool_debounce"))
        receipts.append(lossy.add(f"rev {n}", dedupe_id="doc"))
    assert reply_proxy.dropped == 6
    # A re-sent call replied what its first run did: one new window, then merges.
    assert receipts[0].delayed and all(r.merged for r in receipts[1:])
    held = direct.debounced()
    assert [(row.key, row.calls) for row in held] == [("doc", 10)]
    stats = direct.stats()
    assert (stats.delayed, stats.debounced) == (10, 9)  # re-sends counted nothing
    assert redqueue_redis.zcard(direct.keys("scheduled")) == 1
    got = drain(direct, 10)
    assert got == {"rev 9": 10}  # the latest arguments, standing for all ten calls
    stats = direct.stats()
    assert (stats.offered, stats.accepted, stats.processed, stats.delayed, stats.depth) == (
        10,
        10,
        10,
        0,
        0,
    )
    assert_identities(stats)


def test_a_lost_due_reply_offers_a_debounced_call_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix, assert_identities
):
    """pool_due offers the held call with its count and forgets its dedupe id's record: sent
    again after a lost reply, it offers nothing more, and the next call starts a new window."""
    options = {"prefix": redqueue_prefix, "debounce": 0.2}
    direct = CappedPool(redqueue_redis, "u", 100, **options)
    lossy = CappedPool(retrying_client, "u", 100, **options)
    for n in range(5):
        direct.add(n, dedupe_id="k")
    direct.add("other", dedupe_id="j")
    time.sleep(0.3)  # both held calls fall due (a wait, not a timed assert)
    reply_proxy.drop(sha("pool_due"))
    batch = lossy.pop(100)
    assert reply_proxy.dropped == 1
    assert sorted((repr(i.payload), i.count) for i in batch.items) == [("'other'", 1), ("4", 5)]
    assert lossy.ack(batch)
    stats = direct.stats()
    assert (stats.offered, stats.processed, stats.delayed, stats.debounced) == (6, 6, 0, 4)
    assert direct.debounced() == []
    assert direct.add(9, dedupe_id="k").delayed  # a new window, not a merge into the old one
    assert_identities(direct.stats())


@pytest.fixture
def lossy_app(app, reply_proxy):
    """The test's app with its redqueue structures behind the proxy (the broker is direct)."""
    app.conf.redqueue_url = reply_proxy.url
    return app


def test_bursts_through_lost_replies_run_once_each_with_the_last_arguments(
    lossy_app, worker, reply_proxy, wait_for, assert_identities
):
    """Three keys, a burst of calls each, interleaved; every third call's reply is lost (the
    producer's pool_debounce is re-sent). Each key's body runs once, after its burst, with its
    last arguments and the exact count of its calls; nothing is lost or doubled."""
    runs = []

    @lossy_app.task(
        base=PoolTask,
        pool_size=100,
        pool_debounce=1.0,
        pool_dedupe_key=lambda doc, rev: doc,
    )
    def reindex(doc, rev, count=1):
        runs.append((doc, rev, count))

    bursts = {"a": 7, "b": 12, "c": 5}
    calls = [
        (doc, rev) for rev in range(max(bursts.values())) for doc in bursts if rev < bursts[doc]
    ]
    lost = 0
    with worker(lossy_app):
        for n, (doc, rev) in enumerate(calls):
            if n % 3 == 0 or rev == bursts[doc] - 1:  # every third reply, and each key's last
                reply_proxy.drop(sha("pool_debounce"))
                lost += 1
            reindex.delay(doc, rev)
        assert reply_proxy.dropped == lost
        reply_proxy.stop_dropping()
        total = sum(bursts.values())
        wait_for(lambda: reindex.pool.stats().processed == total, timeout=60, message="bursts")
        time.sleep(1.5)  # a window more: a second run of any key would show (not an assert)
    assert sorted(runs) == [(doc, n - 1, n) for doc, n in sorted(bursts.items())]
    stats = reindex.pool.stats()
    assert (stats.offered, stats.processed, stats.debounced) == (total, total, total - 3)
    assert (stats.delayed, stats.depth, stats.in_flight, stats.lost) == (0, 0, 0, 0)
    assert_identities(stats)
