"""Lost replies on the unique-lock scripts: a real TCP proxy (ReplyDroppingProxy) loses the
reply after Redis ran the script, and the package sends it again. A re-sent acquire returns
the same lease (no second lock, no lock leaked to nobody), a re-sent refusal is counted once,
a re-sent renew or release changes nothing more."""

import pytest

from celery_redqueue import Lease, UniqueLocks
from celery_redqueue.redis.lua import script
from celery_redqueue.structures.unique import Refused


def sha(name):
    return script(name).sha.encode()


@pytest.fixture(autouse=True)
def scripts_loaded(redqueue_redis):
    for name in ("unique_acquire", "unique_renew", "unique_release"):
        redqueue_redis.script_load(script(name).source)


@pytest.fixture
def tables(retrying_client, redqueue_redis, redqueue_prefix):
    """The same table through the proxy (``lossy``) and directly (``direct``)."""
    lossy = UniqueLocks(retrying_client, "u", prefix=redqueue_prefix)
    direct = UniqueLocks(redqueue_redis, "u", prefix=redqueue_prefix)
    return lossy, direct


def test_a_lost_acquire_reply_returns_the_same_lease(tables, reply_proxy):
    lossy, direct = tables
    reply_proxy.drop(sha("unique_acquire"))
    lease = lossy.acquire("k", task_id="a", ttl=30)
    assert reply_proxy.dropped == 1
    assert isinstance(lease, Lease)
    held = direct.holder("k")
    assert held is not None and (held.task_id, held.fence) == ("a", lease.fence)
    # The lease the caller got is the one that holds the key: it renews and releases it.
    assert lossy.renew(lease, 30) is not None
    assert lossy.release(lease) is True
    assert direct.holder("k") is None
    stats = direct.stats()
    assert (stats.acquired, stats.released, stats.held) == (1, 1, 0)


def test_a_lost_refusal_reply_is_counted_once(tables, reply_proxy):
    lossy, direct = tables
    first = direct.acquire("k", task_id="a", ttl=30)
    reply_proxy.drop(sha("unique_acquire"))
    refused = lossy.acquire("k", task_id="b", ttl=30)
    assert reply_proxy.dropped == 1
    assert isinstance(refused, Refused) and refused.holder == "a"
    assert direct.holder("k").fence == first.fence
    assert (direct.stats().acquired, direct.stats().refused) == (1, 1)


def test_a_lost_renew_reply_keeps_the_lock(tables, reply_proxy):
    lossy, direct = tables
    lease = lossy.acquire("k", task_id="a", ttl=30)
    reply_proxy.drop(sha("unique_renew"))
    renewed = lossy.renew(lease, 60)
    assert reply_proxy.dropped == 1
    assert renewed is not None and renewed.expires_at > lease.expires_at
    assert isinstance(direct.acquire("k", task_id="b", ttl=30), Refused)
    assert lossy.release(renewed) is True and direct.holder("k") is None


def test_a_lost_release_reply_frees_the_key_and_releases_nobody_else(tables, reply_proxy):
    lossy, direct = tables
    lease = lossy.acquire("k", task_id="a", ttl=30)
    reply_proxy.drop(sha("unique_release"))
    assert lossy.release(lease) is True  # re-sent: "already released"
    assert reply_proxy.dropped == 1
    assert direct.holder("k") is None
    # The next holder's lock survives a late re-send of the old release.
    nxt = direct.acquire("k", task_id="b", ttl=30)
    assert isinstance(nxt, Lease)
    assert lossy.release(lease) is True
    assert direct.holder("k").task_id == "b"
    stats = direct.stats()
    assert (stats.acquired, stats.released, stats.lost, stats.held) == (2, 1, 0, 1)


def test_a_lost_hand_back_reply_keeps_the_key_for_the_retry(tables, reply_proxy):
    lossy, direct = tables
    lease = lossy.acquire("k", task_id="a", ttl=30)
    reply_proxy.drop(sha("unique_release"))
    assert lossy.release(lease, hand_back=("a", 30)) is True
    assert reply_proxy.dropped == 1
    held = direct.holder("k")
    assert held is not None and (held.task_id, held.phase) == ("a", "queued")
    assert isinstance(direct.acquire("k", task_id="b", ttl=30), Refused)
    assert isinstance(direct.acquire("k", task_id="a", ttl=30, claim=True), Lease)
    assert direct.stats().handed_back == 1
