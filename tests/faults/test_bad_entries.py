"""Problems 3 and 5 of issue 8: every script reads and checks before it writes, and an entry
that cannot be parsed or decoded is dead-lettered with the reason (pools and buckets alike)
while the rest carries on; the accounting identities stay exact."""

import json
import time

import pytest
import redis

from celery_redqueue import BucketTask
from celery_redqueue.errors import RedQueueError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pool(make_pool):
    return make_pool(policy="newest")


@pytest.fixture
def bucket(make_bucket):
    return make_bucket(default_rate="1000/s", default_burst=10)


def corrupt_member(client, pool, index, member):
    """Replace the index-th waiting entry of a pool by ``member``, keeping its score."""
    old, score = client.zrange(pool.keys("items"), index, index, withscores=True)[0]
    client.zrem(pool.keys("items"), old)
    client.zadd(pool.keys("items"), {member: score})
    return old


def test_problem_3_a_malformed_pool_member_loses_nothing(pool, redqueue_redis, identities):
    pool.add_many(["a", "b", "c"])
    corrupt_member(redqueue_redis, pool, 1, b"not an entry")
    batch = pool.pop(10)  # the old pop raised after ZPOPMIN, losing "a" and "c"
    assert sorted(item.payload for item in batch.items) == ["a", "c"]
    assert batch.malformed == 1
    pool.ack(batch)
    stats = pool.stats()
    assert (stats.processed, stats.dead, stats.depth, stats.in_flight) == (2, 1, 0, 0)
    assert identities["pool"](stats)
    [letter] = pool.dead_letters()
    assert letter.error.startswith("malformed entry")


def test_problem_3_pool_reap_reads_a_batch_before_taking_it(make_pool, redqueue_redis, identities):
    pool = make_pool(delivery="at_least_once", visibility_timeout=60)
    pool.add_many(["a", "b"])
    batch = pool.pop(10)
    redqueue_redis.hset(pool.keys("inflight_items"), batch.id, b"{not json")
    redqueue_redis.zadd(pool.keys("inflight"), {batch.id: 0})  # its deadline passed
    result = pool.reap()  # the old reap deleted the batch, then failed to decode it
    assert result.dead_lettered == 2
    stats = pool.stats()
    assert (stats.in_flight, stats.dead) == (0, 2)
    assert identities["pool"](stats)
    assert pool.dead_letters()[0].error.startswith("undecodable batch record")


def test_problem_3_bucket_dequeue_parses_a_slot_before_taking_it(
    bucket, redqueue_redis, identities
):
    bucket.enqueue_many([("k", "first"), ("k", "second")])
    head = int(redqueue_redis.hget(bucket.keys("heads"), "k") or 0)
    redqueue_redis.hset(bucket.keys("items"), f"k\0{head}", b"garbage")
    poll = bucket.dequeue()  # the old dequeue decremented depth, then failed on the slot
    assert poll.reservation is not None and poll.reservation.payload == "second"
    assert poll.malformed == 1
    assert bucket.commit(poll.reservation)
    stats = bucket.stats()
    assert (stats.depth, stats.in_flight, stats.processed, stats.dead) == (0, 0, 1, 1)
    assert identities["bucket"](stats)
    assert bucket.dead_letters()[0].error.startswith("malformed entry")


def test_a_ready_member_with_no_queue_is_dropped_not_dead_lettered(
    bucket, redqueue_redis, identities
):
    """A key in the ready set that holds no calls (another program's member) is no call: it
    leaves the ready set, and nothing is dead-lettered or counted (the old upkeep buried one
    empty "malformed entry" per ghost and took depth below zero)."""
    bucket.enqueue_many([("k", 0), ("k", 1), ("k", 2)])
    redqueue_redis.zadd(bucket.keys("ready"), {"ghost": 0, "ghost\0two": 0})
    payloads = []
    for _ in range(8):
        poll = bucket.dequeue()
        if poll.reservation is not None:
            payloads.append(poll.reservation.payload)
            assert bucket.commit(poll.reservation)
    assert sorted(payloads) == [0, 1, 2]
    stats = bucket.stats()
    assert (stats.depth, stats.processed, stats.dead) == (0, 3, 0)
    assert identities["bucket"](stats)
    assert bucket.dead_letters() == []
    assert redqueue_redis.zcard(bucket.keys("ready")) == 0


def test_problem_3_bucket_enqueue_reads_the_rate_before_appending(bucket, redqueue_redis):
    bucket.enqueue("k", "kept")
    redqueue_redis.hset(bucket.keys("rates"), "new", b"not a rate")
    with pytest.raises((RedQueueError, redis.exceptions.ResponseError), match="rate"):
        bucket.enqueue("new", "refused")
    # Nothing stored: the old script appended the item and counted its depth, then failed
    # reading the rate.
    stats = bucket.stats()
    assert (stats.depth, stats.enqueued) == (1, 1)
    assert redqueue_redis.hlen(bucket.keys("items")) == 1
    bucket.set_rate("new", "1000/s")
    assert bucket.enqueue("new", "again")


def test_problem_5_an_undecodable_bucket_payload_is_dead_lettered_with_its_reason(
    bucket, redqueue_redis, identities
):
    bucket.enqueue_many([("k", "first"), ("k", "second")])
    head = int(redqueue_redis.hget(bucket.keys("heads"), "k") or 0)
    slot = redqueue_redis.hget(bucket.keys("items"), f"k\0{head}")
    prefix = b":".join(slot.split(b":", 3)[:3])
    redqueue_redis.hset(bucket.keys("items"), f"k\0{head}", prefix + b":\xff{not json")
    poll = bucket.dequeue()  # the old poll raised, leaving the item reserved
    assert poll.reservation is not None and poll.reservation.payload == "second"
    bucket.commit(poll.reservation)
    stats = bucket.stats()
    assert (stats.in_flight, stats.processed, stats.dead) == (0, 1, 1)
    assert identities["bucket"](stats)
    assert bucket.dead_letters()[0].error.startswith("undecodable payload: ")


def test_problem_5_an_undecodable_payload_does_not_kill_the_drain(
    app, worker, redqueue_redis, redqueue_prefix, wait_for, identities
):
    done = f"{redqueue_prefix}:done"

    @app.task(base=BucketTask, bucket_key="k", bucket_rate="100/s", bucket_drain_interval=None)
    def t(k, i):
        redqueue_redis.rpush(done, i)

    bucket = t.bucket
    receipts = [t.delay("a", 1), t.delay("a", 2), t.delay("b", 3)]
    assert receipts[0].drain_needed  # one drain job, waiting in the broker
    head = int(redqueue_redis.hget(bucket.keys("heads"), "a") or 0)
    slot = redqueue_redis.hget(bucket.keys("items"), f"a\0{head}")
    redqueue_redis.hset(
        bucket.keys("items"), f"a\0{head}", b":".join(slot.split(b":", 3)[:3]) + b":\xff{"
    )
    with worker(app):
        # The drain job meets the bad item first; the old one died there.
        wait_for(lambda: bucket.stats().processed == 2, timeout=30, message="the good items")
    stats = bucket.stats()
    assert (stats.in_flight, stats.dead, stats.depth) == (0, 1, 0)
    assert identities["bucket"](stats)
    assert sorted(x.decode() for x in redqueue_redis.lrange(done, 0, -1)) == ["2", "3"]
    assert bucket.dead_letters()[0].error.startswith("undecodable payload: ")


class PickyJSON:
    """JSON that refuses to read back the payload "poison" (as a changed serializer would)."""

    def dumps(self, obj):
        return json.dumps(obj).encode()

    def loads(self, data):
        value = json.loads(data)
        if value == "poison":
            raise ValueError("cannot read")
        return value


def test_an_undecodable_pool_payload_is_dead_lettered_at_most_once_too(make_pool, identities):
    pool = make_pool(policy="newest", serializer=PickyJSON())
    pool.add_many(["poison", "good"])
    batch = pool.pop(10)
    assert [item.payload for item in batch.items] == ["good"]
    assert pool.ack(batch)
    stats = pool.stats()
    assert (stats.processed, stats.failed, stats.dead, stats.in_flight) == (1, 0, 1, 0)
    assert identities["pool"](stats)
    [letter] = pool.dead_letters()
    assert letter.error == "undecodable payload: ValueError: cannot read"


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_a_malformed_delayed_entry_is_dead_lettered_when_due(
    kind, pool, bucket, redqueue_redis, identities
):
    structure = pool if kind == "pool" else bucket
    if kind == "pool":
        pool.add("later", delay=0.05)
        pool.add("due", delay=0.05)
    else:
        bucket.enqueue("k", "later", delay=0.05)
        bucket.enqueue("k", "due", delay=0.05)
    scheduled = structure.keys("scheduled")
    member, score = redqueue_redis.zrange(scheduled, 0, 0, withscores=True)[0]
    redqueue_redis.zrem(scheduled, member)
    redqueue_redis.zadd(scheduled, {b"garbage": score})
    time.sleep(0.1)
    if kind == "pool":
        batch = pool.pop(10)
        assert [item.payload for item in batch.items] == ["due"] and batch.malformed == 1
        pool.ack(batch)
        stats = pool.stats()
        assert (stats.processed, stats.dead, stats.delayed) == (1, 1, 0)
        assert identities["pool"](stats)
    else:
        poll = bucket.dequeue()
        assert poll.reservation.payload == "due" and poll.malformed == 1
        bucket.commit(poll.reservation)
        stats = bucket.stats()
        assert (stats.processed, stats.dead, stats.delayed) == (1, 1, 0)
        assert identities["bucket"](stats)
    assert structure.dead_letters()[0].error.startswith("malformed entry")
