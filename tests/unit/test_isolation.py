"""A call handed out before (its batch died, or failed) is handed out alone, so a call that
kills its process takes no good call with it again (issue 18, 4); fresh calls still go in
full batches. The fault suite shows it with real processes (tests/faults/test_poison_calls.py)."""

import time

import pytest

from celery_redqueue.structures.pool import CappedPool


@pytest.fixture(params=["pool", "sharded"])
def pool(request, make_pool, redqueue_redis, redqueue_prefix):
    options = {"delivery": "at_least_once", "visibility_timeout": 0.05, "max_receives": 3}
    if request.param == "sharded":
        return CappedPool(
            redqueue_redis, "events", 100, shards=2, prefix=redqueue_prefix, **options
        )
    return make_pool(capacity=100, **options)


def pop_all(pool, n=10):
    """Pop and acknowledge until the pool is empty; returns each batch's (payload, receives)."""
    batches = []
    while batch := pool.pop(n):
        batches.append([(i.payload, i.receives) for i in batch.items])
        assert pool.ack(batch)
    return batches


def test_calls_of_a_dead_batch_come_back_one_per_pop(pool, assert_identities):
    pool.add_many([f"old-{i}" for i in range(6)])
    held = 0
    while held < 6:  # (a sharded pool pops one shard at a time)
        held += len(pool.pop(10).items)  # the worker dies: never acknowledged
    pool.add_many([f"new-{i}" for i in range(6)])
    time.sleep(0.1)
    assert pool.reap().returned == 6
    batches = pop_all(pool)
    returned = [b for b in batches if any(receives > 1 for _, receives in b)]
    assert sorted(returned) == [[(f"old-{i}", 2)] for i in range(6)]  # each alone
    fresh = sorted(call for b in batches if b not in returned for call in b)
    assert fresh == [(f"new-{i}", 1) for i in range(6)]
    assert len(batches) < 12  # fresh calls were not split up
    stats = pool.stats()
    assert (stats.processed, stats.dead, stats.depth, stats.in_flight) == (12, 0, 0, 0)
    assert_identities(stats)


def test_a_call_that_keeps_killing_its_batch_is_the_only_dead_letter(pool, assert_identities):
    pool.add_many(["poison", *(f"good-{i}" for i in range(4))])
    ran = {}
    for _ in range(20):
        batch = pool.pop(10)
        if not batch:
            if not pool.stats().in_flight:
                break
            time.sleep(0.1)
            pool.reap()
            continue
        for item in batch.items:
            ran[item.payload] = ran.get(item.payload, 0) + 1
            if item.payload == "poison":
                break  # the process dies here: the batch is never acknowledged
        else:
            assert pool.ack(batch)
    assert [letter.payload for letter in pool.dead_letters()] == ["poison"]
    assert ran["poison"] == 3
    assert all(1 <= ran[f"good-{i}"] <= 2 for i in range(4)), ran
    assert_identities(pool.stats())


def test_a_returned_call_popped_again_after_a_lost_reply_is_the_same_batch_of_one(make_pool):
    pool = make_pool(capacity=10, delivery="at_least_once", visibility_timeout=0.05)
    pool.add_many(["a", "b"])
    pool.pop(10)
    time.sleep(0.1)
    pool.reap()
    first = pool.pop(10, batch_id="resent")
    again = pool.pop(10, batch_id="resent")  # the first reply was lost: sent again
    assert [i.payload for i in again.items] == [i.payload for i in first.items]
    assert len(first.items) == 1


def test_claimed_stream_entries_are_handed_out_alone_then_new_ones_together(make_stream):
    stream = make_stream(groups=["g"], visibility_timeout=0.05, max_receives=3)
    stream.publish_many(["a", "b", "c"])
    assert len(stream.read("g", "dies", 10)) == 3  # its consumer dies: never acknowledged
    stream.publish_many(["d", "e"])
    time.sleep(0.1)
    reads = []
    while read := stream.read("g", "other", 10):
        reads.append([(e.payload, e.receives) for e in read.events])
        stream.ack(read)
    assert reads == [[("a", 2)], [("b", 2)], [("c", 2)], [("d", 1), ("e", 1)]]


@pytest.fixture
def make_stream(redqueue_redis, redqueue_prefix):
    from celery_redqueue.structures.streams import EventStream

    def make(name="orders", **kwargs):
        return EventStream(redqueue_redis, name, prefix=redqueue_prefix, **kwargs)

    return make
