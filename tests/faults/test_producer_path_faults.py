"""Fault hunt on the lean producer path (issue 12): the bound script's held connection under
timeouts and restarts, the flow counters (one HINCRBY per second, rolled once a minute) and the
cached JSON encoder. Real Redis servers throughout; every wait is bounded."""

import datetime
import decimal
import json
import re
import signal
import threading
import time
import uuid

import pytest
import redis

from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.errors import RedisUnavailableError, SerializationError
from celery_redqueue.redis.serializers import JSONSerializer
from celery_redqueue.structures.bucket import LeakyBucket
from celery_redqueue.structures.pool import CappedPool


def server_second(client):
    seconds, _micros = client.time()
    return int(seconds)


# --- flow counters -------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_whole_and_fractional_busy_seconds_in_one_second_both_count(make_pool, redqueue_redis):
    """ack(seconds=0.5) then ack(seconds=1.0) in the same server second: the second tick must
    add to the field the first one made a float, not fail the ack half-way."""
    pool = make_pool(capacity=100)
    for _attempt in range(10):
        for i in range(2):
            pool.add(i)
        first, second = pool.pop(1), pool.pop(1)
        before = server_second(redqueue_redis)
        # a failed attempt's acks may have landed in this second already: count what was there
        had = float(redqueue_redis.hget(pool.keys("flow"), f"busy:{before}") or 0)
        pool.ack(first, seconds=0.5)
        pool.ack(second, seconds=1.0)  # failed with "hash value is not an integer"
        if server_second(redqueue_redis) == before:
            break
    else:
        pytest.skip("could not fit two acks into one server second")
    busy = redqueue_redis.hget(pool.keys("flow"), f"busy:{before}")
    assert float(busy) - had == 1.5
    stats = pool.stats()
    assert stats.processed == stats.offered == 2 * (_attempt + 1)


@pytest.mark.timeout(60)
def test_fractional_then_whole_busy_on_a_bucket_too(make_bucket):
    bucket = make_bucket(default_rate="1000/s", default_burst=1000)
    for _attempt in range(10):
        bucket.enqueue("k", 1)
        bucket.enqueue("k", 2)
        first, second = bucket.dequeue().reservation, bucket.dequeue().reservation
        assert first is not None and second is not None
        before = server_second(bucket.client)
        had = float(bucket.client.hget(bucket.keys("flow"), f"busy:{before}") or 0)
        assert bucket.commit(first, seconds=0.25)
        assert bucket.commit(second, seconds=2.0)
        if server_second(bucket.client) == before:
            break
    else:
        pytest.skip("could not fit two commits into one server second")
    busy = bucket.client.hget(bucket.keys("flow"), f"busy:{before}")
    assert float(busy) - had == 2.25


@pytest.mark.timeout(60)
def test_old_minutes_roll_into_minute_fields_and_the_hash_stays_bounded(make_pool, redqueue_redis):
    """Three hours of second fields written directly, then one tick (an 'out'-only one: a
    consumer that never offers): the hour's minutes keep their exact sums (fractions too),
    everything older is gone."""
    pool = make_pool(capacity=100)
    pool.add("x")  # 'in' ticks now; from here only 'out' ticks
    batch = pool.pop(1)
    assert len(batch.items) == 1
    flow = pool.keys("flow")
    now_min = server_second(redqueue_redis) // 60
    fields = {}
    for minute in range(now_min - 180, now_min - 1):
        for second in (3, 17, 59):
            fields[f"out:{minute * 60 + second}"] = 2
            fields[f"busy:{minute * 60 + second}"] = 0.125
    redqueue_redis.hset(flow, mapping=fields)
    redqueue_redis.hset(flow, "rolled", now_min - 1)
    redqueue_redis.hdel(flow, *[f for f in redqueue_redis.hkeys(flow) if f.startswith(b"in:")])
    # One ack: the first 'out' tick of its second rolls.
    assert pool.ack(batch, seconds=0.5)
    names = [f.decode() for f in redqueue_redis.hkeys(flow)]
    assert len(names) < 3 * 61 + 3 * 120 + 3
    assert redqueue_redis.hget(flow, "rolled") is not None
    now_min = server_second(redqueue_redis) // 60
    for name in names:
        _kind, _, slot = name.partition(":")
        if slot.startswith("m"):
            assert int(slot[1:]) > now_min - 61, name
    history = pool.figures().history
    assert history is not None
    by_minute = dict(zip(history.minute_starts, history.minutes_out, strict=True))
    # Every rolled minute of the last hour (not the two newest) holds exactly 3 ticks of 2.
    for start in history.minute_starts[:-3]:
        assert by_minute[start] == 6.0, start
    busy = {
        int(n.decode().split(":m")[1]): float(v)
        for n, v in redqueue_redis.hgetall(flow).items()
        if n.startswith(b"busy:m")
    }
    assert busy and all(v == 0.375 for v in busy.values())


def test_figures_add_a_minute_field_to_its_unrolled_seconds(make_pool, redqueue_redis):
    pool = make_pool(capacity=100)
    now = server_second(redqueue_redis)
    minute = now // 60 - 1  # last minute: never rolled yet (rolling keeps two minutes)
    flow = pool.keys("flow")
    redqueue_redis.hset(
        flow,
        mapping={f"in:m{minute}": 5, f"in:{minute * 60 + 1}": 2, "rolled": now // 60},
    )
    history = pool.figures().history
    by_minute = dict(zip(history.minute_starts, history.minutes_in, strict=True))
    if server_second(redqueue_redis) // 60 == now // 60:
        assert by_minute[minute * 60] == 7.0


# --- the held connection --------------------------------------------------------------------


BUSY = """
local start = redis.call('TIME')
local from = start[1] * 1000000 + start[2]
while true do
  local t = redis.call('TIME')
  if t[1] * 1000000 + t[2] - from > tonumber(ARGV[1]) then return 1 end
end
"""


def stall(url, seconds):
    """Keep the server busy in a script for ``seconds`` (on a thread of its own): commands sent
    meanwhile are read and run after it, and their replies come late."""
    admin = redis.Redis.from_url(url, socket_timeout=30)
    thread = threading.Thread(target=admin.eval, args=(BUSY, 0, int(seconds * 1e6)))
    thread.start()
    time.sleep(0.1)  # the script has started
    return thread


@pytest.mark.timeout(60)
@pytest.mark.parametrize("late", ["pool.add", "bucket.enqueue", "pool.add(delay)"])
def test_a_timed_out_call_does_not_leave_its_reply_for_the_next_call(redqueue_server_url, late):
    """A call that times out while Redis is busy: Redis runs it later and its reply comes late.
    The next calls on the same thread get their own replies (of other lengths: three calls of
    add_many, two of enqueue_many), and the late call is stored at most once."""
    prefix = f"rqfault-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redqueue_server_url, socket_timeout=0.3)
    admin = redis.Redis.from_url(redqueue_server_url)
    try:
        pool = CappedPool(client, "p", 100, prefix=prefix)
        bucket = LeakyBucket(client, "b", prefix=prefix, default_rate="1000/s", default_burst=1000)
        assert pool.add("a").kept
        assert bucket.enqueue("k", "a").kept
        calls = {
            "pool.add": lambda: pool.add("late"),
            "bucket.enqueue": lambda: bucket.enqueue("k", "late"),
            "pool.add(delay)": lambda: pool.add("late", delay=600),
        }
        busy = stall(redqueue_server_url, 1.0)
        with pytest.raises(RedisUnavailableError):
            calls[late]()
        busy.join(timeout=30)
        many = pool.add_many(["x1", "x2", "x3"])
        assert [r.kept for r in many] == [True] * 3
        stored = bucket.enqueue_many([("k", "y1"), ("j", "y2")])
        assert [r.kept for r in stored] == [True] * 2
        assert pool.add("z").kept and bucket.enqueue("k", "z").kept
        stats, bstats = pool.stats(), bucket.stats()
        late_pool = int(late.startswith("pool"))
        late_bucket = int(late == "bucket.enqueue")
        assert 5 <= stats.offered + stats.delayed <= 5 + late_pool
        # A delayed call counts as offered only when due: the late one is delayed, if stored.
        assert stats.offered == stats.depth and stats.delayed <= int(late == "pool.add(delay)")
        assert 4 <= bstats.enqueued <= 4 + late_bucket
        payloads = sorted(item.payload for item in pool.pop(100).items)
        assert [p for p in payloads if p != "late"] == ["a", "x1", "x2", "x3", "z"]
    finally:
        for key in admin.scan_iter(f"{prefix}*"):
            admin.delete(key)
        client.close()
        admin.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("appendonly", [False, True])
@pytest.mark.parametrize("kill", [False, True])
def test_a_restart_under_a_held_connection_stores_the_next_call_once(appendonly, kill):
    with EmbeddedRedis(appendonly=appendonly) as server:
        client = redis.Redis.from_url(server.url)
        pool = CappedPool(client, "p", 100)
        bucket = LeakyBucket(client, "b", default_rate="1000/s", default_burst=1000)
        assert pool.add("a").kept and bucket.enqueue("k", "a").kept
        if appendonly:
            client.execute_command("CONFIG", "SET", "appendfsync", "always")
        server.restart(kill=kill)
        assert pool.add("b").kept
        assert bucket.enqueue("k", "b").kept
        survived = 1 if appendonly else 0
        stats = pool.stats()
        assert (stats.offered, stats.depth) == (1 + survived, 1 + survived)
        payloads = sorted(item.payload for item in pool.pop(10).items)
        assert payloads == (["a", "b"] if appendonly else ["b"])
        bstats = bucket.stats()
        assert bstats.enqueued == 1 + survived
        client.close()


# --- JSON -----------------------------------------------------------------------------------


class Text(str):
    pass


VALUES = [
    Text("sub"),
    {"k": Text("v")},
    [Text("a"), 1],
    {1: "int key", 2: "int key"},
    {True: 1},
    {None: 1},
    {1.5: "float key"},
    1.0,
    -0.0,
    1e300,
    float("inf"),
    float("nan"),
    2**100,
    decimal.Decimal("1.10"),
    datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    datetime.date(2026, 1, 2),
    uuid.UUID(int=5),
    "é\u2028\ud800",
    (1, 2),
    {"b": 1, "a": {"d": 2, "c": [3]}},
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_cached_encoder_writes_what_the_rebuilt_one_wrote(value):
    cached = JSONSerializer().dumps(value)
    rebuilt = JSONSerializer._encoder.encode(value).encode()
    assert cached == rebuilt


@pytest.mark.parametrize(
    "value",
    [b"bytes", {"a": object()}, {("t",): 1}, {1: "a", "b": 2}],
    # Without the object's address: pytest-xdist's workers must collect the same ids.
    ids=lambda value: re.sub(r" at 0x[0-9a-f]+", "", repr(value)),
)
def test_what_neither_encoder_takes_is_a_serialization_error(value):
    try:
        JSONSerializer._encoder.encode(value)
    except (TypeError, ValueError):
        rebuilt_refused = True
    else:
        rebuilt_refused = False
    if rebuilt_refused:
        with pytest.raises(SerializationError):
            JSONSerializer().dumps(value)
    else:
        assert JSONSerializer().dumps(value) == JSONSerializer._encoder.encode(value).encode()


def test_a_cycle_is_a_serialization_error_and_the_encoder_still_works():
    looped: list = []
    looped.append(looped)
    with pytest.raises(SerializationError):
        JSONSerializer().dumps(looped)
    assert json.loads(JSONSerializer().dumps({"ok": [1]})) == {"ok": [1]}


# --- accounting after mixes of the plain and the general scripts ---------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("policy", ["sample", "newest", "reject"])
@pytest.mark.parametrize("coalesce", [False, True])
def test_pool_identities_hold_after_a_mix_of_calls(make_pool, policy, coalesce):
    from celery_redqueue.ops.cli import identities

    pool = make_pool(
        f"mix-{policy}-{coalesce}", capacity=7, policy=policy, coalesce=coalesce, dedupe_window=60
    )
    for round_ in range(3):
        for i in range(6):
            pool.add(i % 4)  # plain; equal payloads coalesce where asked
        pool.add("d", dedupe_id=f"id{round_ % 2}")  # dedupe: rounds 0 and 2 share an id
        pool.add("late", delay=0.2)
        pool.add_many([f"m{i}" for i in range(5)])
        batch = pool.pop(3)
        pool.ack(batch, failures={0: "boom"} if batch.items else None, seconds=0.25)
    time.sleep(0.5)  # the delayed calls fall due and are offered by the next pops
    while (batch := pool.pop(5)).items:
        pool.ack(batch, seconds=1)
    counters = pool.stats().as_dict()
    for statement, left, right in identities("pool", counters):
        assert left == right, (statement, counters)
    assert counters["depth"] == counters["in_flight"] == 0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("overflow", ["reject", "drop_oldest"])
def test_bucket_identities_hold_after_a_mix_of_calls(make_bucket, overflow):
    from celery_redqueue.ops.cli import identities

    bucket = make_bucket(
        f"mix-{overflow}",
        default_rate="1000/s",
        default_burst=1000,
        max_depth=4,
        overflow=overflow,
        dedupe_window=60,
    )
    for round_ in range(3):
        for i in range(6):
            bucket.enqueue(f"k{i % 2}", i)
        bucket.enqueue("k0", "d", dedupe_id=f"id{round_ % 2}")
        bucket.enqueue("k1", "late", delay=0.2)
        bucket.enqueue_many([(f"k{i % 3}", i) for i in range(5)])
        reservation = bucket.dequeue().reservation
        assert reservation is not None
        bucket.commit(reservation, seconds=0.5)
    time.sleep(0.5)
    deadline = time.monotonic() + 30
    while (reservation := bucket.dequeue().reservation) is not None and time.monotonic() < deadline:
        bucket.commit(reservation, seconds=2)
    counters = bucket.stats().as_dict()
    for statement, left, right in identities("bucket", counters):
        assert left == right, (statement, counters)


@pytest.mark.timeout(60)
def test_a_connection_the_server_closed_while_idle_costs_nothing(redqueue_server_url):
    """Redis's `timeout` (hosted servers often set one) closes an idle held connection; the
    next call finds it closed, and is stored exactly once."""
    prefix = f"rqfault-{uuid.uuid4().hex[:8]}"
    admin = redis.Redis.from_url(redqueue_server_url)
    client = redis.Redis.from_url(redqueue_server_url)
    old = admin.config_get("timeout")["timeout"]
    try:
        pool = CappedPool(client, "p", 100, prefix=prefix)
        assert pool.add("a").kept
        admin.config_set("timeout", 1)
        deadline = time.monotonic() + 30
        # Wait until the server has closed the idle held connection (it checks a few times a
        # second): the only normal client left is this admin connection.
        while len(admin.client_list(_type="normal")) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
            admin.ping()
        admin.config_set("timeout", old)
        assert pool.add("b").kept
        stats = pool.stats()
        assert (stats.offered, stats.depth) == (2, 2)
    finally:
        admin.config_set("timeout", old)
        for key in admin.scan_iter(f"{prefix}*"):
            admin.delete(key)
        client.close()
        admin.close()


@pytest.mark.timeout(60)
def test_a_call_made_by_a_signal_handler_mid_call_gets_its_own_reply(redqueue_server_url):
    """A signal handler (or a finalizer the garbage collector runs) that makes a call while
    the same thread waits for another call's reply must not share the waiting connection:
    it would read the other call's reply, and the other call its reply."""
    prefix = f"rqfault-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redqueue_server_url, socket_timeout=30)
    admin = redis.Redis.from_url(redqueue_server_url)
    inner = []

    def handler(signum, frame):
        inner.append(pool.add("from the handler"))

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        pool = CappedPool(client, "p", 100, prefix=prefix)
        assert pool.add("a").kept  # this thread holds a connection now
        busy = stall(redqueue_server_url, 1.0)
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # while add_many below waits for Redis
        outer = pool.add_many(["x1", "x2", "x3"])
        busy.join(timeout=30)
        assert len(inner) == 1 and inner[0].kept
        assert [r.kept for r in outer] == [True] * 3
        stats = pool.stats()
        assert (stats.offered, stats.depth) == (5, 5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for key in admin.scan_iter(f"{prefix}*"):
            admin.delete(key)
        client.close()
        admin.close()


@pytest.mark.timeout(120)
def test_counts_and_rates_across_a_real_minute_boundary(make_pool, redqueue_redis):
    """Calls late in one server minute and early in the next: each minute of the history has
    its own, the last minute's seconds and the rate hold both (waits at most ~70 s)."""
    pool = make_pool(capacity=10_000)

    def wait_until(predicate):
        deadline = time.monotonic() + 75
        while not predicate(server_second(redqueue_redis)):
            assert time.monotonic() < deadline, "the server clock did not move"
            time.sleep(0.2)

    wait_until(lambda s: s % 60 >= 50)
    first = server_second(redqueue_redis)
    assert all(r.kept for r in pool.add_many(range(4))) and pool.add("one more").kept
    wait_until(lambda s: s // 60 > first // 60)
    assert all(r.kept for r in pool.add_many(range(3)))
    figures = pool.figures()
    now = server_second(redqueue_redis)
    assert now - first < 60, "too slow to check the rate"
    history = figures.history
    assert history.minutes_in[-1] == 3.0 and history.minutes_in[-2] == 5.0
    assert sum(history.seconds_in) == 8.0
    assert figures.rate_in == pytest.approx(8 / 60)
    assert int(redqueue_redis.hget(pool.keys("flow"), "rolled")) == now // 60
