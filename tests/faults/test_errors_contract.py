"""Problems 6 and 7 of issue 8: everything the package raises is a RedQueueError, bad input
stores nothing, and a full Redis gives a named error while the figures still read."""

import math
import socket
import threading
from datetime import datetime, timedelta, timezone

import pytest
import redis

from celery_redqueue import BucketTask, CappedPool, LeakyBucket, PoolTask, errors
from celery_redqueue.redis.client import make_client

pytest_plugins = ["tests.faults.fixtures_errors"]


def _error(name):
    # Looked up by name so that this module imports on code without the new classes (and fails
    # there on the behaviour, not on the import).
    return getattr(errors, name, errors.RedQueueError)


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
def tasks(redqueue_celery_app):
    app = redqueue_celery_app

    @app.task(base=PoolTask, shared=False)
    def pooled(x):
        pass

    @app.task(base=BucketTask, shared=False, bucket_key=lambda x: "k")
    def bucketed(x):
        pass

    return pooled, bucketed


def _stored(task):
    stats = task.structure.stats().as_dict()
    return {k: v for k, v in stats.items() if v and k not in ("capacity",)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "options",
    [
        {"countdown": math.nan},
        {"countdown": math.inf},
        {"countdown": -math.inf},
        {"countdown": 1e12},
        {"countdown": -1e12},
        {"countdown": 366 * 86400},
        {"countdown": "10"},
        {"eta": datetime.now(timezone.utc) + timedelta(days=400)},
        {"eta": datetime(1970, 1, 2, tzinfo=timezone.utc)},
        {"eta": "not a date"},
    ],
    ids=lambda o: f"{next(iter(o))}={next(iter(o.values()))!r}"[:40],
)
def test_bad_countdown_or_eta_is_refused_before_anything_is_stored(tasks, options):
    for task in tasks:
        with pytest.raises(_error("InvalidArgumentError")) as raised:
            task.apply_async((1,), **options)
        assert isinstance(raised.value, errors.RedQueueError)
        assert _stored(task) == {}
        # The pool's later drains are not poisoned: a good call is stored and drained.
        assert task.apply_async((2,), countdown=0.5)


@pytest.mark.timeout(60)
def test_a_delay_up_to_the_maximum_is_accepted(tasks):
    pooled, _ = tasks
    assert pooled.apply_async((1,), countdown=364 * 86400).delayed
    assert pooled.apply_async((1,), countdown=-5).kept  # a moment ago means now


@pytest.mark.timeout(60)
def test_an_argument_nested_too_deep_is_a_serialization_error(tasks, make_pool):
    # How deep the C encoder goes depends on the Python: about 1,000 levels up to 3.12, between
    # 5,000 and 20,000 on 3.13 (its C recursion limit). 100,000 is too deep for every one.
    too_deep = _nested(100_000)
    for task in tasks:
        with pytest.raises(errors.SerializationError):
            task.delay(too_deep)
        assert _stored(task) == {}
    with pytest.raises(errors.SerializationError):
        make_pool().add(too_deep)


@pytest.mark.timeout(120)
def test_a_full_redis_gives_a_named_error_writes_nothing_and_still_reads(
    fault_redis, make_app, fill_redis
):
    server, client = fault_redis
    app = make_app(server.url)

    @app.task(base=PoolTask, shared=False, pool_delivery="at_least_once")
    def pooled(x):
        pass

    @app.task(base=BucketTask, shared=False, bucket_key=lambda x: "k")
    def bucketed(x):
        pass

    for task in (pooled, bucketed):
        task.delay(1)
    before = {t.name: t.structure.stats() for t in (pooled, bucketed)}
    fill_redis(client)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("probe", "x")  # the server really refuses writes

    for task in (pooled, bucketed):
        with pytest.raises(_error("RedisFullError")) as raised:
            task.delay(2)
        assert isinstance(raised.value, errors.RedQueueError)
        assert "maxmemory" in str(raised.value)
        # Nothing half-written, and the figures read at maxmemory (MULTI/EXEC is refused).
        assert task.structure.stats() == before[task.name]
        assert task.structure.figures().depth == 1
    assert bucketed.structure.key_stats("k").depth == 1

    # Consumers still work at maxmemory: that is how a full Redis drains.
    batch = pooled.structure.pop(10)
    assert len(batch) == 1
    assert pooled.structure.ack(batch)
    reservation = bucketed.structure.dequeue().reservation
    assert reservation is not None and bucketed.structure.commit(reservation)

    client.config_set("maxmemory", 0)
    assert pooled.delay(3).kept


@pytest.mark.timeout(60)
def test_redis_refusing_a_command_is_a_redqueue_error(redqueue_redis, redqueue_prefix):
    pool = CappedPool(redqueue_redis, "wrongtype", 10, prefix=redqueue_prefix)
    bucket = LeakyBucket(redqueue_redis, "wrongtype", prefix=redqueue_prefix)
    pool.add(1)
    bucket.enqueue("k", 1)
    for structure, part in ((pool, "stats"), (bucket, "stats")):
        redqueue_redis.delete(structure.keys(part))
        redqueue_redis.set(structure.keys(part), "not a hash")
    for call in (lambda: pool.add(2), pool.stats, lambda: bucket.enqueue("k", 2), bucket.stats):
        with pytest.raises(errors.RedQueueError) as raised:
            call()
        # Redis's own WRONGTYPE, or a script's check before its first write naming the key.
        text = str(raised.value)
        assert "WRONGTYPE" in text or f"{part} holds a string, not a hash" in text, text
        assert isinstance(raised.value.__cause__, redis.exceptions.ResponseError)


@pytest.fixture
def not_redis():
    """A TCP server on loopback that answers every connection with text Redis never sends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    stop.set()
    thread.join()
    listener.close()


@pytest.mark.timeout(60)
def test_a_protocol_error_is_redis_unavailable(not_redis):
    pool = CappedPool(make_client(not_redis), "p", 10, prefix="rqfault")
    with pytest.raises(errors.RedisUnavailableError):
        pool.add(1)
    with pytest.raises(errors.RedisUnavailableError):
        pool.stats()
