"""Lost replies (issue 18, items 1 and 2): the connection drops after Redis ran a script and
before its reply arrived. A real TCP proxy on loopback (ReplyDroppingProxy) loses the reply;
the client retries everything redis-py can retry. Every script is either safe to run twice
(and is sent again: the same batch, reservation or lease comes back, a settle says "already
done") or raises ReplyLostError and is never sent again (stores)."""

import importlib.util
import os
import re
import time
from pathlib import Path

import pytest
import redis

from celery_redqueue import (
    CappedPool,
    EventStream,
    LeakyBucket,
    LeasedResources,
    ReplyLostError,
)
from celery_redqueue.redis.lua import LOST_REPLY, script

LUA = Path(__file__).resolve().parents[2] / "celery_redqueue" / "lua"


def sha(name):
    return script(name).sha.encode()


@pytest.fixture(autouse=True)
def scripts_loaded(redqueue_redis):
    """Every script is on the server before a reply is lost: a lost NOSCRIPT reply would be a
    reply to a script that did not run, which tells nothing."""
    for name in _entry_scripts():
        redqueue_redis.script_load(script(name).source)


@pytest.mark.parametrize("delivery", ["at_most_once", "at_least_once"])
def test_a_lost_pop_reply_returns_the_same_batch(
    delivery, retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct = CappedPool(redqueue_redis, "p", 100, prefix=redqueue_prefix, delivery=delivery)
    pool = CappedPool(retrying_client, "p", 100, prefix=redqueue_prefix, delivery=delivery)
    direct.add_many(range(6))
    reply_proxy.drop(sha("pool_pop"))
    first = pool.pop(3)
    assert reply_proxy.dropped == 1
    # On main the re-sent pop popped three more calls and overwrote the first batch's record:
    # those calls were never delivered and in_flight stayed 3 forever.
    assert first.calls == 3 and direct.stats().in_flight == 3
    assert pool.ack(first)
    second = pool.pop(10)
    assert second.calls == 3 and pool.ack(second)
    delivered = sorted(item.payload for item in first.items + second.items)
    assert delivered == list(range(6))
    stats = direct.stats()
    assert (stats.processed, stats.in_flight, stats.depth, stats.lost) == (6, 0, 0, 0)


def test_a_pop_with_a_batch_id_in_flight_pops_nothing_more(make_pool):
    pool = make_pool(capacity=100)
    pool.add_many(range(4))
    first = pool.pop(2, batch_id="b1")
    again = pool.pop(2, batch_id="b1")
    assert [i.payload for i in again.items] == [i.payload for i in first.items]
    assert pool.stats().depth == 2 and pool.stats().in_flight == 2


@pytest.mark.parametrize("lost", ["pool_due", "pool_pop"])
def test_a_lost_due_reply_offers_each_delayed_call_once(
    lost, retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """pool_pop replies UPKEEP (delayed calls are due), pool_due offers them, pool_pop pops: a
    lost reply of either step, sent again, offers and pops each call once."""
    direct = CappedPool(redqueue_redis, "d", 100, prefix=redqueue_prefix)
    pool = CappedPool(retrying_client, "d", 100, prefix=redqueue_prefix)
    direct.add_many(["now 1", "now 2"])
    for n in range(3):
        assert direct.add(f"due {n}", delay=0.001).delayed
    time.sleep(0.01)  # the delayed calls fall due (a wait, not a timed assert)
    reply_proxy.drop(sha(lost))
    batch = pool.pop(10)
    assert reply_proxy.dropped == 1
    # A re-sent pool_due finds nothing more due; a re-sent UPKEEP reply wrote nothing.
    assert sorted(item.payload for item in batch.items) == [
        "due 0",
        "due 1",
        "due 2",
        "now 1",
        "now 2",
    ]
    assert pool.ack(batch)
    stats = direct.stats()
    assert (stats.offered, stats.delayed, stats.processed, stats.depth) == (5, 0, 5, 0)


def test_a_lost_mixed_pop_reply_returns_the_same_batch(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """Coalesced entries take the general pop (pool_pop replies MIXED, then pool_pop_mixed)."""
    direct = CappedPool(
        redqueue_redis, "m", 100, prefix=redqueue_prefix, coalesce=True, policy="reject"
    )
    pool = CappedPool(
        retrying_client, "m", 100, prefix=redqueue_prefix, coalesce=True, policy="reject"
    )
    direct.add_many(["a", "a", "b", "c"])
    reply_proxy.drop(sha("pool_pop_mixed"))
    first = pool.pop(2)
    assert reply_proxy.dropped == 1
    assert first.calls == 3 and direct.stats().in_flight == 3
    assert pool.ack(first)
    second = pool.pop(10)
    assert [item.payload for item in second.items] == ["c"] and pool.ack(second)
    stats = direct.stats()
    assert (stats.processed, stats.in_flight, stats.depth) == (4, 0, 0)


def test_a_lost_store_reply_raises_and_is_never_sent_again(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct = CappedPool(redqueue_redis, "s", 100, prefix=redqueue_prefix)
    pool = CappedPool(retrying_client, "s", 100, prefix=redqueue_prefix)
    assert pool.add("warm").kept  # the thread's connection is open
    reply_proxy.drop(sha("pool_add"))
    with pytest.raises(ReplyLostError, match="may have been applied"):
        pool.add("once")  # on main: re-sent, stored twice, and delay() returned normally
    reply_proxy.drop(sha("pool_add"))
    with pytest.raises(ReplyLostError):
        pool.add_many(["a", "b"])
    assert pool.add("later", delay=30).delayed
    reply_proxy.drop(sha("pool_add"))
    with pytest.raises(ReplyLostError):
        pool.add("later again", delay=30)
    stats = direct.stats()
    assert (stats.offered, stats.depth, stats.delayed) == (4, 4, 2)


def test_lost_bucket_and_stream_store_replies_raise(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct = LeakyBucket(redqueue_redis, "b", prefix=redqueue_prefix)
    bucket = LeakyBucket(retrying_client, "b", prefix=redqueue_prefix)
    reply_proxy.drop(sha("bucket_enqueue"))
    with pytest.raises(ReplyLostError):
        bucket.enqueue("k", 1)  # the plain path
    reply_proxy.drop(sha("bucket_enqueue"))
    with pytest.raises(ReplyLostError):
        bucket.enqueue_many([("k", 2), ("k", 3)])  # the general path
    assert direct.stats().enqueued == 3
    stream = EventStream(retrying_client, "s", prefix=redqueue_prefix, groups=["g"])
    reply_proxy.drop(sha("stream_publish"))
    with pytest.raises(ReplyLostError):
        stream.publish({"n": 1})
    assert redqueue_redis.xlen(stream.keys("events")) == 1


def test_a_lost_ack_reply_is_already_done_not_late(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct = CappedPool(redqueue_redis, "a", 100, prefix=redqueue_prefix, delivery="at_least_once")
    pool = CappedPool(retrying_client, "a", 100, prefix=redqueue_prefix, delivery="at_least_once")
    direct.add_many(range(3))
    batch = pool.pop(10)
    reply_proxy.drop(sha("pool_ack"))
    assert pool.ack(batch) is True  # on main: False, and 3 calls counted late
    stats = direct.stats()
    assert (stats.processed, stats.late, stats.in_flight) == (3, 0, 0)


def test_a_lost_bucket_poll_reply_returns_the_same_reservation(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct = LeakyBucket(redqueue_redis, "q", prefix=redqueue_prefix, default_rate="1000/s")
    bucket = LeakyBucket(retrying_client, "q", prefix=redqueue_prefix, default_rate="1000/s")
    direct.enqueue_many([("k1", 1), ("k2", 2)])
    reply_proxy.drop(sha("bucket_dequeue"))
    reservation = bucket.dequeue().reservation
    assert reply_proxy.dropped == 1
    # On main the re-sent poll reserved the other item too, orphaned until its timeout.
    assert direct.stats().in_flight == 1
    reply_proxy.drop(sha("bucket_settle"))
    assert bucket.commit(reservation) is True
    stats = direct.stats()
    assert (stats.processed, stats.late, stats.in_flight, stats.depth) == (1, 0, 0, 1)


def test_a_lost_upkeep_reply_queues_each_due_item_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """bucket_upkeep (the poll's rare step: due delayed items, a new minute) is re-sent."""
    direct = LeakyBucket(redqueue_redis, "d", prefix=redqueue_prefix, default_rate="1000/s")
    bucket = LeakyBucket(retrying_client, "d", prefix=redqueue_prefix, default_rate="1000/s")
    direct.enqueue_many([("k", 1), ("k", 2)], delay=0.05)
    while (poll := direct.dequeue(ahead=False)).wait:  # not due yet: nothing is queued
        assert direct.stats().delayed == 2
        time.sleep(poll.wait)
    assert direct.commit(poll.reservation)
    direct.enqueue("j", 3, delay=0.05)
    time.sleep(0.06)
    reply_proxy.drop(sha("bucket_upkeep"))
    reservation = bucket.dequeue().reservation
    assert reply_proxy.dropped == 1 and reservation.payload in (2, 3)
    stats = direct.stats()
    assert (stats.enqueued, stats.delayed, stats.depth, stats.in_flight) == (3, 0, 1, 1)


def test_a_lost_upkeep_reply_skips_a_completed_head_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """Re-sent, bucket_upkeep leaves the next head alone: it is neither unreadable nor done."""
    options = {"prefix": redqueue_prefix, "default_rate": "1000/s", "processed_guard": 60}
    direct = LeakyBucket(redqueue_redis, "g", **options)
    bucket = LeakyBucket(retrying_client, "g", **options)
    direct.enqueue_many([("k", 1), ("k", 2)])
    redqueue_redis.zadd(direct.keys("done"), {"1": 2**40})  # item 1 completed already
    reply_proxy.drop(sha("bucket_upkeep"))
    reservation = bucket.dequeue().reservation
    assert reply_proxy.dropped == 1 and reservation.payload == 2
    stats = direct.stats()
    assert (stats.guard_skipped, stats.processed, stats.in_flight, stats.depth) == (1, 1, 1, 0)


def test_a_lost_lease_acquire_reply_returns_the_same_lease(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct = LeasedResources(redqueue_redis, "l", ["a", "b"], prefix=redqueue_prefix)
    leases = LeasedResources(retrying_client, "l", ["a", "b"], prefix=redqueue_prefix)
    reply_proxy.drop(sha("lease_acquire"))
    lease = leases.acquire(ttl=60)
    assert reply_proxy.dropped == 1
    assert direct.stats().leased == 1  # on main: 2, one leaked until its TTL
    reply_proxy.drop(sha("lease_release"))
    assert leases.release(lease) is True
    assert direct.stats().leased == 0 and direct.stats().released == 1


def test_a_client_killed_mid_pop_still_delivers_every_call(
    make_pool, redqueue_server_url, redqueue_redis
):
    """CLIENT KILL of the drain's connection between pops: nothing is lost or doubled."""
    client = redis.Redis.from_url(redqueue_server_url)
    pool = make_pool(capacity=1000, delivery="at_least_once")
    pool.client = client
    pool.add_many(range(50))
    delivered = []
    while batch := pool.pop(7):
        delivered += [i.payload for i in batch.items]
        redqueue_redis.client_kill_filter(_type="normal", skipme=True)
        assert pool.ack(batch)
    assert sorted(delivered) == list(range(50))
    assert pool.stats().in_flight == 0 and pool.stats().processed == 50
    client.close()


def _entry_scripts():
    included = set()
    for path in LUA.glob("*.lua"):
        included.update(re.findall(r"^\s*--#include (\w+)", path.read_text(), re.M))
    return sorted(p.stem for p in LUA.glob("*.lua") if p.stem not in included)


def test_every_script_says_what_a_lost_reply_does():
    kinds = {name: script(name).resend for name in _entry_scripts()}
    assert len(kinds) > 30
    stores = {n for n, resend in kinds.items() if not resend}
    assert stores >= {
        "pool_add",
        "bucket_enqueue",
        "stream_publish",
    }
    assert all(LOST_REPLY in (LUA / f"{n}.lua").read_text() for n in kinds)
    # The docs' table is generated from those lines (docs/hooks/generated.py).
    docs = Path(__file__).resolve().parents[2] / "docs"
    assert "<!-- lost-replies -->" in (docs / "failure-modes.md").read_text()
    spec = importlib.util.spec_from_file_location("generated", docs / "hooks" / "generated.py")
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    table = generated.lost_replies_table()
    for name, resend in kinds.items():
        kind = "re-sent" if resend else "raises `ReplyLostError`"
        assert f"| `{name}` | {kind} |" in table


def test_no_script_bypasses_the_call_path():
    """Scripts reach Redis only through redis/call.py, never redis-py's evalsha (which retries)."""
    package = Path(__file__).resolve().parents[2] / "celery_redqueue"
    offenders = []
    for path in package.rglob("*.py"):
        text = path.read_text()
        for match in re.finditer(r"\.(evalsha|eval|register_script)\(", text):
            line = text[: match.start()].count("\n") + 1
            offenders.append(f"{path.relative_to(package)}:{line}")
    # The heartbeat pipelines renew scripts (safe to run twice) through redis-py's pipeline.
    assert offenders == [f"structures{os.sep}base.py:{_pipelined_line(package)}"]


def _pipelined_line(package):
    text = (package / "structures" / "base.py").read_text()
    return text[: text.index("pipe.evalsha(")].count("\n") + 1
