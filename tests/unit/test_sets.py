"""SortedSet, TimeSortedSet and ScheduledSet against a real Redis."""

import datetime
import json
import multiprocessing
import random
import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from celery_redqueue import Serializer
from celery_redqueue.errors import ConfigurationError, RedisUnavailableError, SerializationError
from celery_redqueue.structures.sets import (
    ScheduledSet,
    SortedSet,
    TimeSortedSet,
    UndecodableItemsError,
)


@pytest.fixture
def make(redqueue_redis, redqueue_prefix):
    def make(cls=SortedSet, name="s", **kwargs):
        return cls(redqueue_redis, name, prefix=redqueue_prefix, **kwargs)

    return make


def server_now(client):
    seconds, micros = client.time()
    return seconds + micros / 1e6


# SortedSet


def test_explicit_score_of_zero_is_kept(make):
    s = make(scorer=lambda item: 100)
    assert s.add("a", score=5) == 5
    assert s.add("b", score=0) == 0
    assert s.add("c") == 100
    assert s.score("b") == 0.0
    assert s.score("c") == 100.0
    assert s.take(3) == ["b", "a", "c"]


def test_default_score_is_zero_and_scorer_decides_otherwise(make):
    plain = make(name="plain")
    plain.add("x")
    assert plain.score("x") == 0.0
    by_length = make(name="len", scorer=len)
    for word in ["ccc", "a", "bb"]:
        by_length.add(word)
    assert by_length.take(10) == ["a", "bb", "ccc"]


def test_negative_and_infinite_scores_order_correctly(make):
    s = make()
    s.add("inf", score=float("inf"))
    s.add("neg", score=-2.5)
    s.add("zero", score=0)
    s.add("ninf", score=float("-inf"))
    assert s.take(4) == ["ninf", "neg", "zero", "inf"]


def test_add_updates_the_score_of_an_equal_item(make):
    s = make()
    s.add({"a": 1, "b": 2}, score=3)
    s.add({"b": 2, "a": 1}, score=1)  # same item, keys in another order
    assert len(s) == 1
    assert s.score({"a": 1, "b": 2}) == 1.0


def test_len_contains_discard_clear(make, redqueue_redis):
    s = make()
    assert len(s) == 0 and "x" not in s
    s.add("x", 1)
    s.add("y", 2)
    assert len(s) == 2 and "x" in s and "z" not in s
    assert s.discard("x") is True
    assert s.discard("x") is False
    assert "x" not in s and len(s) == 1
    assert s.clear() is True  # redset's contract: whether anything was deleted
    assert len(s) == 0
    assert not redqueue_redis.exists(s.key)
    assert s.clear() is False


def test_peek_and_peek_score_leave_items_in_place(make):
    s = make()
    with pytest.raises(KeyError):
        s.peek()
    assert s.peek_score() is None
    s.add("b", 2)
    s.add("a", 1)
    s.add("c", 3)
    assert s.peek() == "a"
    assert s.peek(2) == "c"
    assert s.peek_score() == 1.0
    with pytest.raises(KeyError):
        s.peek(3)
    assert len(s) == 3


def test_pop_and_take(make):
    s = make()
    with pytest.raises(KeyError):
        s.pop()
    assert s.take(5) == []
    for i in range(5):
        s.add(i, score=i)
    assert s.pop() == 0
    assert s.take(0) == []
    assert s.take(-1) == []  # redset's: n <= 0 takes nothing
    assert s.take(3) == [1, 2, 3]
    assert s.take(10) == [4]
    with pytest.raises(KeyError):
        s.pop()


def test_json_round_trips(make):
    s = make()
    items = [
        {"nested": {"list": [1, 2.5, None, True], "text": "ünïcødé ✓"}},
        [1, "two", [3]],
        "plain",
        42,
        3.25,
        None,
        datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.timezone.utc),
    ]
    for score, item in enumerate(items):
        s.add(item, score=score)
    assert s.take(len(items)) == items


class Upper(Serializer):
    """A serializer that is not JSON: any object with dumps/loads will do (subclassing the
    public protocol, as redset's users subclass redset.interfaces.Serializer, is optional)."""

    def dumps(self, obj):
        return "U:" + obj.upper()

    def loads(self, data):
        assert isinstance(data, str)  # text, as redset passed it: a redset serializer works
        assert data.startswith("U:")
        return data[2:].lower()


def test_custom_serializer_objects(make, redqueue_redis):
    s = make(serializer=Upper())
    s.add("hello", 1)
    assert redqueue_redis.zrange(s.key, 0, -1) == [b"U:HELLO"]
    assert "hello" in s
    assert s.pop() == "hello"
    stdlib = make(name="stdlib", serializer=json)  # a module with dumps/loads works as is
    stdlib.add({"k": [1, 2]}, 1)
    assert stdlib.pop() == {"k": [1, 2]}


def test_redset_positional_order_and_str_serializer(redqueue_redis, redqueue_prefix):
    """redset's constructor order (client, name, scorer, serializer) and, with one argument,
    its default of str in, text out."""
    s = SortedSet(redqueue_redis, "redset", lambda item: -item, "str", redqueue_prefix)
    for i in range(3):
        s.add(i)
    assert redqueue_redis.zrange(s.key, 0, -1) == [b"2", b"1", b"0"]
    assert s.peek() == "2" and 1 in s and "1" in s
    assert s.take(3) == ["2", "1", "0"]


def test_a_custom_serializer_reads_non_utf8_members_as_undecodable(make, redqueue_redis):
    s = make(serializer=Upper())
    s.add("ok", 1)
    redqueue_redis.zadd(s.key, {b"U:\xff": 2})
    with pytest.raises(UndecodableItemsError) as caught:
        s.take(10)
    assert caught.value.items == ["ok"] and caught.value.raw == [b"U:\xff"]


def test_undecodable_members_are_reported_not_lost(make, redqueue_redis):
    s = make()
    s.add("good", 1)
    redqueue_redis.zadd(s.key, {b"\xff not json": 2})
    s.add("also good", 3)
    with pytest.raises(UndecodableItemsError) as caught:
        s.take(10)
    assert caught.value.items == ["good", "also good"]
    assert caught.value.raw == [b"\xff not json"]
    assert isinstance(caught.value, SerializationError)
    assert len(s) == 0


def test_bad_input_is_refused_and_stores_nothing(make, redqueue_redis):
    s = make()
    for bad in ["1", True, float("nan"), object(), [1]]:
        with pytest.raises(ConfigurationError):
            s.add("x", score=bad)
    with pytest.raises(SerializationError):
        s.add(object(), score=1)
    with pytest.raises(ConfigurationError, match="scorer result"):
        make(name="bad-scorer", scorer=lambda item: "high").add("x")
    assert not redqueue_redis.exists(s.key)
    for bad_count in [1.5, True, "3", None]:
        with pytest.raises(ConfigurationError):
            s.take(bad_count)
    with pytest.raises(ConfigurationError):
        s.peek(-1)
    with pytest.raises(ConfigurationError):
        make(scorer="not callable")
    with pytest.raises(ConfigurationError):
        make(serializer=42)
    with pytest.raises(ConfigurationError):
        make(name="a{b}")


def test_concurrent_threads_pop_each_item_once(make):
    s = make()
    for i in range(600):
        s.add(i, score=random.random())
    seen = []
    lock = threading.Lock()

    def consume():
        while True:
            batch = s.take(random.randint(1, 7))
            if not batch:
                return
            with lock:
                seen.extend(batch)

    threads = [threading.Thread(target=consume) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(600))


# TimeSortedSet


def test_time_sorted_set_is_first_in_first_out_by_server_time(make, redqueue_redis):
    s = make(TimeSortedSet)
    before = server_now(redqueue_redis)
    scores = [s.add(f"item-{i}") for i in range(20)]
    after = server_now(redqueue_redis)
    assert scores == sorted(scores)
    assert before <= scores[0] and scores[-1] <= after
    assert s.score("item-0") == pytest.approx(scores[0], abs=1e-5)
    assert s.take(20) == [f"item-{i}" for i in range(20)]


def test_time_sorted_set_honours_explicit_scores_and_scorers(make):
    s = make(TimeSortedSet)
    s.add("now")
    s.add("first", score=0)
    assert s.take(2) == ["first", "now"]
    scored = make(TimeSortedSet, name="scored", scorer=lambda item: item["at"])
    scored.add({"at": 20})
    scored.add({"at": 10})
    assert scored.take(2) == [{"at": 10}, {"at": 20}]


# ScheduledSet


def test_scheduled_items_are_hidden_until_due(make, redqueue_redis):
    s = make(ScheduledSet)
    due_at = s.add("later", delay=3600)
    assert due_at == pytest.approx(server_now(redqueue_redis) + 3600, abs=60)
    s.add("past", score=server_now(redqueue_redis) - 10)
    s.add("zero", score=0)
    s.add("backdated", delay=-5)
    assert len(s) == 4
    assert s.available() == 3
    assert s.peek() == "zero"
    assert s.peek(2) == "backdated" or s.peek(2) == "past"
    with pytest.raises(KeyError):
        s.peek(3)  # "later" is not due
    assert sorted(s.take(10)) == ["backdated", "past", "zero"]
    assert s.take(10) == []
    with pytest.raises(KeyError):
        s.pop()
    assert s.available() == 0
    assert len(s) == 1
    assert s.peek_score() == pytest.approx(due_at)  # when the next one will be due
    assert "later" in s


def test_scheduled_item_becomes_available(make, wait_for):
    s = make(ScheduledSet)
    s.add("soon", delay=0.3)
    assert s.take(1) == []
    wait_for(lambda: s.available() == 1, timeout=10, message="item due")
    assert s.pop() == "soon"


def test_scheduled_default_is_due_now(make):
    s = make(ScheduledSet)
    s.add("now")
    assert s.available() == 1
    assert s.pop() == "now"


def test_scheduled_set_bad_input(make):
    s = make(ScheduledSet)
    with pytest.raises(ConfigurationError):
        s.add("x", score=1, delay=1)
    for bad in [float("inf"), float("nan"), "5", True]:
        with pytest.raises(ConfigurationError):
            s.add("x", delay=bad)
    assert len(s) == 0


def _consume_scheduled(url, prefix, seen_key, future):
    client = redis.Redis.from_url(url)
    s = ScheduledSet(client, "jobs", prefix=prefix)
    rng = random.Random()
    while True:
        items = s.take(rng.randint(1, 9))
        if items:
            client.rpush(seen_key, *[json.dumps(i) for i in items])
        elif len(s) <= future:
            return  # only items that are not due for an hour remain


def test_concurrent_consumers_get_each_due_item_exactly_once(
    make, redqueue_server_url, redqueue_redis, redqueue_prefix
):
    s = make(ScheduledSet, name="jobs")
    due_now = list(range(1500))
    due_soon = list(range(1500, 1800))
    future = list(range(1800, 1900))
    for i in due_now:
        s.add(i, score=i)  # long past: every score is a 1970 timestamp
    for i in due_soon:
        s.add(i, delay=random.uniform(0.0, 1.0))  # become due while the consumers run
    for i in future:
        s.add(i, delay=3600)
    seen_key = f"{redqueue_prefix}:seen"
    ctx = multiprocessing.get_context("spawn")
    workers = [
        ctx.Process(
            target=_consume_scheduled,
            args=(redqueue_server_url, redqueue_prefix, seen_key, len(future)),
        )
        for _ in range(4)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    seen = [json.loads(x) for x in redqueue_redis.lrange(seen_key, 0, -1)]
    assert len(seen) == len(set(seen)), "an item was delivered twice"
    assert sorted(seen) == due_now + due_soon
    assert len(s) == len(future) and s.available() == 0


# Keys and errors


def test_keys_share_one_hash_tag(make, redqueue_redis, redqueue_prefix):
    for cls in (SortedSet, TimeSortedSet, ScheduledSet):
        s = make(cls, name="jobs")
        s.add("x")
        s.take(1)
        s.add("y", 5)
    keys = {k.decode() for k in redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")}
    assert keys == {f"{redqueue_prefix}:{{set:jobs}}:items"}


def test_unreachable_redis_raises_a_package_error():
    client = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    for cls in (SortedSet, TimeSortedSet, ScheduledSet):
        s = cls(client, "s")
        with pytest.raises(RedisUnavailableError):
            s.add("x")
        with pytest.raises(RedisUnavailableError):
            s.pop()
        with pytest.raises(RedisUnavailableError):
            len(s)
    with pytest.raises(RedisUnavailableError):
        ScheduledSet(client, "s").available()
