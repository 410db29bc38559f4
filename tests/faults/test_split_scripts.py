"""Fault hunt over the split pop and poll (issue 17): pool_pop hands due delayed calls to
pool_due (UPKEEP) and returned, coalesced, guarded or malformed entries to pool_pop_mixed
(MIXED); bucket_dequeue hands due items, unreadable or completed heads and the minute's roll
to bucket_upkeep (UPKEEP). A reply is lost at each step of those two-step sequences (a real
TCP proxy, tests/support/proxy.py) and a drain dies between the steps: nothing is lost or
doubled, no batch or reservation is stranded, and the counters stay exact."""

import json
import time

import pytest

from celery_redqueue import BucketTask, CappedPool, LeakyBucket, PoolTask
from celery_redqueue.redis.lua import script

pytestmark = pytest.mark.timeout(120)


def sha(name):
    return script(name).sha.encode()


@pytest.fixture(autouse=True)
def scripts_loaded(redqueue_redis):
    """Scripts are on the server first: a lost NOSCRIPT reply tells nothing."""
    for name in ("pool_pop", "pool_due", "pool_pop_mixed", "bucket_dequeue", "bucket_upkeep"):
        redqueue_redis.script_load(script(name).source)


def drop_nth(proxy, marker, nth):
    """Lose only the reply to the ``nth`` command (1-based) containing ``marker``: the follow-up
    script of a two-step sequence, not its first step."""
    seen = {"n": 0}
    lock = proxy._lock

    def doom(data):
        with lock:
            if marker not in data:
                return False
            seen["n"] += 1
            return seen["n"] == nth

    proxy._doom = doom


def pool_pair(direct_client, client, name, prefix, **options):
    return (
        CappedPool(direct_client, name, 100, prefix=prefix, **options),
        CappedPool(client, name, 100, prefix=prefix, **options),
    )


def assert_pool_exact(stats, offered, processed):
    assert stats.offered == stats.accepted == offered
    assert (stats.processed, stats.in_flight, stats.depth, stats.delayed) == (processed, 0, 0, 0)
    assert stats.lost == stats.dead == stats.evicted == 0


def due_soon(pool, payloads):
    for payload in payloads:
        assert pool.add(payload, delay=0.001).delayed
    time.sleep(0.01)  # they fall due (a wait, not a timed assert)


@pytest.mark.parametrize("delivery", ["at_most_once", "at_least_once"])
def test_a_lost_reply_of_the_pop_after_pool_due_returns_the_same_batch(
    delivery, retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """pool_pop (UPKEEP), pool_due, then pool_pop again: that second pop's reply is lost."""
    direct, pool = pool_pair(
        redqueue_redis, retrying_client, "u", redqueue_prefix, delivery=delivery
    )
    direct.add_many(["now 1", "now 2"])
    due_soon(direct, ["due 0", "due 1"])
    drop_nth(reply_proxy, sha("pool_pop"), 2)
    batch = pool.pop(10)
    assert sorted(i.payload for i in batch.items) == ["due 0", "due 1", "now 1", "now 2"]
    assert direct.stats().in_flight == 4
    assert pool.ack(batch)
    assert not pool.pop(10)
    assert_pool_exact(direct.stats(), 4, 4)


def test_a_lost_upkeep_status_is_sent_again_and_changes_nothing(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct, pool = pool_pair(redqueue_redis, retrying_client, "s", redqueue_prefix)
    due_soon(direct, ["due 0", "due 1", "due 2"])
    drop_nth(reply_proxy, sha("pool_pop"), 1)  # the UPKEEP reply
    batch = pool.pop(2)
    assert batch.calls == 2 and pool.ack(batch)
    rest = pool.pop(10)
    assert rest.calls == 1 and pool.ack(rest)
    payloads = sorted(i.payload for i in batch.items + rest.items)
    assert payloads == ["due 0", "due 1", "due 2"]
    assert_pool_exact(direct.stats(), 3, 3)


@pytest.mark.parametrize("lost", ["pool_due", "pool_pop_mixed"])
def test_a_coalescing_pool_with_due_calls_loses_a_reply_at_each_step(
    lost, retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """Three steps: pool_pop UPKEEP, pool_due, pool_pop MIXED, pool_pop_mixed."""
    direct, pool = pool_pair(
        redqueue_redis,
        retrying_client,
        "c",
        redqueue_prefix,
        coalesce=True,
        delivery="at_least_once",
    )
    direct.add_many(["a", "b"])
    due_soon(direct, ["a", "c", "c"])
    reply_proxy.drop(sha(lost))
    batch = pool.pop(10)
    assert reply_proxy.dropped == 1
    assert sorted((i.payload, i.count) for i in batch.items) == [("a", 2), ("b", 1), ("c", 2)]
    stats = direct.stats()
    assert (stats.in_flight, stats.depth, stats.delayed) == (5, 0, 0)
    assert pool.ack(batch)
    assert not pool.pop(10)
    assert_pool_exact(direct.stats(), 5, 5)


def test_a_lost_again_reply_of_a_guarded_pop_counts_each_skip_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """Copies of calls that completed (a late ack after the reaper returned them) are skipped
    by pool_pop_mixed, which replies AGAIN; that reply is lost and the pop sent again."""
    options = dict(delivery="at_least_once", processed_guard=60, visibility_timeout=60)
    direct, pool = pool_pair(redqueue_redis, retrying_client, "g", redqueue_prefix, **options)
    direct.add_many(range(3))
    batch = direct.pop(10)
    for batch_id in redqueue_redis.zrange(direct.keys("inflight"), 0, -1):
        redqueue_redis.zadd(direct.keys("inflight"), {batch_id: 0})
    assert direct.reap().returned == 3
    assert direct.ack(batch) is False  # late: its ids are recorded as completed all the same
    direct.add("fresh")
    reply_proxy.drop(sha("pool_pop_mixed"))
    first = pool.pop(10)
    assert reply_proxy.dropped == 1
    # The re-sent pop found the skipped copies gone and popped what came after them.
    assert [i.payload for i in first.items] == ["fresh"]
    assert pool.ack(first)
    stats = direct.stats()
    assert (stats.guard_skipped, stats.late, stats.depth, stats.in_flight) == (3, 3, 0, 0)
    assert stats.offered == stats.accepted == 4


def test_a_drain_that_dies_after_pool_due_strands_nothing(redqueue_redis, make_pool):
    """A drain killed between pool_due and its next pop: the due calls wait in the pool under
    the dead drain's flag; when its lease runs out, the reaper asks for a drain job."""
    pool = make_pool(capacity=100, delivery="at_least_once")
    due_soon(pool, ["due 0", "due 1"])
    redqueue_redis.set(pool.keys("drains"), 1, px=60_000)  # the drain's flag, as it ran
    assert pool._run("pool_due", [10]) == 0  # ... and died here
    assert pool.stats().depth == 2
    assert not pool.reap().drain_needed  # its flag still holds: a drain may be at work
    redqueue_redis.pexpire(pool.keys("drains"), 1)
    time.sleep(0.01)
    assert pool.reap().drain_needed
    batch = pool.pop(10)
    assert sorted(i.payload for i in batch.items) == ["due 0", "due 1"] and pool.ack(batch)
    assert_pool_exact(pool.stats(), 2, 2)


def take(bucket):
    """The next reservation, waiting out a key's rate (1000/s: a millisecond)."""
    while (poll := bucket.dequeue()).reservation is None:
        assert poll.wait is not None, "nothing to take"
        time.sleep(poll.wait)
    return poll.reservation


def bucket_pair(direct_client, client, name, prefix, **options):
    options.setdefault("default_rate", "1000/s")
    return (
        LeakyBucket(direct_client, name, prefix=prefix, **options),
        LeakyBucket(client, name, prefix=prefix, **options),
    )


def test_a_lost_reply_of_the_poll_after_bucket_upkeep_returns_the_same_reservation(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    direct, bucket = bucket_pair(redqueue_redis, retrying_client, "q", redqueue_prefix)
    direct.enqueue_many([("k1", 1), ("k2", 2)], delay=0.001)
    time.sleep(0.01)
    drop_nth(reply_proxy, sha("bucket_dequeue"), 2)  # UPKEEP, bucket_upkeep, then this poll
    reservation = bucket.dequeue().reservation
    assert reservation is not None and direct.stats().in_flight == 1
    assert bucket.commit(reservation)
    other = take(bucket)
    assert {reservation.payload, other.payload} == {1, 2} and bucket.commit(other)
    assert bucket.dequeue().reservation is None
    stats = direct.stats()
    assert (stats.enqueued, stats.processed, stats.in_flight, stats.depth) == (2, 2, 0, 0)
    assert stats.delayed == 0 and stats.late == 0


def test_a_lost_upkeep_reply_for_a_completed_head_skips_it_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """A head whose id completed already (a late commit after the reaper returned it):
    bucket_dequeue replies UPKEEP with its key, bucket_upkeep skips it; that reply is lost."""
    options = dict(processed_guard=60, visibility_timeout=60)
    direct, bucket = bucket_pair(redqueue_redis, retrying_client, "h", redqueue_prefix, **options)
    direct.enqueue_many([("k", 1), ("k", 2)])
    first = direct.dequeue().reservation
    redqueue_redis.zadd(direct.keys("inflight"), {first.id: 0})
    assert direct.reap().returned == 1
    assert direct.commit(first) is False  # late; its id is recorded as completed
    reply_proxy.drop(sha("bucket_upkeep"))
    reservation = take(bucket)
    assert reply_proxy.dropped == 1
    assert reservation.payload == 2 and bucket.commit(reservation)
    assert bucket.dequeue().reservation is None
    stats = direct.stats()
    assert (stats.guard_skipped, stats.depth, stats.in_flight) == (1, 0, 0)
    assert stats.enqueued == 2


def test_a_lost_minute_roll_reply_rolls_the_minute_once(
    retrying_client, reply_proxy, redqueue_redis, redqueue_prefix
):
    """The first release of a minute: bucket_upkeep rolls the release counts; its reply lost."""
    direct, bucket = bucket_pair(redqueue_redis, retrying_client, "m", redqueue_prefix)
    direct.enqueue_many([("k", n) for n in range(4)])
    for _ in range(3):
        assert direct.commit(take(direct))
    stats_key = direct.keys("stats")
    minute = int(redqueue_redis.hget(stats_key, "releases_minute"))
    redqueue_redis.hset(stats_key, "releases_minute", minute - 1)  # the minute has changed
    time.sleep(0.01)  # the key's rate allows the next release
    reply_proxy.drop(sha("bucket_upkeep"))
    reservation = take(bucket)
    assert reply_proxy.dropped == 1 and reservation.payload == 3
    # One roll: the previous minute's three releases, this minute's one.
    assert int(redqueue_redis.hget(stats_key, "releases_prev")) == 3
    assert int(redqueue_redis.hget(stats_key, "releases_base")) == 3
    assert bucket.commit(reservation)


# Sharded structures, real workers: the two-step scripts run on one shard while others have work.

POOL_SUMS = ("offered", "accepted", "processed", "failed", "retried", "dead", "redelivered")


def test_a_sharded_pool_drains_due_returned_and_dead_calls_exactly(
    app, worker, wait_for, identities
):
    """Delayed calls (UPKEEP), retried calls popped alone (MIXED) and calls dead-lettered after
    two receives, spread over three shards and drained by a real worker."""
    runs = []

    @app.task(
        base=PoolTask,
        pool_size=300,
        pool_shards=3,
        pool_batch_size=5,
        pool_delivery="at_least_once",
        pool_max_receives=2,
    )
    def job(i):
        runs.append(i)
        if i % 10 == 0:
            raise ValueError(f"bad {i}")

    pool = job.pool
    job.add_many([((i,), {}) for i in range(60)])
    for i in range(60, 90):
        job.apply_async((i,), countdown=0.2)
    assert all(s.stats().delayed > 0 for s in pool.shards)
    with worker(app):
        wait_for(
            lambda: pool.stats().processed + pool.stats().dead == 90,
            timeout=60,
            message="every call processed or dead",
        )
    failing = [i for i in range(90) if i % 10 == 0]
    assert sorted(runs) == sorted(list(range(90)) + failing)  # each bad call twice, others once
    stats = pool.stats()
    assert (stats.processed, stats.dead, stats.retried, stats.failed) == (81, 9, 9, 0)
    assert (stats.depth, stats.in_flight, stats.delayed, stats.lost) == (0, 0, 0, 0)
    assert identities["pool"](stats)
    shard_stats = [s.stats() for s in pool.shards]
    for name in POOL_SUMS:
        assert getattr(stats, name) == sum(getattr(s, name) for s in shard_stats), name
    assert all(identities["pool"](s) for s in shard_stats)
    letters = pool.dead_letters(0, 99)
    assert sorted(letter.payload[0][0] for letter in letters) == failing
    assert all("bad" in letter.error for letter in letters)


def test_a_sharded_coalescing_pool_merges_due_calls_on_their_shard(app, worker, wait_for):
    """Every pop of a coalescing pool takes the general script (MIXED); due calls join their
    equal entries (UPKEEP) on the shard their payload hashes to."""
    seen = []

    @app.task(base=PoolTask, pool_size=100, pool_shards=2, pool_coalesce=True, bind=True)
    def merged(self, key, count=1):
        seen.append((key, count))

    for n in range(12):
        merged.delay(f"k{n % 4}")
    for n in range(8):
        merged.apply_async((f"k{n % 4}",), countdown=0.2)
    pool = merged.pool
    with worker(app):
        wait_for(lambda: pool.stats().processed == 20, timeout=60, message="20 calls done")
    counts = {}
    for key, count in seen:
        counts[key] = counts.get(key, 0) + count
    assert counts == {"k0": 5, "k1": 5, "k2": 5, "k3": 5}
    stats = pool.stats()
    assert (stats.depth, stats.in_flight, stats.delayed, stats.offered) == (0, 0, 0, 20)


def test_a_sharded_bucket_drains_due_and_retried_items_exactly(app, worker, wait_for, identities):
    """Delayed items and retries (bucket_upkeep queues them) on some shards while others have
    items ready, drained by a real worker: each item runs once, or twice when it fails once."""
    runs = []

    @app.task(
        base=BucketTask,
        bucket_key=lambda i: f"k{i % 6}",
        bucket_rate="1000/s",
        bucket_shards=3,
        autoretry_for=(ValueError,),
        default_retry_delay=0.05,
    )
    def fetch(i):
        runs.append(i)
        if i % 7 == 0 and runs.count(i) == 1:
            raise ValueError(f"once {i}")

    bucket = fetch.bucket
    for i in range(30):
        fetch.delay(i)
    for i in range(30, 48):
        fetch.apply_async((i,), countdown=0.2)
    with worker(app):
        wait_for(lambda: bucket.stats().processed == 48, timeout=60, message="48 processed")
    again = [i for i in range(48) if i % 7 == 0]
    assert sorted(runs) == sorted(list(range(48)) + again)
    stats = bucket.stats()
    assert (stats.depth, stats.in_flight, stats.delayed, stats.dead) == (0, 0, 0, 0)
    assert identities["bucket"](stats)
    parts = [s.stats() for s in bucket.shards]
    assert stats.processed == sum(p.processed for p in parts)
    assert stats.enqueued == sum(p.enqueued for p in parts)


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_a_sharded_structure_lists_its_dead_letters_as_a_plain_one_does(
    kind, redqueue_redis, redqueue_prefix
):
    """``dead_letters(start, stop)`` reads like LRANGE: a negative index counts from the end,
    so ``(0, -1)`` is every letter. On main a sharded structure turned (0, -1) into a page of
    no letters (``stop - start + 1``), so its dead letters looked gone."""

    def make(shards):
        name = f"{kind}{shards}"
        if kind == "pool":
            return CappedPool(
                redqueue_redis,
                name,
                100,
                shards=shards,
                prefix=redqueue_prefix,
                delivery="at_least_once",
                max_receives=1,
            )
        return LeakyBucket(
            redqueue_redis, name, shards=shards, prefix=redqueue_prefix, default_rate="1000/s"
        )

    def bury_six(structure):
        if kind == "pool":
            structure.add_many(range(6))
            while batch := structure.pop(1):
                structure.ack(batch, failures={0: f"bad {batch.items[0].payload}"})
        else:
            structure.enqueue_many([(f"k{n}", n) for n in range(6)])
            for _ in range(6):
                reservation = take(structure)
                structure.dead_letter(reservation, f"bad {reservation.payload}")

    plain, sharded = make(1), make(3)
    for structure in (plain, sharded):
        bury_six(structure)
        assert structure.stats().dead == 6
    assert len(plain.dead_letters(0, -1)) == 6
    for start, stop in [(0, -1), (2, -1), (0, -3), (-2, -1), (1, 3)]:
        want = len(plain.dead_letters(start, stop))
        assert len(sharded.dead_letters(start, stop)) == want, (start, stop)
    errors = sorted(letter.error for letter in sharded.dead_letters(0, -1))
    assert errors == [f"bad {n}" for n in range(6)]


def test_a_sharded_pop_sent_again_with_its_batch_id_returns_the_same_batch(
    redqueue_redis, redqueue_prefix
):
    """``pop(batch_id=...)`` of a batch still in flight pops nothing and returns that batch
    (what makes a pop whose reply was lost safe to send again). On main a sharded pool swept
    on to the next shard and popped a second batch there, left in flight until the reaper."""
    pool = CappedPool(
        redqueue_redis, "r", 100, shards=2, prefix=redqueue_prefix, delivery="at_least_once"
    )
    n = 0
    while not all(shard.stats().depth >= 3 for shard in pool.shards):
        pool.add(n)
        n += 1
    first = pool.pop(3, batch_id="b1")
    assert first.calls == 3
    for again_id in ("b1", first.id):  # the id the caller chose, or the one it was told
        again = pool.pop(3, batch_id=again_id)
        assert again.id == first.id
        assert [i.payload for i in again.items] == [i.payload for i in first.items]
        assert pool.stats().in_flight == 3
    assert pool.ack(first)
    while batch := pool.pop(10):
        assert pool.ack(batch)
    stats = pool.stats()
    assert (stats.processed, stats.in_flight, stats.depth) == (n, 0, 0)


def test_a_drain_that_dies_after_bucket_upkeep_strands_nothing(redqueue_redis, make_bucket):
    """A drain killed between bucket_upkeep (due items queued) and its next poll."""
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([("k1", 1), ("k2", 2)], delay=0.001)
    time.sleep(0.01)
    redqueue_redis.set(bucket.keys("drains"), 1, px=60_000)  # the drain's flag, as it ran
    assert bucket._run("bucket_upkeep", []) == 0  # ... and died here
    assert (bucket.stats().depth, bucket.stats().delayed) == (2, 0)
    assert not bucket.reap().drain_needed  # its flag still holds
    redqueue_redis.pexpire(bucket.keys("drains"), 1)
    time.sleep(0.01)
    assert bucket.reap().drain_needed
    payloads = []
    for _ in range(2):
        reservation = take(bucket)
        payloads.append(reservation.payload)
        assert bucket.commit(reservation)
    assert sorted(payloads) == [1, 2]
    stats = bucket.stats()
    assert (stats.enqueued, stats.processed, stats.depth, stats.in_flight) == (2, 2, 0, 0)


def test_a_named_dead_letter_of_a_sharded_pool_is_requeued_once(redqueue_redis, redqueue_prefix):
    """Two shards can hold byte-identical letters (equal calls failing with the same error in
    the same millisecond, as one reaper pass over the shards writes them). Naming one letter
    acts on one; on main every shard holding those bytes requeued its copy."""
    pool = CappedPool(
        redqueue_redis, "twins", 100, shards=2, prefix=redqueue_prefix, max_receives=1
    )
    info = {"count": 1, "receives": 1, "error": "batch not acknowledged", "at": 1}
    raw = json.dumps(info).encode() + b"\n" + pool.encode([[7], {}])

    def bury_twins():
        for shard in pool.shards:  # as pool_bury writes them
            redqueue_redis.rpush(shard.keys("dead"), raw)
            redqueue_redis.hincrby(shard.keys("stats"), "dead", 1)

    bury_twins()
    assert len(pool.dead_letters()) == 2
    assert pool.requeue_dead(pool.dead_letters(0, 0)) == 1
    assert (pool.stats().dead, pool.stats().depth, len(pool.dead_letters())) == (1, 1, 1)
    bury_twins()
    assert pool.requeue_dead(pool.dead_letters()) == 3  # all three listed: each once
    assert pool.purge_dead() == 0
    stats = pool.stats()
    assert (stats.dead, stats.depth) == (0, 4)
