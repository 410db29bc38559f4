"""Fault hunt over the pool's new memory layout and lean wire (issue 20): a batch kept in the
compact record of the common pop (members only, or members and scores) comes back whole from
the reaper, with its ids, scores and arrival slots, and its calls go out alone after; a record
that decodes but holds garbage is dead-lettered whole with the reason; the fast JSON decode
path answers exactly what kombu's loads does."""

import pytest
from kombu.utils import json as kombu_json

from celery_redqueue.redis.serializers import JSONSerializer

pytestmark = pytest.mark.timeout(120)


def expire_all(client, pool):
    """The drain that held every in-flight batch died: their deadlines have passed."""
    for batch_id in client.zrange(pool.keys("inflight"), 0, -1):
        client.zadd(pool.keys("inflight"), {batch_id: 0})


@pytest.mark.parametrize("policy", ["newest", "reject", "sample"])
def test_a_reaped_common_pop_returns_every_call_as_it_was(
    policy, make_pool, redqueue_redis, identities
):
    pool = make_pool(capacity=10, policy=policy, delivery="at_least_once", visibility_timeout=60)
    pool.add_many(range(4))
    before = redqueue_redis.zrange(pool.keys("items"), 0, -1, withscores=True)
    ages = redqueue_redis.zrange(pool.keys("ages"), 0, -1, withscores=True)
    batch = pool.pop(10)  # fresh calls: the compact record
    assert batch.calls == 4
    expire_all(redqueue_redis, pool)
    assert pool.reap().returned == 4
    # The same members, scores (the FIFO place or the sample's random score) and arrivals.
    assert redqueue_redis.zrange(pool.keys("items"), 0, -1, withscores=True) == before
    # Ages are kept to the arrival slot (100 ms): the compact record knows the slot only.
    back = redqueue_redis.zrange(pool.keys("ages"), 0, -1, withscores=True)
    assert [slot for slot, _ in back] == [slot for slot, _ in ages]
    assert all(at - 100 < got <= at for (_, got), (_, at) in zip(back, ages, strict=True))
    stats = pool.stats()
    assert (stats.depth, stats.in_flight, stats.redelivered) == (4, 0, 4)
    assert identities["pool"](stats)
    # Received before: each goes alone now (a call that killed its process kills only itself).
    again = pool.pop(10)
    assert again.calls == 1 and again.items[0].receives == 2
    pool.ack(again, failures={0: "boom"})
    rest = [pool.pop(10) for _ in range(3)]
    assert [b.calls for b in rest] == [1, 1, 1]
    for b in rest:
        pool.ack(b)
    stats = pool.stats()
    assert (stats.processed, stats.depth, stats.in_flight) == (3, 1, 0)
    assert identities["pool"](stats)


@pytest.mark.parametrize(
    "record",
    [
        b"\x01\x92\xa3abc\xa4b:zz",  # members only, the first with no id
        b"\x02\x94\xa41:ok\xa3one\xa42:ok\xa11",  # a score that is no number
        b"\x05\x95\xa41:ok\xa11\xa1x\xa11\xa10",  # a count that is no number
        b"\x03\x93\xa41:ok\xa11\xa11",  # a field count no record has
        b"\x01\x92\xa41:ok\xc0",  # a nil member
    ],
)
def test_a_batch_record_holding_garbage_is_dead_lettered_whole(
    record, make_pool, redqueue_redis, identities
):
    pool = make_pool(policy="newest", delivery="at_least_once", visibility_timeout=60)
    pool.add_many(["a", "b"])
    batch = pool.pop(10)
    redqueue_redis.hset(pool.keys("inflight_items"), batch.id, record)
    expire_all(redqueue_redis, pool)
    result = pool.reap()
    assert (result.dead_lettered, result.returned) == (2, 0)
    stats = pool.stats()
    assert (stats.in_flight, stats.dead, stats.depth) == (0, 2, 0)
    assert identities["pool"](stats)
    assert pool.dead_letters()[0].error.startswith("undecodable batch record")
    assert pool.reap().dead_lettered == 0  # once, not again each run


JSON_CASES = [
    b'{"a":1}',
    b'{"a": 1} ',
    b' {"a":1}',
    b'[1,2,[3,{"b":[]}]]',
    b'"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"',
    b'"tab\\t nl\\n quote\\" slash\\/ back\\\\"',
    b'"\\u00e9\\ud83d\\ude00"',
    b'{"\\u005f_type__": "datetime", "__value__": "2026-12-02T15:00:00"}',
    b'{"__type__": "datetime", "__value__": "2026-12-02T15:00:00+00:00"}',
    b'{"__type__": "uuid", "__value__": "0b8f5d84-0c1c-4b5f-9a4e-4b8f5d840c1c"}',
    b'{"__type__": "decimal", "__value__": "1.10"}',
    b'{"__type__": "bytes", "__value__": "YWJj"}',
    b'{"x": "__type__"}',
    b"123456789012345678901234567890123456789",
    b"-0",
    b"1e400",
    b"1.5E-3",
    b"NaN",
    b"-Infinity",
    b"null",
    b"true",
    b'{"a":1,"a":2}',
    b'"\\\\u0041"',
    b"",
    b"{",
    b'{"a":1}x',
    b"\xff",
    b'"\xed\xa0\x80"',
    b"\xef\xbb\xbf{}",
]


@pytest.mark.parametrize("data", JSON_CASES)
def test_the_fast_json_path_decodes_what_kombu_does(data):
    try:
        expected = ("ok", kombu_json.loads(data))
    except Exception as exc:
        expected = ("error", type(exc))
    try:
        got = ("ok", JSONSerializer().loads(data))
    except Exception:
        got = ("error", None)
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert repr(got[1]) == repr(expected[1])
        assert type(got[1]) is type(expected[1])


def test_a_lost_poll_reply_reserved_ahead_keeps_its_lead(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    from celery_redqueue import LeakyBucket
    from celery_redqueue.redis.lua import TAKEN, script

    direct = LeakyBucket(redqueue_redis, "ahead", prefix=redqueue_prefix, default_rate="6/m")
    bucket = LeakyBucket(retrying_client, "ahead", prefix=redqueue_prefix, default_rate="6/m")
    direct.enqueue_many([("k", 1), ("k", 2)])
    first = direct.dequeue().reservation
    assert direct.commit(first)
    # The next call of "k" is due 10 s on; a poll reserving up to 60 s ahead releases it at its
    # slot and tells the caller to wait the lead out before the body starts.
    reply_proxy.drop(script("bucket_dequeue").sha.encode())
    args = [bucket.visibility_timeout_ms, 1, 0, "poll-1", 60_000, "me", 0, 60_000]
    reply = bucket._run("bucket_dequeue", args)
    assert reply_proxy.dropped == 1 and reply[0] == TAKEN and reply[1] == b"k"
    deadline, released, lead = float(reply[5]), float(reply[6]), float(reply[9])
    # The re-sent poll's reply (the first was lost) names the same slot: on main it said
    # "released now, lead 0", and the body started ~10 s before its slot.
    assert released == deadline - bucket.visibility_timeout_ms
    assert lead > 0
    assert direct.stats().in_flight == 1


def test_a_lost_reply_of_a_late_ack_counts_it_late_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    from celery_redqueue import CappedPool
    from celery_redqueue.redis.lua import script

    direct = CappedPool(redqueue_redis, "late", 100, prefix=redqueue_prefix)
    pool = CappedPool(retrying_client, "late", 100, prefix=redqueue_prefix)
    direct.add_many(range(3))
    batch = pool.pop(10)
    expire_all(redqueue_redis, direct)
    assert direct.reap().lost == 3  # its drain was taken for dead
    reply_proxy.drop(script("pool_ack").sha.encode())
    assert pool.ack(batch) is False
    assert reply_proxy.dropped == 1
    stats = direct.stats()
    assert (stats.late, stats.lost, stats.in_flight) == (3, 3, 0)
    assert direct.ack(batch) is False  # sent once more: still late, counted once (was: 6)
    stats = direct.stats()
    assert (stats.late, stats.lost, stats.in_flight) == (3, 3, 0)
