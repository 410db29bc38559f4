"""The script call path (redis/call.py): a call runs on a connection of the client's pool,
given back after the call, and every way that connection can go wrong ends as redis-py's own
path would."""

import multiprocessing
import threading
import time

import pytest
import redis

from celery_redqueue.errors import CorruptDataError
from celery_redqueue.redis.lua import script


@pytest.fixture
def client(redqueue_server_url):
    """A client of its own, so the connection counts below are this test's alone."""
    client = redis.Redis.from_url(redqueue_server_url)
    yield client
    client.close()


def in_use(client):
    return len(client.connection_pool._in_use_connections)


def test_each_call_gives_its_connection_back_to_the_pool(make_pool, client):
    pool = make_pool(capacity=100)
    pool.client = client
    outcome = []

    def produce():
        for i in range(5):
            outcome.append((pool.add(i).kept, in_use(client)))

    worker = threading.Thread(target=produce)
    worker.start()
    worker.join(timeout=30)
    assert outcome == [(True, 0)] * 5  # nothing kept between calls
    assert len(client.connection_pool._available_connections) == 1  # one, reused
    assert pool.stats().depth == 5


def test_a_restarted_script_cache_and_a_killed_connection_cost_nothing(
    make_pool, client, redqueue_server_url
):
    pool = make_pool(capacity=100)
    pool.client = client
    assert pool.add("a").kept
    client.script_flush()  # as after a restart: NOSCRIPT, then the script is loaded
    assert pool.add("b").kept
    killer = redis.Redis.from_url(redqueue_server_url)
    assert killer.client_kill_filter(_type="normal", skipme=True) >= 1  # the held connection
    killer.close()
    assert pool.add("c").kept  # the broken connection is dropped; the call is stored once
    stats = pool.stats()
    assert (stats.offered, stats.depth) == (3, 3)
    assert sorted(item.payload for item in pool.pop(10).items) == ["a", "b", "c"]


def test_an_error_reply_leaves_the_connection_usable(make_pool, redqueue_redis, client):
    broken = make_pool("broken", capacity=100)
    broken.client = client
    redqueue_redis.set(broken.keys("items"), "not a zset")
    # The script checks the key first and answers with an error reply (named CORRUPT).
    with pytest.raises(CorruptDataError, match="WRONGTYPE"):
        broken.add(1)
    good = make_pool("good", capacity=100)
    good.client = client
    assert good.add(1).kept and good.stats().depth == 1


def test_a_forked_child_uses_its_own_connection(make_pool, client):
    pool = make_pool("forked", capacity=100)
    pool.client = client
    assert pool.add("before the fork").kept  # the parent holds a connection now
    parent_end, child_end = multiprocessing.Pipe()
    context = multiprocessing.get_context("fork")

    def child():
        # The inherited pool is the parent's: the child must open its own connection, and
        # must not close or read from the parent's socket.
        child_end.send(pool.add("inherited pool").kept)

    process = context.Process(target=child)
    process.start()
    process.join(timeout=30)
    assert process.exitcode == 0 and parent_end.recv() is True
    assert pool.add("after the fork").kept  # the parent's connection still works
    payloads = sorted(item.payload for item in pool.pop(10).items)
    assert payloads == ["after the fork", "before the fork", "inherited pool"]


def test_a_single_connection_client_runs_scripts_on_its_connection(redqueue_server_url):
    single = redis.Redis.from_url(redqueue_server_url, single_connection_client=True)
    assert script("read_atomic")(single, ["{t}:k"], ["GET", 1, 0]) == [None]
    assert in_use(single) == 1  # its one connection, no other taken from the pool
    single.close()


def test_a_pool_with_a_small_connection_limit_gets_each_connection_back(
    make_pool, redqueue_server_url
):
    limited = redis.Redis(
        connection_pool=redis.BlockingConnectionPool.from_url(
            redqueue_server_url, max_connections=1, timeout=5
        )
    )
    pool = make_pool(capacity=100)
    pool.client = limited
    assert pool.add(1).kept
    # Not kept by the thread: its next command needs the only connection (a kept one would
    # make this wait 5 s and fail with "No connection available").
    assert pool.stats().depth == 1 and pool.add(2).kept
    limited.close()


def test_a_thread_that_finds_redis_down_gets_the_packages_error(make_pool, client):
    from celery_redqueue.errors import RedisUnavailableError

    pool = make_pool(capacity=100)
    pool.client = client
    assert pool.add(1).kept  # registered; its connection is back in the pool
    port = client.connection_pool.connection_kwargs["port"]
    client.connection_pool.connection_kwargs["port"] = 1  # new connections go nowhere
    client.connection_pool.reset()  # and every connection is a new one
    errors = []

    def produce():
        try:
            pool.add(2)
        except Exception as exc:  # the type is what is checked
            errors.append(exc)

    worker = threading.Thread(target=produce)
    worker.start()
    worker.join(timeout=60)
    assert len(errors) == 1 and isinstance(errors[0], RedisUnavailableError), errors
    client.connection_pool.connection_kwargs["port"] = port
    client.connection_pool.reset()
    assert pool.add(3).kept  # Redis is back: the next call connects
    assert pool.stats().offered == 2  # the failed call stored nothing


def test_a_single_connection_client_reconnects_one_the_server_closed(
    make_pool, redqueue_server_url
):
    # Its connection is no pool's, so nobody else checks it before a call: a send on one the
    # server closed while idle would look like a lost reply (a store refused as "may have run").
    single = redis.Redis.from_url(redqueue_server_url, single_connection_client=True)
    pool = make_pool("single", capacity=100)
    pool.client = single
    assert pool.add("a").kept
    killer = redis.Redis.from_url(redqueue_server_url)
    own = single.client_id()
    assert killer.client_kill_filter(_id=own) == 1
    killer.close()
    time.sleep(0.1)  # the close reaches this side
    assert pool.add("b").kept
    stats = pool.stats()
    assert (stats.offered, stats.depth) == (2, 2)
    single.close()
