"""Wake signals against a real Redis: a store wakes a consumer that armed the signal, nothing is
pushed while nobody listens, the marker expires, several structures are waited on at once."""

import threading

from celery_redqueue import EventStream
from celery_redqueue.structures.wake import listen_any

# Generous: a woken listen returns at once; these only bound a broken test.
WAIT = 20.0


def signal_len(pool):
    return pool.client.llen(pool.keys("signal"))


def test_an_empty_pop_arms_and_a_call_wakes_the_listener(make_pool):
    pool = make_pool(capacity=10)
    assert not pool.pop(10, linger=True, listen=WAIT)
    assert pool.client.exists(pool.keys("listening"))
    woken = []
    thread = threading.Thread(target=lambda: woken.append(pool.listen(WAIT)))
    thread.start()
    pool.add("hello")
    thread.join(WAIT + 10)
    assert woken == [True]
    assert [i.payload for i in pool.pop(10).items] == ["hello"]


def test_nothing_is_pushed_while_nobody_listens(make_pool):
    pool = make_pool(capacity=1000)
    pool.add_many(range(100))
    for i in range(50):
        pool.add(i, dedupe_id=f"d{i}")
    assert not pool.client.exists(pool.keys("listening"))
    assert signal_len(pool) == 0
    # A listen that nobody armed is never woken: it times out.
    assert pool.listen(0.05) is False


def test_one_token_at_most_and_it_expires(make_pool):
    pool = make_pool(capacity=1000, drain_lease=0.5)
    assert not pool.pop(10, listen=WAIT)
    pool.add_many(range(10))
    for i in range(10):
        pool.add(i)
    assert signal_len(pool) == 1
    assert 0 < pool.client.pttl(pool.keys("signal")) <= 500


def test_the_marker_expires(make_pool, wait_for):
    pool = make_pool(capacity=10)
    # 1 s, not less: a busy machine must not let the marker expire before it is read.
    assert not pool.pop(10, listen=1.0)
    ttl = pool.client.pttl(pool.keys("listening"))
    assert 0 < ttl <= 1100  # the wait and a margin
    wait_for(lambda: not pool.client.exists(pool.keys("listening")), message="marker gone")
    pool.add(1)
    assert signal_len(pool) == 0


def test_arming_drops_a_stale_token(make_pool):
    pool = make_pool(capacity=10)
    pool.pop(10, listen=WAIT)
    pool.add(1)  # a token for nobody (nobody is blocked yet)
    assert signal_len(pool) == 1
    batch = pool.pop(10)
    pool.ack(batch)
    assert not pool.pop(10, listen=WAIT)  # empty again: the token woke nobody for anything
    assert signal_len(pool) == 0


def test_a_longer_listener_keeps_the_marker_alive(make_pool):
    pool = make_pool(capacity=10)
    pool.pop(10, listen=WAIT, listener="long")
    pool.pop(10, listen=0.01, listener="short")
    assert pool.client.pttl(pool.keys("listening")) > 1000


def test_a_live_listener_counts_as_a_drain_until_it_stops_listening(make_pool):
    pool = make_pool(capacity=100)
    assert not pool.pop(10, listen=WAIT, listener="consumer")
    receipts = [pool.add(i) for i in range(3)] + pool.add_many(range(3, 6))
    receipts.append(pool.add(6, dedupe_id="x"))
    assert not any(r.drain_needed for r in receipts)  # the listener takes them
    assert pool.stats().drains == 0
    batch = pool.pop(100, listener="consumer")
    pool.ack(batch)
    assert not pool.pop(10, listen=0, listener="consumer")  # it stops listening
    assert not pool.client.exists(pool.keys("listening"))
    assert pool.add(7).drain_needed


def test_listen_any_says_which_structure_woke(make_pool):
    quiet, busy = make_pool("quiet"), make_pool("busy")
    for pool in (quiet, busy):
        pool.pop(10, listen=WAIT)
    woken = []
    signals = quiet.wake_signals() + busy.wake_signals()
    thread = threading.Thread(target=lambda: woken.extend(listen_any(signals, WAIT)))
    thread.start()
    busy.add("x")
    thread.join(WAIT + 10)
    assert woken == busy.wake_signals()
    assert listen_any(signals, 0.01) == []


def test_a_bucket_poll_arms_and_an_enqueue_wakes(make_bucket):
    bucket = make_bucket(default_rate="6/m")  # one per 10 s
    bucket.enqueue("k", "first")
    assert bucket.dequeue().reservation is not None
    bucket.enqueue("k", "second")  # the key may not go for an hour
    poll = bucket.dequeue(listen=WAIT)
    assert poll.reservation is None and poll.wait > 5
    woken = []
    thread = threading.Thread(target=lambda: woken.append(bucket.listen(WAIT)))
    thread.start()
    bucket.enqueue("other", "now")
    thread.join(WAIT + 10)
    assert woken == [True]
    assert bucket.dequeue().reservation.payload == "now"


def test_a_bucket_store_pushes_nothing_while_nobody_listens(make_bucket):
    bucket = make_bucket()
    for i in range(20):
        bucket.enqueue(f"k{i % 3}", i)
    bucket.enqueue_many([("k", i) for i in range(20)])
    assert bucket.client.llen(bucket.keys("signal")) == 0


def test_a_publish_wakes_each_group_that_listens(redqueue_redis, redqueue_prefix):
    stream = EventStream(redqueue_redis, "s", groups=["a", "b"], prefix=redqueue_prefix)
    for group in ("a", "b"):
        assert not stream.read(group, "c", 10, linger=True, listen=WAIT)
    woken = []
    signals = stream.wake_signals("a") + stream.wake_signals("b")
    threads = [
        threading.Thread(target=lambda g=g: woken.append(stream.listen(g, WAIT)))
        for g in ("a", "b")
    ]
    for thread in threads:
        thread.start()
    stream.publish({"n": 1})
    for thread in threads:
        thread.join(WAIT + 10)
    assert woken == [True, True]
    assert [e.payload for e in stream.read("a", "c", 10).events] == [{"n": 1}]
    stream.publish_many([{"n": 2}] * 5)  # the markers live on: one token each, at most
    assert [redqueue_redis.llen(s.key) for s in signals] == [1, 1]
    other = EventStream(redqueue_redis, "quiet", groups=["a"], prefix=redqueue_prefix)
    other.publish_many([{"n": 3}] * 5)  # nobody ever listened
    assert redqueue_redis.llen(other.wake_signals("a")[0].key) == 0


def test_a_live_bucket_listener_takes_calls_for_keys_that_may_go(make_bucket):
    bucket = make_bucket()
    assert bucket.dequeue(listen=WAIT, listener="c", linger=True).reservation is None
    assert not bucket.enqueue("k", 1).drain_needed
    assert not any(r.drain_needed for r in bucket.enqueue_many([("j", 2), ("l", 3)]))
    assert bucket.client.llen(bucket.keys("signal")) == 1
    for _ in range(3):
        bucket.commit(bucket.dequeue(listener="c").reservation)
    assert bucket.dequeue(listener="c").reservation is None  # empty, not lingering: off
    assert bucket.enqueue("m", 4).drain_needed


def test_a_stream_group_listener_absorbs_publishes(redqueue_redis, redqueue_prefix):
    stream = EventStream(redqueue_redis, "s", groups=["g"], prefix=redqueue_prefix)
    assert not stream.read("g", "c", 10, listen=WAIT, listener="c")
    assert stream.publish(1).woken == ()  # no drain job: the listener reads it
    assert [e.payload for e in stream.read("g", "c", 10, listener="c").events] == [1]
    assert not stream.read("g", "c", 10, listener="c")  # empty, listen 0: off
    assert stream.publish(2).woken == ("g",)
