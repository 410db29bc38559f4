"""A pool's oldest-waiting index: ids carry their arrival, so a non-coalescing pool counts
waiting entries per arrival slot instead of keeping a second sorted-set member per call. Every
way an entry leaves (pop, eviction, the guard, a bad entry) or comes back (reaper, failed ack,
requeue, a due delayed call) keeps the counts equal to what waits, and an empty pool keeps no
slot at all."""

import time

import pytest


def slots(client, pool):
    """(ages members, arrivals: slot -> count) as Redis holds them."""
    ages = {m.decode(): s for m, s in client.zrange(pool.keys("ages"), 0, -1, withscores=True)}
    arrivals = {k.decode(): int(v) for k, v in client.hgetall(pool.keys("arrivals")).items()}
    return ages, arrivals


def assert_counts_match(client, pool):
    ages, arrivals = slots(client, pool)
    assert set(ages) == set(arrivals), (ages, arrivals)
    assert all(count > 0 for count in arrivals.values()), arrivals
    assert sum(arrivals.values()) == client.zcard(pool.keys("items"))


@pytest.mark.parametrize("policy", ["sample", "newest", "reject"])
def test_no_index_member_per_call_and_nothing_left_when_empty(make_pool, redqueue_redis, policy):
    pool = make_pool(capacity=1000, policy=policy)
    pool.add_many(range(300))
    for i in range(20):
        pool.add(i)
    ages, _ = slots(redqueue_redis, pool)
    assert len(ages) <= 3  # slots of 100 ms, not 320 members
    assert_counts_match(redqueue_redis, pool)
    while batch := pool.pop(50):
        pool.ack(batch)
        assert_counts_match(redqueue_redis, pool)
    assert not redqueue_redis.exists(pool.keys("ages"), pool.keys("arrivals"))
    assert pool.stats().processed == 320


def test_the_oldest_waiting_call_is_read_from_its_slot(make_pool, redqueue_redis):
    pool = make_pool(capacity=100, policy="sample")
    pool.add("old")
    (old_at,) = slots(redqueue_redis, pool)[0].values()
    time.sleep(0.15)  # the next calls arrive in a later slot
    pool.add_many(range(10))
    assert pool.figures().oldest_age >= 0.15  # a lower bound: it only grows with load
    # Pop until "old" has gone: the oldest is then one of the later calls, in a later slot.
    while True:
        batch = pool.pop(1)
        pool.ack(batch)
        if batch.items[0].payload == "old":
            break
    if not slots(redqueue_redis, pool)[0]:
        pool.add("late")  # a sampled pool handed "old" out last (1 run in 11): one call waits again
    assert min(slots(redqueue_redis, pool)[0].values()) >= old_at + 100
    assert_counts_match(redqueue_redis, pool)


@pytest.mark.parametrize("policy", ["sample", "newest"])
def test_evictions_leave_their_slots(make_pool, redqueue_redis, policy):
    pool = make_pool(capacity=10, policy=policy)
    pool.add_many(range(10))
    time.sleep(0.15)  # a later slot
    pool.add_many(range(10, 40))
    assert_counts_match(redqueue_redis, pool)
    assert pool.stats().evicted + pool.stats().rejected == 30


def test_returned_and_retried_entries_keep_their_arrival(make_pool, redqueue_redis):
    pool = make_pool(capacity=10, delivery="at_least_once", visibility_timeout=0.05)
    pool.add_many(["a", "b"])
    first_at = min(s for s in slots(redqueue_redis, pool)[0].values())
    taken = pool.pop(10)
    assert not redqueue_redis.exists(pool.keys("ages"))
    time.sleep(0.1)
    assert pool.reap().returned == 2
    assert_counts_match(redqueue_redis, pool)
    # Back in their arrival slot, aged from its start: to the slot's 100 ms.
    back_at = min(s for s in slots(redqueue_redis, pool)[0].values())
    assert first_at - 100 < back_at <= first_at
    again = pool.pop(1)  # received before: alone
    pool.ack(again, failures={0: "boom"})
    assert_counts_match(redqueue_redis, pool)
    assert pool.ack(taken) is False


def test_due_delayed_calls_and_requeued_dead_letters_are_counted(make_pool, redqueue_redis):
    pool = make_pool(capacity=10, delivery="at_least_once", max_receives=1)
    pool.add("later", delay=0.05)
    assert not redqueue_redis.exists(pool.keys("arrivals"))
    time.sleep(0.1)
    batch = pool.pop(10)  # the due call enters the pool, then leaves it
    assert [i.payload for i in batch.items] == ["later"]
    pool.ack(batch, failures={0: "boom"})  # last receive: dead-lettered
    assert pool.stats().dead == 1
    assert pool.requeue_dead() == 1
    assert_counts_match(redqueue_redis, pool)
    assert pool.stats().depth == 1


def test_a_malformed_entry_is_buried_and_the_counts_still_match(make_pool, redqueue_redis):
    pool = make_pool(capacity=10)
    pool.add_many(["a", "b"])
    redqueue_redis.zadd(pool.keys("items"), {b"no id here": 0.0})
    redqueue_redis.hincrby(pool.keys("stats"), "offered+accepted+depth", 1)
    batch = pool.pop(10)
    assert batch.malformed == 1 and len(batch.items) == 2
    pool.ack(batch)
    assert not redqueue_redis.exists(pool.keys("ages"), pool.keys("arrivals"))


def test_coalescing_pools_keep_one_age_per_entry_and_counts_only_of_merged(
    make_pool, redqueue_redis
):
    pool = make_pool(capacity=10, coalesce=True)
    pool.add_many(["x", "x", "y"])
    assert sorted(redqueue_redis.zrange(pool.keys("ages"), 0, -1)) == [b'"x"', b'"y"']
    # An entry of one call keeps no count: only the merged one has a field.
    assert redqueue_redis.hgetall(pool.keys("counts")) == {b'"x"': b"2"}
    batch = pool.pop(10)
    assert sorted((i.payload, i.count) for i in batch.items) == [("x", 2), ("y", 1)]
    pool.ack(batch)
    assert not redqueue_redis.exists(pool.keys("ages"))
