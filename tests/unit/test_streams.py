"""EventStream on a real Redis: groups, at-least-once, dead letters, ordering, cap, seek."""

import time
from datetime import datetime, timezone

import pytest

from celery_redqueue import ConfigurationError, EventStream, SerializationError
from celery_redqueue.redis.client import make_client
from celery_redqueue.structures import base as base_module
from celery_redqueue.structures import streams as streams_module
from celery_redqueue.structures.catalog import open_structure, registered


@pytest.fixture
def make_stream(redqueue_redis, redqueue_prefix):
    def make(name="orders", **kwargs):
        return EventStream(redqueue_redis, name, prefix=redqueue_prefix, **kwargs)

    return make


def drain(stream, group, consumer="c1", count=100):
    """Read and acknowledge until nothing is handed out; returns the payloads in order."""
    seen = []
    while True:
        batch = stream.read(group, consumer, count)
        if batch.read_again:
            continue
        if not batch:
            return seen
        seen += [e.payload for e in batch.events]
        stream.ack(batch)


def test_every_group_reads_every_event_once(make_stream):
    stream = make_stream(groups=["sms", "slip", "points"])
    receipts = stream.publish_many([{"order": i} for i in range(25)])
    assert receipts[0].drain_needed and set(receipts[0].woken) == {"sms", "slip", "points"}
    assert not any(r.drain_needed for r in receipts[1:])
    assert len({r.id for r in receipts}) == 25
    for group in ("sms", "slip", "points"):
        assert drain(stream, group, count=7) == [{"order": i} for i in range(25)]
        figures = stream.group_figures(group)
        assert (figures.lag, figures.pending, figures.processed) == (0, 0, 25)
    assert stream.stats()["published"] == 25


def test_publish_arms_each_groups_drain_flag_once(make_stream, redqueue_redis):
    stream = make_stream(groups=["a", "b"])
    assert set(stream.publish(1).woken) == {"a", "b"}
    assert stream.publish(2).woken == ()  # flags held: no second drain job
    assert drain(stream, "a") == [1, 2]  # the empty read released a's flag
    assert stream.publish(3).woken == ("a",)
    ttl = redqueue_redis.pttl(stream.keys("group:b:drains"))
    assert 0 < ttl <= 15_000  # a short lease, not a flag that outlives a dead drain
    stream.release_drain("b")
    assert stream.publish(4).woken == ("b",)


def test_groups_past_the_cap_of_kept_calls_are_served_alike(make_stream, monkeypatch):
    # A group's keys and packed script calls are kept per group, but group names are caller
    # data (any name read, sought or found in Redis): past the cap they are built per call.
    monkeypatch.setattr(base_module, "MAX_FRONTS", 4)
    monkeypatch.setattr(streams_module, "MAX_FRONTS", 4)
    stream = make_stream(groups=["a"])
    stream.publish_many(range(3))
    for i in range(8):
        group = f"g{i}"
        stream.seek(group, "start")
        assert drain(stream, group) == [0, 1, 2]
        stream.renew(group, "c1")
        assert stream.group_figures(group).processed == 3
    assert drain(stream, "a") == [0, 1, 2]
    assert len(stream._keys_of_group) == 4
    assert sum(isinstance(kept, tuple) for kept in stream._fronts) == 4


def test_group_created_later_starts_at_the_end_and_can_replay(make_stream):
    stream = make_stream(groups=["first"])
    stream.publish_many(["e1", "e2"])
    late = make_stream()  # another process, knowing no groups
    assert drain(late, "late") == []
    stream.publish("e3")
    assert drain(stream, "late") == ["e3"]
    stream.seek("late", "start")
    assert drain(stream, "late") == ["e1", "e2", "e3"]
    assert drain(stream, "first") == ["e1", "e2", "e3"]


def test_seek_to_id_time_and_end(make_stream):
    stream = make_stream(groups=["g"])
    ids = [r.id for r in stream.publish_many([f"e{i}" for i in range(5)])]
    drain(stream, "g")
    stream.seek("g", ids[2])
    assert stream.group_figures("g").lag == 3
    assert drain(stream, "g") == ["e2", "e3", "e4"]
    stream.seek("g", "start")
    stream.seek("g", "end")
    assert drain(stream, "g") == []
    millis = int(ids[0].split("-")[0])
    stream.seek("g", datetime.fromtimestamp(millis / 1000, timezone.utc))
    assert drain(stream, "g") == [f"e{i}" for i in range(5)]
    stream.seek("g", (millis + 10**6) / 1000)  # a time after everything
    assert drain(stream, "g") == []
    # The epoch, and any time or id before the first entry, replay from the oldest kept entry
    # (seek(g, 0) raised a raw RedisCommandError: Redis has nothing before 0-0).
    before_first = datetime.fromtimestamp(millis / 1000 - 60, timezone.utc)
    for early in (
        0,
        0.0,
        -1,
        "0-0",
        "0-1",
        datetime(1960, 1, 1, tzinfo=timezone.utc),
        before_first,
    ):
        stream.seek("g", "end")
        assert stream.seek("g", early) == "0-0", early
        assert stream.group_figures("g").lag == 5, early
        assert drain(stream, "g") == [f"e{i}" for i in range(5)], early
    for bad in ("middle", "12-x", True, None, [1], float("nan"), float("-inf")):
        with pytest.raises(ConfigurationError):
            stream.seek("g", bad)


def test_unacknowledged_entries_are_claimed_after_the_visibility_timeout(make_stream):
    stream = make_stream(groups=["g"], visibility_timeout=0.05, max_receives=3)
    stream.publish_many(["a", "b"])
    first = stream.read("g", "dies", 10)
    assert [(e.payload, e.receives) for e in first.events] == [("a", 1), ("b", 1)]
    assert not stream.read("g", "other", 10)  # still within their visibility timeout
    time.sleep(0.1)
    # Claimed entries are handed out alone (one of them may have killed its consumer).
    again = [stream.read("g", "other", 10) for _ in range(2)]
    assert [[(e.payload, e.receives) for e in r.events] for r in again] == [[("a", 2)], [("b", 2)]]
    assert stream.ack(first).stale == 0  # the first consumer's ack still settles them ...
    assert [stream.ack(r).stale for r in again] == [1, 1]  # ... and the second finds them settled
    figures = stream.group_figures("g")
    assert (figures.processed, figures.redelivered, figures.pending) == (2, 2, 0)


def test_past_max_receives_an_entry_is_dead_lettered_with_the_reason(make_stream):
    stream = make_stream(groups=["g"], visibility_timeout=0.02, max_receives=2)
    stream.publish_many(["stuck", "fine"])
    for expected in (1, 2):
        batch = stream.read("g", "c", 1)
        assert [(e.payload, e.receives) for e in batch.events] == [("stuck", expected)]
        time.sleep(0.05)
    assert drain(stream, "g") == ["fine"]
    (letter,) = stream.dead_letters()
    assert (letter.payload, letter.receives, letter.key) == ("stuck", 2, "g")
    assert "not acknowledged after 2 receives" in letter.error
    assert stream.group_figures("g").dead == 1


def test_failures_retry_then_dead_letter_and_requeue_reaches_only_that_group(make_stream):
    stream = make_stream(groups=["g", "other"], max_receives=2)
    stream.publish_many(["poison", "ok"])
    for attempt in (1, 2):
        batch = stream.read("g", "c", 10)
        poison = next(e for e in batch.events if e.payload == "poison")
        assert poison.receives == attempt
        result = stream.ack(batch, failures={poison.id: f"ValueError: #{attempt}"})
        assert (result.retried, result.dead) == ((1, 0) if attempt == 1 else (0, 1))
    assert not stream.read("g", "c", 10)
    (letter,) = stream.dead_letters()
    assert (letter.payload, letter.error, letter.receives) == ("poison", "ValueError: #2", 2)
    assert drain(stream, "other") == ["poison", "ok"]
    assert stream.requeue_dead() == 1
    assert drain(stream, "g") == ["poison"]  # a new entry, addressed to g alone
    assert drain(stream, "other") == []
    assert stream.dead_letters() == []
    stream.publish("x")
    batch = stream.read("g", "c")
    stream.ack(batch, failures={batch.events[0].id: "boom"}, retry_in={batch.events[0].id: 30})
    assert not stream.read("g", "c")  # held back for its retry delay
    stream.ack(stream.read("g", "c"))


def test_retry_delay_is_kept(make_stream):
    stream = make_stream(groups=["g"], visibility_timeout=30)
    stream.publish("x")
    batch = stream.read("g", "c")
    stream.ack(batch, failures={batch.events[0].id: "boom"}, retry_in={batch.events[0].id: 0.05})
    assert not stream.read("g", "c")
    time.sleep(0.1)
    again = stream.read("g", "c")
    assert [(e.payload, e.receives) for e in again.events] == [("x", 2)]


def test_undecodable_entries_are_dead_lettered_at_once(make_stream, redqueue_redis):
    stream = make_stream(groups=["g"])
    stream.publish("good")
    redqueue_redis.xadd(stream.keys("events"), {"d": b"{not json", "n": 2})
    redqueue_redis.hset(stream.keys("stats"), "seq", 2)
    batch = stream.read("g", "c")
    assert [e.payload for e in batch.events] == ["good"]
    assert len(batch.undecodable) == 1
    result = stream.ack(batch)
    assert (result.processed, result.dead) == (1, 1)
    (letter,) = stream.dead_letters()
    assert letter.error == "undecodable payload" and letter.payload == b"{not json"


def test_processed_guard_skips_replayed_entries(make_stream):
    stream = make_stream(groups=["points"], processed_guard=60)
    stream.publish_many(["p1", "p2"])
    assert drain(stream, "points") == ["p1", "p2"]
    stream.seek("points", "start")
    assert drain(stream, "points") == []
    assert stream.group_figures("points").guard_skipped == 2


def test_a_read_that_only_skipped_says_read_again_and_keeps_the_flag(make_stream):
    stream = make_stream(groups=["points"], processed_guard=60)
    stream.publish_many(range(50))
    assert drain(stream, "points", count=5) == list(range(50))
    stream.publish(50)
    stream.seek("points", "start")
    skipped = stream.read("points", "c", 2)  # 10 passes of 2 skipped entries, 31 wait
    assert (len(skipped), skipped.read_again) == (0, True)
    assert stream.publish(51).woken == ()  # the drain still holds the flag
    assert drain(stream, "points", count=2) == [50, 51]


def test_ordered_group_holds_later_events_of_a_busy_key(make_stream):
    stream = make_stream(groups=["g"], ordered=True, key=lambda e: e["order"])
    stream.publish_many(
        [{"order": "A", "step": 1}, {"order": "A", "step": 2}, {"order": "B", "step": 1}]
    )
    first = stream.read("g", "c1", 10)
    assert [(e.payload["order"], e.payload["step"]) for e in first.events] == [("A", 1), ("B", 1)]
    assert first.events[0].key == "A"
    assert not stream.read("g", "c2", 10)  # A/2 waits for A/1
    result = stream.ack(first, failures={first.events[0].id: "boom"})
    assert result.retried == 1
    again = stream.read("g", "c2", 10)
    assert [(e.payload["step"], e.receives) for e in again.events] == [(1, 2)]  # A/1, not A/2
    stream.release_drain("g")  # as if the drain had ended: the ack must arm the flag itself
    result = stream.ack(again)
    assert result.drain_needed  # A/2 came free and the flag was armed for it
    last = stream.read("g", "c2", 10)
    assert [(e.payload["step"], e.receives) for e in last.events] == [(2, 1)]
    stream.ack(last)
    assert stream.group_figures("g").pending == 0


def test_ordered_held_entries_survive_the_visibility_timeout(make_stream):
    stream = make_stream(groups=["g"], ordered=True, visibility_timeout=0.02)
    stream.publish_many(["a1", "a2"], keys=["A", "A"])
    first = stream.read("g", "c1", 10)
    assert [e.payload for e in first.events] == ["a1"]
    time.sleep(0.05)
    again = stream.read("g", "c2", 10)  # a1 is claimed again; a2 stays held
    assert [(e.payload, e.receives) for e in again.events] == [("a1", 2)]
    stream.ack(again)
    assert [(e.payload, e.receives) for e in stream.read("g", "c2").events] == [("a2", 1)]


def test_cap_trims_and_counts_exactly(make_stream, redqueue_redis):
    stream = make_stream(groups=["reader", "idle"], maxlen=100)
    drain(stream, "reader")
    total = 0
    for chunk in range(6):
        receipts = stream.publish_many(range(chunk * 100, chunk * 100 + 100))
        total += sum(r.trimmed for r in receipts)
        if chunk == 0:
            assert drain(stream, "reader") == list(range(100))
    stats = stream.stats()
    assert stats["published"] == 600
    assert stats["trimmed"] == total > 0
    assert (
        stats["published"] - stats["trimmed"]
        == stats["length"]
        == redqueue_redis.xlen(stream.keys("events"))
    )
    seen = drain(stream, "reader")
    assert seen == list(range(600 - stats["length"], 600))
    figures = stream.group_figures("reader")
    assert figures.missed == 500 - stats["length"]  # trimmed before the reader got to them
    idle = stream.group_figures("idle")
    assert idle.lag == stats["length"]  # what it can still read
    drain(stream, "idle")
    assert stream.group_figures("idle").missed == stats["trimmed"]


def test_trimmed_while_pending_is_counted_lost(make_stream, redqueue_redis):
    stream = make_stream(groups=["g"], visibility_timeout=0.02)
    stream.publish_many(["a", "b"])
    stream.read("g", "dies", 1)
    redqueue_redis.xtrim(stream.keys("events"), maxlen=1, approximate=False)
    time.sleep(0.05)
    assert drain(stream, "g") == ["b"]
    figures = stream.group_figures("g")
    assert (figures.lost, figures.pending, figures.processed) == (1, 0, 1)


def test_heartbeat_keeps_entries_from_being_claimed(make_stream):
    stream = make_stream(groups=["g"], visibility_timeout=0.2)
    stream.publish("slow")
    batch = stream.read("g", "worker", 1)
    for _ in range(4):
        time.sleep(0.1)
        assert stream.renew("g", "worker", batch.ids) == 1
        assert not stream.read("g", "thief", 1)
    assert stream.renew("g", "somebody-else", batch.ids) == 0
    assert stream.ack(batch).processed == 1


def test_reap_wakes_groups_with_claimable_or_unread_entries(make_stream, redqueue_redis):
    woken = []
    stream = make_stream(groups=["g"], visibility_timeout=0.02, on_wake=woken.extend)
    stream.publish("x")
    assert woken == ["g"]
    stream.read("g", "dies")
    assert stream.reap().woken == 0  # its flag is still held by the (dead) drain
    redqueue_redis.delete(stream.keys("group:g:drains"))  # ... until it runs out
    time.sleep(0.05)
    result = stream.reap()
    assert (result.woken, result.drain_needed, woken) == (1, True, ["g", "g"])
    assert drain(stream, "g") == ["x"]
    assert stream.reap().woken == 0


def test_figures_and_registry(make_stream, redqueue_redis, redqueue_prefix):
    stream = make_stream(groups=["a", "b"], maxlen=1000)
    stream.publish_many(range(10))
    drain(stream, "a")
    batch = stream.read("b", "c", 4)
    fig = stream.group_figures("b")
    assert (fig.lag, fig.pending, fig.exists) == (6, 4, True)
    assert fig.oldest_pending_age is not None and fig.oldest_pending_age >= 0
    assert fig.rate_in > 0 and stream.group_figures("a").rate_out > 0
    stream.ack(batch)
    total = stream.figures()
    assert (total.depth, total.in_flight, total.offered, total.processed) == (6, 0, 10, 14)
    ((kind, name, settings),) = registered(redqueue_redis, redqueue_prefix)
    assert (kind, name, settings["maxlen"]) == ("stream", "orders", 1000)
    reopened = open_structure(redqueue_redis, redqueue_prefix, kind, name, settings)
    assert reopened.group_figures("b").lag == 6
    stream.clear()
    left = redqueue_redis.keys(f"{redqueue_prefix}:{{stream:orders}}:*")
    assert left == [f"{redqueue_prefix}:{{stream:orders}}:meta".encode()]  # as pools keep it


def test_bad_input_raises_at_the_call_and_stores_nothing(make_stream, redqueue_redis):
    stream = make_stream(groups=["g"], key=lambda e: e["id"])
    with pytest.raises(SerializationError):
        stream.publish_many([{"id": "1"}, {"id": "2", "x": object()}])
    with pytest.raises(ConfigurationError, match="key function"):
        stream.publish_many([{"id": "1"}, {"no": "id"}])
    with pytest.raises(ConfigurationError, match="partition key"):
        stream.publish({"id": "1"}, key="")
    with pytest.raises(ConfigurationError, match="keys names"):
        stream.publish_many([1, 2], keys=["a"])
    assert stream.stats()["published"] == 0
    assert redqueue_redis.xlen(stream.keys("events")) == 0
    for bad in ({"maxlen": 0}, {"visibility_timeout": 0}, {"max_receives": 0}):
        with pytest.raises(ConfigurationError):
            EventStream(redqueue_redis, "x", **bad)
    for group in ("", "has space", "br{ace}", 7):
        with pytest.raises(ConfigurationError):
            stream.read(group, "c")
    with pytest.raises(ConfigurationError):
        EventStream(redqueue_redis, "x{y}")
    with pytest.raises(ConfigurationError):
        stream.read("g", "~held")


def test_streams_work_on_a_cluster(cluster_url, redqueue_prefix):
    client = make_client(cluster_url)
    try:
        streams = [
            EventStream(client, f"s{i}", prefix=redqueue_prefix, groups=["a", "b"], maxlen=50)
            for i in range(4)  # different names, different slots and nodes
        ]
        for stream in streams:
            stream.publish_many(range(10))
            assert drain(stream, "a") == list(range(10))
            stream.seek("a", "start")
            assert drain(stream, "a") == list(range(10))
            assert stream.group_figures("b").lag == 10
            assert stream.reap().woken == 0  # b's flag is still held
            stream.clear()
    finally:
        client.close()


def test_a_heartbeat_after_the_last_read_does_not_rearm_the_flag(make_stream, redqueue_redis):
    stream = make_stream(groups=["g"])
    stream.publish("x")
    drain(stream, "g")  # the empty read released the flag
    assert stream.renew("g", "c1", []) == 0
    assert not redqueue_redis.exists(stream.keys("group:g:drains"))
    assert stream.publish("y").woken == ("g",)


def test_a_group_whose_stream_key_vanished_is_created_again(make_stream, redqueue_redis):
    stream = make_stream(groups=["g"])
    stream.publish_many(["a", "b"])
    assert drain(stream, "g") == ["a", "b"]
    redqueue_redis.delete(stream.keys("events"))  # e.g. evicted by a maxmemory policy
    assert drain(stream, "g") == []
    stream.publish("c")
    assert drain(stream, "g") == ["c"]


def test_reap_forgets_idle_consumers_with_nothing_pending(make_stream, redqueue_redis):
    stream = make_stream(groups=["g"])
    stream.publish_many(["a", "b", "c"])
    for consumer in ("gone-1", "gone-2", "busy"):
        batch = stream.read("g", consumer, 1)
        if consumer != "busy":
            stream.ack(batch)
    time.sleep(0.05)
    assert stream.reap(forget_consumers_after=0.01).forgotten == 2
    names = [c["name"] for c in redqueue_redis.xinfo_consumers(stream.keys("events"), "g")]
    assert names == [b"busy"]  # it still holds an entry: never forgotten
    assert stream.reap().forgotten == 0  # the default waits an hour
