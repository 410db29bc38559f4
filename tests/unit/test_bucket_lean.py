"""A bucket's single-item enqueue (``bucket_enqueue``'s plain path, the path of a task's
``.delay()``) does what the script's general path does for one item: the same statuses, drain
plans, stored items, ids, ready keys, ages and flow, with enqueued and depth counted in one
folded field that every reader adds back."""

import time

import pytest

from celery_redqueue import RedQueueError
from celery_redqueue.redis.lua import script


def identity_holds(stats):
    """Every item enqueued is in exactly one place (a requeued dead letter leaves ``dead`` for
    ``depth``, so it is not counted again)."""
    return stats.enqueued == (
        stats.depth + stats.in_flight + stats.processed + stats.dead + stats.evicted + stats.purged
    )


def raw_counters(client, bucket):
    return {k.decode(): int(v) for k, v in client.hgetall(bucket.keys("stats")).items()}


def flow_in(client, bucket):
    """Items counted "in" by the flow counters (per-second fields; nothing is rolled yet)."""
    return sum(
        int(v) for k, v in client.hgetall(bucket.keys("flow")).items() if k.startswith(b"in:")
    )


def batch_enqueue(bucket, key, payload):
    """One item in the general form (as ``enqueue`` sent it before the plain path)."""
    reply = bucket._run(
        "bucket_enqueue", [bucket.dedupe_window_ms, key, bucket.encode(payload), "", 0, "", 0]
    )
    return int(reply[0]), int(reply[1]) >= 0, int(reply[2])


def plain_enqueue(bucket, key, payload):
    result = bucket.enqueue(key, payload)
    status = 0 if not result.kept else 2 if result.evicted_oldest else 1
    return int(result.drain_needed), result.wake_in is not None, status


def state(client, bucket):
    """What a bucket holds, without the times (the two buckets run a moment apart)."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros / 1000
    queues = {}
    tails = {k.decode(): int(v) for k, v in client.hgetall(bucket.keys("tails")).items()}
    heads = {k.decode(): int(v) for k, v in client.hgetall(bucket.keys("heads")).items()}
    for key in set(tails) | set(heads):
        slots = [
            client.hget(bucket.keys("items"), f"{key}\0{position}")
            for position in range(heads.get(key, 0), tails.get(key, 0))
        ]
        # receives:id:offered_at:payload; the offered time differs between the buckets.
        queues[key] = [slot.split(b":", 3)[:2] + slot.split(b":", 3)[3:] for slot in slots]
    return {
        "stats": bucket.stats().as_dict(),
        "queues": queues,
        # Which keys are eligible, and whether now or later (their times differ a little).
        "ready": {
            key: score <= now_ms
            for key, score in client.zrange(bucket.keys("ready"), 0, -1, withscores=True)
        },
        "ages": sorted(client.zrange(bucket.keys("ages"), 0, -1)),
        "drains": client.exists(bucket.keys("drains")),
        "wake": client.exists(bucket.keys("wake")),
        "in": flow_in(client, bucket),
    }


def scenario(bucket, enqueue):
    """The same steps on a bucket, each enqueue's (send_drain, wake planned, status) kept."""
    bucket.set_rate("b", "1/h", burst=1)  # a stored rate: "b" refills with a release in hand
    replies = [enqueue(bucket, "a", 1), enqueue(bucket, "a", 2), enqueue(bucket, "b", 3)]
    replies += [enqueue(bucket, "a", i) for i in range(4, 7)]  # past a cap of 3 on "a"
    first = bucket.dequeue().reservation  # "a" waits a minute now (rate 1/m)
    replies.append(enqueue(bucket, "a", 7))  # ordered: "a" waits for its item in flight
    second = bucket.dequeue().reservation
    bucket.commit(second)
    # No drain job running, nothing eligible now: the next enqueue schedules a wake-up...
    bucket.client.delete(bucket.keys("drains"), bucket.keys("wake"))
    replies.append(enqueue(bucket, "a", 8))
    # ...and the one after it finds it scheduled.
    replies.append(enqueue(bucket, "a", 9))
    bucket.commit(first)
    replies.append(enqueue(bucket, "c", 10))  # a new key, eligible now: a drain job
    third = bucket.dequeue().reservation
    bucket.commit(third)
    # Keys that emptied and refill keep their schedule: "c" waits its interval (unless the
    # default burst covers it), "b" has a release in hand (its stored burst of 1).
    replies += [enqueue(bucket, "c", 11), enqueue(bucket, "b", 12)]
    return replies


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_depth": 3},
        {"max_depth": 3, "overflow": "drop_oldest"},
        {"ordered": True},
        {"default_burst": 2},
    ],
    ids=["plain", "reject", "drop_oldest", "ordered", "burst"],
)
def test_plain_enqueue_does_what_the_batch_script_does(make_bucket, redqueue_redis, options):
    plain = make_bucket("plain", default_rate="1/m", **options)
    batch = make_bucket("batch", default_rate="1/m", **options)
    plain_replies = scenario(plain, plain_enqueue)
    batch_replies = scenario(batch, batch_enqueue)
    assert plain_replies == batch_replies
    assert state(redqueue_redis, plain) == state(redqueue_redis, batch)
    assert identity_holds(plain.stats())
    # The plain path bumped the folded field, the general path the named counters.
    assert "enqueued+depth" in raw_counters(redqueue_redis, plain)
    assert "enqueued+depth" not in raw_counters(redqueue_redis, batch)


def test_the_scenario_covers_every_drain_plan(make_bucket):
    """The comparison above is only worth what its scenario exercises."""
    bucket = make_bucket("plain", default_rate="1/m")
    replies = scenario(bucket, plain_enqueue)
    assert replies[0] == (1, False, 1)  # eligible now: send a drain job
    assert replies[1] == (0, False, 1)  # the flag is held
    assert replies[-5] == (0, True, 1)  # nothing eligible now: a wake-up is planned
    assert replies[-4] == (0, False, 1)  # one is planned no later
    assert replies[-3] == (1, False, 1)  # "c" is eligible now and no job holds the flag
    ready = dict(bucket.client.zrange(bucket.keys("ready"), 0, -1, withscores=True))
    assert ready[b"b"] < ready[b"c"] - 30_000  # "b" now, "c" in a minute
    capped = scenario(make_bucket("capped", default_rate="1/m", max_depth=3), plain_enqueue)
    assert [status for *_, status in capped[:6]] == [1, 1, 1, 1, 0, 0]
    dropping = make_bucket("dropping", default_rate="1/m", max_depth=3, overflow="drop_oldest")
    dropping = scenario(dropping, plain_enqueue)
    assert [status for *_, status in dropping[:6]] == [1, 1, 1, 1, 2, 2]


def test_folded_counters_keep_the_identity_through_a_full_cycle(make_bucket, redqueue_redis):
    bucket = make_bucket(default_rate="1000000/s", max_receives=1, visibility_timeout=0.05)
    for i in range(6):
        assert bucket.enqueue(f"k{i % 2}", i).kept
    bucket.enqueue_many([("k0", "batch-1"), ("k1", "batch-2")])
    assert identity_holds(bucket.stats())
    raw = raw_counters(redqueue_redis, bucket)
    # Six single items in the folded field, the batch of two in the named counters.
    assert (raw["enqueued+depth"], raw["enqueued"], raw["depth"]) == (6, 2, 2)
    committed = bucket.dequeue().reservation
    assert bucket.commit(committed)
    assert bucket.dead_letter(bucket.dequeue().reservation, "boom")
    retried = bucket.dequeue().reservation
    assert bucket.retry_later(retried)
    assert bucket.dequeue().reservation  # held past its timeout: dead-lettered (max_receives 1)
    time.sleep(0.1)
    assert bucket.reap().dead_lettered == 1
    assert bucket.requeue_dead(limit=1) == 1
    stats = bucket.stats()
    assert stats.enqueued == 8 and stats.processed == 1 and stats.requeued == 1
    assert stats.dead == 1 and stats.depth == 6 and stats.in_flight == 0 and stats.evicted == 0
    assert identity_holds(stats)
    # Readers of the raw hash add the folded field back: figures, key by key and in total.
    assert (
        bucket.figures().depth
        == stats.depth
        == sum(bucket.key_stats(key).depth for key in ("k0", "k1"))
    )
    assert raw_counters(redqueue_redis, bucket)["depth"] == stats.depth - 6  # decrements


@pytest.mark.parametrize("overflow", ["reject", "drop_oldest"])
def test_a_full_key_counts_every_item_exactly(make_bucket, redqueue_redis, overflow):
    bucket = make_bucket(max_depth=2, overflow=overflow, default_rate="1000000/s")
    results = [bucket.enqueue("k", i) for i in range(7)]
    bucket.enqueue("other", "x")
    stats = bucket.stats()
    if overflow == "reject":
        assert [r.kept for r in results] == [True] * 2 + [False] * 5
        assert (stats.enqueued, stats.rejected, stats.evicted) == (3, 5, 0)
        kept = [0, 1]
    else:
        assert [r.evicted_oldest for r in results] == [False] * 2 + [True] * 5
        assert (stats.enqueued, stats.rejected, stats.evicted) == (8, 0, 5)
        kept = [5, 6]
    assert stats.depth == 3 and identity_holds(stats)
    assert flow_in(redqueue_redis, bucket) == 8  # every offer, kept or not
    assert bucket.figures().depth == 3
    taken = []
    while (reservation := bucket.dequeue().reservation) is not None:
        taken.append(reservation.payload)
        bucket.commit(reservation)
    assert sorted(taken, key=str) == sorted([*kept, "x"], key=str)
    stats = bucket.stats()
    assert stats.depth == 0 and stats.processed == 3 and identity_holds(stats)


def test_ids_stay_unique_across_single_items_batches_and_delays(make_bucket, redqueue_redis):
    bucket = make_bucket(default_rate="1000000/s")
    bucket.enqueue("k", "single")
    bucket.enqueue_many([("k", "batch"), ("j", "batch")])
    bucket.enqueue("k", "delayed", delay=0.001)
    bucket.enqueue("j", "single")
    assert int(redqueue_redis.hget(bucket.keys("stats"), "seq")) == 5
    ids = set()
    for _ in range(4):
        ids.add(bucket.dequeue().reservation.id.split(".")[0])
    assert len(ids) == 4


def test_a_new_key_with_a_malformed_rate_is_refused_and_nothing_is_stored(
    make_bucket, redqueue_redis
):
    bucket = make_bucket()
    bucket.enqueue("k", "kept")
    redqueue_redis.hset(bucket.keys("rates"), "bad", b"1000 -1")
    before = {k: redqueue_redis.dump(k) for k in redqueue_redis.keys(bucket.keys("*"))}
    with pytest.raises(RedQueueError, match="rate stored for bucket key bad is malformed"):
        bucket.enqueue("bad", "refused")
    after = {k: redqueue_redis.dump(k) for k in redqueue_redis.keys(bucket.keys("*"))}
    assert after == before


def test_a_sharded_bucket_takes_the_plain_path_on_each_shard(make_bucket, redqueue_redis):
    from celery_redqueue.structures.bucket import LeakyBucket

    bucket = LeakyBucket(redqueue_redis, "sharded", shards=3, prefix=make_bucket().keys.prefix)
    for i in range(30):
        assert bucket.enqueue(f"k{i}", i).kept
    folded = sum(
        raw_counters(redqueue_redis, shard).get("enqueued+depth", 0) for shard in bucket.shards
    )
    assert folded == 30
    stats = bucket.stats()
    assert (stats.enqueued, stats.depth) == (30, 30)


def evalshas(client):
    return client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)


@pytest.mark.parametrize("overflow", ["reject", "drop_oldest"])
def test_a_full_key_refuses_in_one_script_call(make_bucket, redqueue_redis, overflow):
    """Shedding load is what a capped key is for: a refused call costs one round trip, not two
    (and a call that drops the oldest item too: the general path takes it in the same call)."""
    bucket = make_bucket("full", default_rate="1/m", max_depth=2, overflow=overflow)
    bucket.enqueue("k", 1)
    bucket.enqueue("k", 2)
    before = evalshas(redqueue_redis)
    receipt = bucket.enqueue("k", 3)
    assert evalshas(redqueue_redis) - before == 1
    if overflow == "reject":
        assert not receipt and bucket.stats().rejected == 1
    else:
        assert receipt.evicted_oldest and bucket.stats().evicted == 1
    assert identity_holds(bucket.stats())


def test_a_call_without_a_tier_on_a_bucket_with_tiers_takes_the_general_path(
    make_bucket, redqueue_redis
):
    """Its tier-0 item joins the key's tier queues there (and in the same script call)."""
    bucket = make_bucket("tiers", default_rate="1000000/s", priority_bound=1)
    before = evalshas(redqueue_redis)
    assert bucket.enqueue("k", "plain").kept
    assert bucket.enqueue("k", "urgent", priority=5).kept
    assert evalshas(redqueue_redis) - before == 2
    assert "enqueued+depth" not in raw_counters(redqueue_redis, bucket)  # not the plain path
    assert [bucket.dequeue().reservation.payload for _ in range(2)] == ["urgent", "plain"]


def test_the_plain_path_returns_before_the_general_helpers_are_defined():
    """Lua defines a local function where the chunk reaches it: the plain path, which runs on
    every ``.delay()``, returns first, so it never defines bucket_append's helpers."""
    shipped = script("bucket_enqueue").source
    plain = shipped[: shipped.index("\n  return {send, wait, QUEUED}\nend\n")]
    assert "local function bucket_append(" not in plain
    assert "local function bucket_tier_heads(" not in plain
    assert "local function bucket_append(" in shipped
