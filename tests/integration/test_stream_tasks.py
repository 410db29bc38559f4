"""StreamTask with real Celery workers on a real Redis broker, and a `celery worker` subprocess
killed with SIGKILL."""

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest

from celery_redqueue import (
    ConfigurationError,
    Receipt,
    RedQueueError,
    SerializationError,
    StreamTask,
    publish,
    stream_task,
)
from celery_redqueue.tasks.retries import StoredRetry, judge

from .conftest import ROOT, broker_depth, running_worker

PROC_APP = "tests.integration.stream_proc_app"


@pytest.fixture
def orders(app):
    """Three groups on the stream "orders", each recording what it received."""
    seen = {"sms": [], "slip": [], "points": []}
    lock = threading.Lock()

    def consumer(group):
        @app.task(base=StreamTask, name=f"shop.{group}", stream_name="orders", stream_group=group)
        def handle(event):
            with lock:
                seen[group].append(event["order"])

        return handle

    tasks = {group: consumer(group) for group in seen}
    return tasks, seen


def test_three_groups_each_receive_every_event_once(
    app, orders, redqueue_redis, redqueue_prefix, wait_for
):
    tasks, seen = orders
    receipts = tasks["sms"].stream.publish_many([{"order": i} for i in range(60)])
    assert all(isinstance(r, Receipt) for r in receipts)
    assert set(receipts[0].woken) == {"sms", "slip", "points"}
    # The broker carries one argument-less drain job per group, not 180 calls.
    assert broker_depth(redqueue_redis, redqueue_prefix) == 3
    with running_worker(app, pool="threads", concurrency=3):
        publish(app, "orders", {"order": 60})  # the stream-level publish wakes every group
        for group in seen:
            wait_for(
                lambda g=group: tasks[g].stream.group_figures(g).processed == 61,
                message=f"{group} caught up",
            )
    for group in seen:
        assert sorted(seen[group]) == list(range(61)), group
        figures = tasks[group].stream.group_figures(group)
        assert (figures.lag, figures.pending, figures.redelivered) == (0, 0, 0)
    assert tasks["sms"].stream.stats()["published"] == 61


def test_a_group_replays_from_the_start_after_a_bug_fix(app, redqueue_redis, wait_for):
    bug = {"fixed": False}
    totals = {}

    @app.task(base=StreamTask, stream_name="orders", stream_group="points")
    def add_points(event):
        points = event["amount"] // 10 if bug["fixed"] else 0  # the bug: nobody gets points
        totals[event["order"]] = points

    @app.task(base=StreamTask, stream_name="orders", stream_group="sms")
    def send_sms(event):
        redqueue_redis.incr(f"test-sms-{app.main}")

    add_points.stream.publish_many([{"order": i, "amount": 100 + i} for i in range(20)])
    with running_worker(app):
        wait_for(lambda: add_points.stream.group_figures("points").processed == 20)
        wait_for(lambda: send_sms.stream.group_figures("sms").processed == 20)
        assert set(totals.values()) == {0}
        bug["fixed"] = True
        add_points.stream.seek("points", "start")
        assert add_points.stream.group_figures("points").lag == 20
        add_points.send_drain()
        wait_for(lambda: add_points.stream.group_figures("points").processed == 40)
    assert totals == {i: (100 + i) // 10 for i in range(20)}
    assert int(redqueue_redis.get(f"test-sms-{app.main}")) == 20  # sms did not replay
    redqueue_redis.delete(f"test-sms-{app.main}")


def test_failing_event_is_retried_then_dead_lettered_and_requeued(app, wait_for):
    runs = []

    @app.task(
        base=StreamTask,
        stream_name="orders",
        stream_group="slip",
        stream_max_receives=3,
        stream_retry_delay=0.05,
    )
    def print_slip(event):
        runs.append(event)
        if event == "malformed" and not print_slip.fixed:
            raise ValueError("no address")

    print_slip.fixed = False
    print_slip.stream.publish_many(["a", "malformed", "b"])
    with running_worker(app):
        wait_for(lambda: print_slip.stream.dead_letters(), message="the dead letter")
        (letter,) = print_slip.stream.dead_letters()
        assert (letter.payload, letter.receives, letter.key) == ("malformed", 3, "slip")
        assert letter.error == "ValueError: no address"
        assert runs.count("malformed") == 3 and runs.count("a") == runs.count("b") == 1
        print_slip.fixed = True
        assert print_slip.requeue_dead() == 1
        wait_for(lambda: runs.count("malformed") == 4, message="the requeued letter")
    figures = print_slip.stream.group_figures("slip")
    assert (figures.processed, figures.dead, figures.pending) == (3, 1, 0)


def test_ordered_group_keeps_each_keys_order_across_a_retry(app, wait_for):
    done = []
    failed_once = set()

    @app.task(
        base=StreamTask,
        stream_name="orders",
        stream_group="fulfil",
        stream_key="order",
        stream_retry_delay=0.1,
        stream_batch_size=10,
    )
    def fulfil(event):
        step = (event["order"], event["step"])
        if step == ("A", "placed") and step not in failed_once:
            failed_once.add(step)
            raise ConnectionError("warehouse down")
        done.append(step)

    steps = ("placed", "paid", "packed", "shipped")
    fulfil.stream.publish_many([{"order": o, "step": s} for s in steps for o in ("A", "B")])
    with running_worker(app, pool="threads", concurrency=2):
        wait_for(lambda: len(done) == 8, message="every step")
    for order in ("A", "B"):
        assert [s for o, s in done if o == order] == list(steps)
    assert done.index(("B", "placed")) < done.index(("A", "placed"))  # B was not held up


def test_self_retry_hands_the_event_out_again(app, wait_for):
    deliveries = []

    @app.task(base=StreamTask, bind=True, stream_name="orders", stream_group="retrying")
    def flaky(self, event):
        deliveries.append(self.event.receives)
        if self.event.receives == 1:
            raise self.retry(countdown=0.1, exc=TimeoutError("later"))

    flaky.stream.publish("x")
    with running_worker(app):
        wait_for(lambda: flaky.stream.group_figures("retrying").processed == 1)
    assert deliveries == [1, 2]
    figures = flaky.stream.group_figures("retrying")
    assert (figures.retried, figures.redelivered, figures.dead) == (1, 1, 0)


def test_heartbeat_keeps_a_long_body_from_being_claimed(app, wait_for):
    started = threading.Event()
    runs = []

    @app.task(
        base=StreamTask,
        stream_name="orders",
        stream_group="slow",
        stream_visibility_timeout=0.6,
        stream_drain_lease=0.6,
    )
    def slow(event):
        runs.append(event)
        started.set()
        time.sleep(2.5)

    slow.stream.publish("long")
    with running_worker(app):
        assert started.wait(30)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert not slow.stream.read("slow", "thief", 10)  # renewed, not claimable
            time.sleep(0.1)
        wait_for(lambda: slow.stream.group_figures("slow").processed == 1)
    assert runs == ["long"]


def test_bad_use_fails_where_it_is_written(app, redqueue_redis):
    @app.task(base=StreamTask, stream_name="orders", stream_group="g")
    def consume(event):
        pass

    with pytest.raises(RedQueueError, match="publish"):
        consume.delay({"order": 1})
    with pytest.raises(SerializationError):
        consume.stream.publish_many([{"ok": 1}, {"bad": object()}])
    assert consume.stream.stats()["published"] == 0
    with pytest.raises(ConfigurationError, match="stream="):
        stream_task(lambda e: None)
    with pytest.raises(ConfigurationError, match="stream_batch_size"):
        stream_task(stream="orders", stream_batch_size=0)
    with pytest.raises(ConfigurationError, match="stream_name"):
        stream_task(stream="has space")
    with pytest.raises(ConfigurationError, match="stream_key"):
        stream_task(stream="orders", stream_key=3)

    @app.task(base=StreamTask, stream_name="other", stream_group="x", stream_key="a")
    def one(event):
        pass

    @app.task(base=StreamTask, stream_name="other", stream_group="y", stream_key="b")
    def two(event):
        pass

    with pytest.raises(ConfigurationError, match="same"):
        one.stream.publish({"a": 1, "b": 2})

    @app.task(base=StreamTask, stream_name="third", stream_group="dup")
    def first(event):
        pass

    @app.task(base=StreamTask, stream_name="third", stream_group="dup")
    def second(event):
        pass

    with pytest.raises(ConfigurationError, match="both group 'dup'"):
        first.stream.publish(1)
    with pytest.raises(ConfigurationError, match="by default the task name"):

        @app.task(base=StreamTask, name="has spaces in it", stream_name="orders")
        def unnamed(event):
            pass


def test_retry_delays_follow_celerys_backoff_options(app):
    @app.task(base=StreamTask, stream_name="orders", stream_retry_delay=0.25)
    def plain_delay(event):
        pass

    @app.task(
        base=StreamTask,
        stream_name="orders",
        stream_retry_delay=0.25,
        retry_backoff=True,
        retry_backoff_max=1.5,
        retry_jitter=False,
    )
    def doubling(event):
        pass

    @app.task(base=StreamTask, stream_name="orders", retry_backoff=2, retry_jitter=False)
    def from_two(event):
        pass

    @app.task(base=StreamTask, stream_name="orders", stream_retry_delay=0.3, retry_backoff=True)
    def jittered(event):  # Celery's own helper would fail here: randrange of 1.2 seconds
        pass

    def delay(task, receives, exc=None):
        exc = exc or ValueError("upstream")
        verdict = judge(task, exc, receives, 99, redeliver=task.stream_retry_delay)
        assert verdict.retry
        return verdict.delay

    assert [delay(plain_delay, d) for d in (1, 3)] == [0.25, 0.25]
    assert [delay(doubling, d) for d in (1, 2, 3, 4)] == [0.25, 0.5, 1.0, 1.5]
    assert delay(doubling, 3, StoredRetry(when=7)) == 7.0  # self.retry(countdown=7)
    assert delay(from_two, 3) == 8.0
    delays = [delay(jittered, 3) for _ in range(50)]
    assert all(0 <= d <= 1.2 for d in delays) and len(set(delays)) > 1


def test_decorator_and_eager_mode(app):
    got = []

    @stream_task(app=app, stream="orders", group="eager-a")
    def a(event):
        got.append(("a", event))

    @stream_task(app=app, stream="orders", group="eager-b")
    def b(event):
        got.append(("b", event))

    assert (a.stream_name, a.group, b.group) == ("orders", "eager-a", "eager-b")
    app.conf.task_always_eager = True
    try:
        publish(app, "orders", {"order": 1})
    finally:
        app.conf.task_always_eager = False
    assert sorted(got) == [("a", {"order": 1}), ("b", {"order": 1})]


def test_stream_tasks_on_a_cluster(app, cluster_url, wait_for):
    """The stream lives on a Redis Cluster (the broker stays a plain Redis)."""
    app.conf.redqueue_url = cluster_url
    seen = []

    for group in ("c1", "c2"):

        @app.task(base=StreamTask, name=f"cl.{group}", stream_name="clustered", stream_group=group)
        def handle(event, group=group):
            seen.append((group, event))

    tasks = [app.tasks["cl.c1"], app.tasks["cl.c2"]]
    tasks[0].stream.publish_many(range(30), keys=[str(i % 3) for i in range(30)])
    with running_worker(app, pool="threads", concurrency=2):
        for task in tasks:
            wait_for(lambda t=task: t.stream.group_figures(t.group).processed == 30, timeout=60)
    assert sorted(seen) == sorted((g, i) for g in ("c1", "c2") for i in range(30))


# SIGKILL: a `celery worker` subprocess dies in the middle of an event.


@pytest.fixture
def spawn_stream(celery_procs):
    return functools.partial(celery_procs, PROC_APP)


@pytest.mark.timeout(240)
def test_consumer_killed_mid_event_has_its_events_claimed_and_run_once_more(
    redqueue_redis, redqueue_prefix, spawn_stream, tmp_path, wait_for
):
    """SIGKILL the prefork worker while it runs an event: its pending entries are claimed after
    the visibility timeout by a new worker (woken by beat's reaper) and run once more; the
    other group is untouched."""
    from celery_redqueue import EventStream

    stream = EventStream(
        redqueue_redis,
        "parcels",
        prefix=redqueue_prefix,
        groups=["label", "notify"],
    )
    stream.publish_many(["p0", "p1", "hang", "p3", "p4"])
    spawn_stream("beat", "--loglevel=INFO", "--max-interval=1")
    worker = spawn_stream("worker", "--pool=prefork", "--concurrency=1", "--loglevel=INFO")
    try:
        wait_for(
            lambda: redqueue_redis.llen(f"{redqueue_prefix}:hanging"),
            timeout=90,
            message="the hanging event",
        )
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        assert stream.group_figures("label").pending >= 1  # died with its worker
        spawn_stream("worker", "--pool=prefork", "--concurrency=1", "--loglevel=INFO")
        wait_for(
            lambda: (
                stream.group_figures("label").processed == 5
                and stream.group_figures("notify").processed == 5
            ),
            timeout=120,
            message="redelivery",
        )
    except AssertionError:
        for log in tmp_path.glob("*.log"):
            print(log.name, log.read_text()[-3000:])
        raise
    labels = [x.decode() for x in redqueue_redis.lrange(f"{redqueue_prefix}:label", 0, -1)]
    started = [x.decode() for x in redqueue_redis.lrange(f"{redqueue_prefix}:started", 0, -1)]
    assert sorted(labels) == ["hang", "p0", "p1", "p3", "p4"]  # each completed once
    assert started.count("hang") == 2  # run once more, no more
    deliveries = [
        int(x) for x in redqueue_redis.lrange(f"{redqueue_prefix}:hang-deliveries", 0, -1)
    ]
    assert deliveries == [1, 2]
    figures = stream.group_figures("label")
    assert (figures.pending, figures.dead, figures.redelivered) == (0, 0, 1)
    notified = [x.decode() for x in redqueue_redis.lrange(f"{redqueue_prefix}:notify", 0, -1)]
    assert sorted(notified) == ["hang", "p0", "p1", "p3", "p4"]


def redqueue_cli(env, *args, check=True):
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", PROC_APP, "redqueue", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_cli_lists_seeks_and_tends_dead_letters_of_streams(
    proc_env, redqueue_redis, redqueue_prefix
):
    from celery_redqueue import EventStream

    stream = EventStream(
        redqueue_redis, "parcels", prefix=redqueue_prefix, groups=["label"], max_receives=1
    )
    stream.publish_many(["a", "b", "c"])
    batch = stream.read("label", "c1", 2)
    stream.ack(batch, failures={batch.events[0].id: "ValueError: bad a"})

    listing = redqueue_cli(proc_env, "list").stdout
    assert "stream:parcels" in listing
    # One line per group under the stream: lag, pending, dead, rates, oldest pending age.
    rows = {line.split()[1]: line.split()[2:] for line in listing.splitlines()
            if line.startswith("  group ")}  # fmt: skip
    assert set(rows) == {"label"}  # the groups in Redis (notify has read nothing yet)
    figures = stream.group_figures("label")
    assert (figures.lag, figures.pending, figures.dead) == (1, 0, 1)
    assert rows["label"][:3] == ["1", "0", "1"], listing
    assert rows["label"][5] == "-", listing  # no pending entry, so no oldest age

    as_json = json.loads(redqueue_cli(proc_env, "list", "--json").stdout)["stream:parcels"]
    assert [(g["group"], g["lag"], g["dead"]) for g in as_json["groups"]] == [("label", 1, 1)]

    stats = redqueue_cli(proc_env, "stats", "stream:parcels").stdout
    assert "published + requeued - trimmed == length: ok" in stats and "group label" in stats

    letters = redqueue_cli(proc_env, "dead", "stream:parcels").stdout
    assert "key=label" in letters and "ValueError: bad a" in letters

    seeked = redqueue_cli(proc_env, "seek", "stream:parcels", "label", "start").stdout
    assert "4 to read" not in seeked and "3 to read" in seeked and "drain jobs sent" in seeked
    assert stream.group_figures("label").lag == 3
    assert redqueue_redis.llen(f"{redqueue_prefix}:broker:celery") == 2  # label and notify

    requeued = redqueue_cli(proc_env, "requeue", "parcels")
    assert "requeued 1; drain jobs sent" in requeued.stdout
    assert stream.dead_letters() == [] and stream.stats()["requeued"] == 1

    batch = stream.read("label", "c1", 10)
    stream.ack(batch, failures={e.id: "still bad" for e in batch.events}, dead=batch.ids)
    purged = redqueue_cli(proc_env, "purge", "stream:parcels", "--yes")
    assert "purged 4" in purged.stdout
    assert stream.stats()["purged"] == 4

    bad = redqueue_cli(proc_env, "seek", "stream:parcels", "label", "yesterday", check=False)
    assert bad.returncode != 0 and "cannot read position" in bad.stderr
    ended = redqueue_cli(proc_env, "seek", "stream:parcels", "label", "end").stdout
    assert "0 to read" in ended and stream.group_figures("label").lag == 0
    length = stream.stats()["length"]
    an_hour_ago = datetime.fromtimestamp(time.time() - 3600).isoformat()
    for position in (an_hour_ago, str(int(time.time() - 3600)), "0-1"):  # ISO, epoch, entry id
        redqueue_cli(proc_env, "seek", "stream:parcels", "label", "end")
        moved = redqueue_cli(proc_env, "seek", "stream:parcels", "label", position).stdout
        assert f"{length} to read" in moved, (position, moved)
    # A time before the first entry (a negative one too) replays from the start.
    redqueue_cli(proc_env, "seek", "stream:parcels", "label", "end")
    negative = redqueue_cli(proc_env, "seek", "--", "stream:parcels", "label", "-5").stdout
    assert f"{length} to read" in negative, negative

    broker = f"{redqueue_prefix}:broker:celery"
    before = redqueue_redis.llen(broker)
    drained = redqueue_cli(proc_env, "drain", "stream:parcels").stdout
    assert "drain jobs sent (label, notify)" in drained  # one task per group
    assert redqueue_redis.llen(broker) == before + 2
    frame = redqueue_cli(proc_env, "top", "--iterations", "1").stdout
    assert re.search(r"stream:parcels\s+\d", frame) and re.search(r"group label\s+\d", frame)


def test_a_drain_job_that_cannot_be_sent_releases_the_flag(app, redqueue_redis, caplog):
    """The broker is down (a closed loopback port): the event is stored, the send failure is
    logged, and the group's drain flag is released so the next publish tries again."""
    app.conf.update(
        broker_url="redis://127.0.0.1:1/0",
        broker_connection_retry=False,
        broker_connection_max_retries=0,
        broker_transport_options={"max_retries": 0},
        task_publish_retry=False,
    )

    @app.task(base=StreamTask, stream_name="orders", stream_group="g")
    def consume(event):
        pass

    first = consume.stream.publish({"order": 1})
    assert first.woken == ("g",)  # the flag was armed and a send attempted ...
    assert not redqueue_redis.exists(consume.stream.keys("group:g:drains"))  # ... and released
    assert "sending the drain job" in caplog.text
    assert consume.stream.publish({"order": 2}).woken == ("g",)  # not held off for the 10 s lease
    assert consume.stream.group_figures("g").lag == 2  # both events are safe in Redis
    # The continuous consumer hands a stream over the same way on shutdown: an error text, not
    # an AttributeError (a stream has no drain flag to release).
    assert consume.send_drain_or_release() is not None


def test_a_drain_that_ends_after_a_batch_takes_its_listener_off(app):
    """As for pools (issue 29): a drain that lingered, then ended after a batch (its time
    budget spent, as a drain that yields ends), is no longer listed on its group's wake
    signal, so once the job it handed over to ended on the empty group, the next publish
    asks for a drain job instead of waking a drain that has gone."""

    @app.task(
        base=StreamTask,
        name="shop.unlisted",
        stream_name="unlisted",
        stream_group="g",
        stream_drain_linger=2.0,
        stream_drain_time_budget=0.3,
    )
    def handle(event):
        pass

    assert handle.stream.publish({"n": 0}).woken == ("g",)
    drain = threading.Thread(target=handle.drain)
    drain.start()
    time.sleep(0.4)  # it ran the event and lingers, listed; its time budget is spent
    assert handle.stream.publish({"n": 1}).woken == ()  # the listener is woken instead
    drain.join(timeout=5)
    assert not drain.is_alive()
    assert handle.stream.group_figures("g").processed == 2
    handle.drain()  # the job it handed over to: nothing left, it ends at once
    assert handle.stream.publish({"n": 2}).woken == ("g",)
