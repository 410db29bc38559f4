"""Issue 29: no stranding without beat. Every `celery worker` runs the watchdog
(celery_redqueue/tasks/watchdog.py), which sends the drain that work under no live drain flag
needs and takes back what dead workers held. Beat is off everywhere, no beat drains: the calls
below waited for the next call (or an hour) before it."""

import os
import signal
import time

import pytest
from celery.result import AsyncResult

from celery_redqueue import CallLostError, publish

from .conftest import _imported

pytestmark = pytest.mark.timeout(300)

APP = "tests.faults.watchdog_app"


def ran(client, key):
    return [x.decode() for x in client.lrange(key, 0, -1)]


@pytest.fixture
def watchdog_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    """tests.faults.watchdog_app imported in this process (as a producer), on the test's prefix."""
    yield from _imported(APP, redqueue_server_url, redqueue_prefix, monkeypatch)


@pytest.fixture
def split_watchdog_app(redqueue_server_url, redqueue_prefix, broker_server, monkeypatch):
    """The same app with its broker on ``broker_server`` (a server the test stops and starts)."""
    monkeypatch.setenv("REDQUEUE_TEST_BROKER_URL", broker_server.url)
    yield from _imported(APP, redqueue_server_url, redqueue_prefix, monkeypatch)


def kill(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("execution_pool", ["prefork", "threads", "gevent"])
def test_a_call_made_under_a_killed_lingering_drains_flag_is_served_without_beat(
    execution_pool,
    celery_procs,
    watchdog_app,
    redqueue_redis,
    redqueue_prefix,
    wait_for,
    worker_logs,
):
    """A drain lingers (its drain flag held) and is SIGKILLed; a call made then finds the flag
    held and sends no drain. The next worker (of each execution pool) runs no beat: its watchdog
    sends the drain once the dead drain's lease (10 s) ran out. Before, the call was not served
    in 40 s."""
    ran_key = f"{redqueue_prefix}:ran"
    lingering = watchdog_app.lingering
    first = celery_procs(APP, "worker", "--pool=prefork", "--concurrency=1")
    try:
        assert lingering.delay(0).drain_needed
        wait_for(lambda: ran(redqueue_redis, ran_key) == ["0"], timeout=60, message="call 0")
        kill(first)
        assert lingering.pool.stats().drains  # the lingering drain holds the drain flag
        assert not lingering.delay(1).drain_needed  # the flag is held: this call sends nothing
        called = time.monotonic()
        celery_procs(APP, "worker", f"--pool={execution_pool}", "--concurrency=2")
        wait_for(
            lambda: ran(redqueue_redis, ran_key) == ["0", "1"],
            timeout=90,
            message="call 1, with no further call and no beat",
        )
    except AssertionError:
        print(worker_logs())
        raise
    print(f"{execution_pool}: served {time.monotonic() - called:.2f}s after the call (lease 10 s)")


def _caller(module, kind):
    """Make call ``i`` of ``kind``, and the key of the structure's drain flag."""
    if kind == "pool":
        task = module.plain
        return (lambda i: task.delay(i)), task.pool.keys("drains")
    if kind == "bucket":
        task = module.metered
        return (lambda i: task.delay("a", i)), task.bucket.keys("drains")
    task = module.tally
    return (lambda i: publish(module.app, "events", i)), task.stream.keys("group:tally:drains")


@pytest.mark.parametrize("kind", ["pool", "bucket", "stream"])
def test_a_call_whose_drain_send_failed_is_served_once_the_broker_is_back(
    kind,
    celery_procs,
    split_watchdog_app,
    broker_server,
    redqueue_redis,
    redqueue_prefix,
    wait_for,
    worker_logs,
):
    """The broker goes down under a running worker; a call made then is stored, and its drain
    cannot be sent (the flag is released; a pool's or bucket's receipt says so). Once the broker
    is back the worker's watchdog sends the drain: served without beat and without another
    call."""
    ran_key = f"{redqueue_prefix}:ran"
    call, flag = _caller(split_watchdog_app, kind)
    env = {"REDQUEUE_TEST_BROKER_URL": broker_server.url}
    celery_procs(APP, "worker", "--pool=prefork", "--concurrency=1", env=env)
    try:
        call(0)
        wait_for(lambda: ran(redqueue_redis, ran_key) == ["0"], timeout=60, message="call 0")
        wait_for(lambda: not redqueue_redis.exists(flag), timeout=30, message="the drain to end")
        # Its listing on the wake signal (the linger, under a second) runs out too: a call made
        # while it lasts wakes the drain instead of asking for a job.
        time.sleep(1.0)
        broker_server.stop()
        receipt = call(1)
        if kind != "stream":
            assert receipt.drain_needed and not receipt.drain_sent and receipt.drain_error
        assert not redqueue_redis.exists(flag)  # released: nothing holds the call
        time.sleep(3)  # a watchdog pass or more meets the broker down: it must try again
        assert ran(redqueue_redis, ran_key) == ["0"]
        broker_server.start()
        back = time.monotonic()
        wait_for(
            lambda: ran(redqueue_redis, ran_key) == ["0", "1"],
            timeout=90,
            message="call 1, with no further call and no beat",
        )
    except AssertionError:
        print(worker_logs())
        raise
    print(f"{kind}: served {time.monotonic() - back:.2f}s after the broker came back")


def test_a_gathering_drain_killed_with_its_countdown_message_strands_nothing(
    celery_procs, watchdog_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """A batch gathers (``pool_batch_wait``): the drain holds the flag and sends itself a
    countdown drain job, which the worker holds (an ETA message, unacked). SIGKILL that worker:
    the message waits out the broker's visibility timeout (an hour). Once the flag runs out,
    another worker's watchdog sends a drain; the batch is served. Before, 10 of 10 waited."""
    ran_key = f"{redqueue_prefix}:ran"
    gathered = watchdog_app.gathered
    queue = f"{redqueue_prefix}:broker:celery"
    first = celery_procs(APP, "worker", "--pool=prefork", "--concurrency=1")
    try:
        for i in range(10):
            gathered.delay(i)
        pool = gathered.pool
        # The first drain gathered: it scheduled a countdown job (the wake-up) and the worker
        # took it from the queue.
        wait_for(
            lambda: redqueue_redis.exists(pool.keys("wake")) and not redqueue_redis.llen(queue),
            timeout=60,
            message="the gathering drain's countdown job, held by the worker",
        )
        kill(first)
        killed = time.monotonic()
        assert pool.stats().drains and not ran(redqueue_redis, ran_key)
        celery_procs(APP, "worker", "--pool=prefork", "--concurrency=1")
        wait_for(
            lambda: sorted(ran(redqueue_redis, ran_key), key=int) == [str(i) for i in range(10)],
            timeout=120,
            message="the gathered batch, with no beat",
        )
    except AssertionError:
        print(worker_logs())
        raise
    print(f"served {time.monotonic() - killed:.2f}s after the kill (wait 20 s, lease 10 s)")


def test_every_waiter_of_a_reaped_at_most_once_batch_gets_an_answer(
    celery_procs, watchdog_app, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    """An at-most-once pool with per-call results: a worker is SIGKILLed mid-batch. Without
    beat, another worker's watchdog reaps the batch (counted ``lost``) and stores a
    CallLostError for each of its calls that stored no result, so every ``get()`` returns or
    raises; none waits forever (before, nothing stored a result for a reaped batch)."""
    lossy = watchdog_app.lossy
    started = f"{redqueue_prefix}:started"
    # Stored before any worker runs: the first drain pops all ten as one batch.
    receipts = [lossy.delay(i) for i in range(9)] + [lossy.delay("hang")]
    first = celery_procs(APP, "worker", "--pool=prefork", "--concurrency=1")
    try:
        wait_for(
            lambda: "hang" in ran(redqueue_redis, started),
            timeout=60,
            message="the hanging call",
        )
        assert lossy.pool.stats().in_flight == 10
        kill(first)
        celery_procs(APP, "worker", "--pool=prefork", "--concurrency=1")
        outcomes = {}
        for receipt in receipts:
            result = AsyncResult(receipt.id, app=watchdog_app.app)
            try:
                outcomes[receipt.id] = result.get(timeout=60)
            except CallLostError as exc:
                outcomes[receipt.id] = exc
    except AssertionError:
        print(worker_logs())
        raise
    done = set(ran(redqueue_redis, f"{redqueue_prefix}:ran"))
    lost = [o for o in outcomes.values() if isinstance(o, CallLostError)]
    assert lossy.pool.stats().lost == 10  # the whole batch, as at-most-once counts it
    # Each call that ran keeps its own result; each that did not (the hanging one too) is lost.
    assert sorted(str(o) for o in outcomes.values() if not isinstance(o, CallLostError)) == sorted(
        done
    )
    assert len(lost) == 10 - len(done) and len(lost) >= 1
    assert "lost" in str(lost[0])
