"""The continuous consumer (`celery worker --redqueue-consumer`) in real worker subprocesses:
it serves structures in the worker's own execution pool without drain messages, loses nothing
when its worker is killed, finishes its batches on a warm shutdown, and runs beside plain drain
jobs without running a call twice."""

import os
import signal
import sys

import pytest

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.tasks.stream import publish
from celery_redqueue.tasks.wake_wait import signals_of

APP = "tests.integration.consumer_app"
RECORD = f"{APP}.record"
DURABLE = f"{APP}.durable"


@pytest.fixture
def consumer_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    """tests.integration.consumer_app imported in this process, as a producer."""
    from tests.faults.conftest import _imported

    yield from _imported(APP, redqueue_server_url, redqueue_prefix, monkeypatch)


@pytest.fixture
def start_worker(celery_procs, wait_for, tmp_path):
    """``start_worker(*options)``: a `celery worker` of the consumer app, returned once ready."""

    def start(*options):
        proc = celery_procs(APP, "worker", "--loglevel=INFO", "--without-mingle", *options)
        wait_for(
            lambda: b" ready." in proc.log_path.read_bytes() or proc.poll() is not None,
            timeout=60,
            message="the worker to be ready",
        )
        assert proc.poll() is None, proc.log_path.read_text()
        return proc

    return start


@pytest.fixture
def show_logs(tmp_path):
    """Print the workers' logs when the test fails."""
    yield
    if sys.exc_info()[0] is not None:  # pragma: no cover - only on failure
        for log in tmp_path.glob("*.log"):
            print(log.name, log.read_text()[-4000:])


def drain_messages(redis, prefix):
    """Drain jobs sent through the broker so far, by sender (producer, worker)."""
    counts = redis.hgetall(f"{prefix}:drain-messages")
    return {k.decode(): int(v) for k, v in counts.items()}


def ran(redis, prefix, key="ran"):
    return [x.decode() for x in redis.lrange(f"{prefix}:{key}", 0, -1)]


def listed(redis, app):
    """Per served task: whether a consumer is listed on its wake signal."""
    names = {"pool": "record", "bucket": "metered", "stream": "tally"}
    tasks = {kind: app.app.tasks[f"{APP}.{name}"] for kind, name in names.items()}
    return {
        kind: any(
            m.startswith(b"consumer:")
            for signal in signals_of(task)
            for m in redis.zrange(signal.listening, 0, -1)
        )
        for kind, task in tasks.items()
    }


@pytest.mark.parametrize("execution_pool", ["prefork", "threads"])
def test_consumer_serves_stored_calls_without_drain_messages(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, tmp_path, execution_pool
):
    """Calls stored straight into the pool (no drain job announced, none sent) are run by the
    consumer in the worker's execution pool (processes or threads); its drains hand over (a short
    time budget) and fan out to the consumer itself: no drain message goes through the broker."""
    pool = CappedPool(redqueue_redis, RECORD, 100_000, prefix=redqueue_prefix)
    worker = start_worker(f"--pool={execution_pool}", "--concurrency=2", "--redqueue-consumer")
    try:
        for start in range(0, 3000, 500):
            pool.add_many([[[i], {}] for i in range(start, start + 500)])
        wait_for(lambda: pool.stats().processed == 3000, timeout=120, message="the calls")
    except AssertionError:
        print(worker.log_path.read_text()[-4000:])
        raise
    runs = ran(redqueue_redis, redqueue_prefix)
    assert sorted(int(r.split(":")[1]) for r in runs) == list(range(3000))
    pids = {r.split(":")[0] for r in runs}
    if execution_pool == "prefork":
        assert str(worker.pid) not in pids  # in the execution pool's children, not the main process
    else:
        assert pids == {str(worker.pid)}
    assert drain_messages(redqueue_redis, redqueue_prefix) == {}
    assert redqueue_redis.llen(f"{redqueue_prefix}:broker:celery") == 0
    stats = pool.stats()
    assert (stats.depth, stats.in_flight, stats.failed) == (0, 0, 0)


def test_delayed_and_bucket_calls_are_woken_by_the_consumer(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, show_logs
):
    """A delayed call's wake-up and a bucket's next eligible key are the consumer's own
    follow-ups (its drains ask for a drain job later: the consumer runs it then, no countdown
    message). The calls are stored straight into the structures, so no producer sends one."""
    start_worker("--pool=threads", "--concurrency=2", "--redqueue-consumer")
    bucket = LeakyBucket(redqueue_redis, f"{APP}.metered", prefix=redqueue_prefix)
    bucket.set_rate("slow", "2/s")
    bucket.enqueue_many([("slow", [["slow", i], {}]) for i in range(4)])
    pool = CappedPool(redqueue_redis, RECORD, 100_000, prefix=redqueue_prefix)
    pool.add([[-1], {}], delay=1.5)
    wait_for(lambda: len(ran(redqueue_redis, redqueue_prefix, "metered")) == 4, timeout=60)
    wait_for(lambda: pool.stats().processed == 1, timeout=60, message="the delayed call")
    assert ran(redqueue_redis, redqueue_prefix, "metered") == [f"slow:{i}" for i in range(4)]
    assert drain_messages(redqueue_redis, redqueue_prefix) == {}


def test_sigkill_mid_batch_loses_nothing_at_least_once(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, show_logs
):
    """SIGKILL a consumer worker while a batch runs: the batch comes back after its visibility
    timeout and another consumer worker (its watchdog reaps) runs every call."""
    pool = CappedPool(
        redqueue_redis, DURABLE, 100_000, prefix=redqueue_prefix, delivery="at_least_once"
    )
    first = start_worker("--pool=prefork", "--concurrency=1", "--redqueue-consumer")
    pool.add_many([[[i], {}] for i in range(20)])
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:durable-hanging"), timeout=60)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert pool.stats().in_flight == 10  # the batch with call 5 died with its worker
    start_worker("--pool=prefork", "--concurrency=1", "--redqueue-consumer")
    wait_for(lambda: pool.stats().processed == 20, timeout=90, message="redelivery")
    done = [int(x) for x in ran(redqueue_redis, redqueue_prefix, "durable-done")]
    assert set(done) == set(range(20))
    stats = pool.stats()
    assert (stats.lost, stats.in_flight, stats.depth, stats.redelivered) == (0, 0, 0, 10)
    assert drain_messages(redqueue_redis, redqueue_prefix).get("worker", 0) == 0


def test_calls_after_a_consumer_was_killed_all_run(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, consumer_app, show_logs
):
    """SIGKILL a consumer worker that was serving a pool, then make calls with delay(): calls
    stored while its holds on the pool have not run out yet send no drain job, and still every
    call runs (the next consumer's watchdog finds due work under an expired lease)."""
    first = start_worker("--pool=prefork", "--concurrency=2", "--redqueue-consumer")
    for i in range(50):
        consumer_app.record.delay(i)
    store = consumer_app.record.pool
    wait_for(lambda: store.stats().processed == 50, timeout=60, message="the first calls")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    for i in range(50, 150):
        consumer_app.record.delay(i)
    start_worker("--pool=prefork", "--concurrency=2", "--redqueue-consumer")
    wait_for(lambda: store.stats().processed == 150, timeout=90, message="the later calls")
    runs = sorted(int(r.split(":")[1]) for r in ran(redqueue_redis, redqueue_prefix))
    assert runs == list(range(150))


@pytest.mark.parametrize("execution_pool", ["prefork", "threads"])
def test_warm_shutdown_finishes_the_running_batch(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, show_logs, execution_pool
):
    """SIGTERM to a consumer worker while its batch runs: the batch finishes and is acked,
    nothing is left in flight, and what the pool still holds has a drain job waiting for the
    next worker."""
    redqueue_redis.set(f"{redqueue_prefix}:durable-slow", 0.3)
    store = CappedPool(
        redqueue_redis, DURABLE, 100_000, prefix=redqueue_prefix, delivery="at_least_once"
    )
    worker = start_worker(f"--pool={execution_pool}", "--concurrency=1", "--redqueue-consumer")
    store.add_many([[[i], {}] for i in range(100, 130)])
    wait_for(lambda: redqueue_redis.llen(f"{redqueue_prefix}:durable-started"), timeout=60)
    os.kill(worker.pid, signal.SIGTERM)  # the main process only: a warm shutdown
    assert worker.wait(timeout=60) == 0
    stats = store.stats()
    done = {int(x) for x in ran(redqueue_redis, redqueue_prefix, "durable-done")}
    started = {int(x) for x in ran(redqueue_redis, redqueue_prefix, "durable-started")}
    assert started == done and len(done) >= 1
    assert (stats.in_flight, stats.processed, stats.depth) == (0, len(done), 30 - len(done))
    assert stats.lost == stats.redelivered == 0
    if stats.depth:
        assert redqueue_redis.llen(f"{redqueue_prefix}:broker:celery") >= 1


@pytest.mark.parametrize("delivery", ["at_most_once", "at_least_once"])
def test_consumer_beside_drain_jobs_runs_each_call_once(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, consumer_app, show_logs, delivery
):
    """A consumer worker and a plain worker (drain jobs only) on the same pool, calls made with
    delay(): every call runs, and none twice (at most once; at least once: none lost, and none
    twice either, since no worker dies). While the consumer is listed calls send no drain job,
    so drain jobs are sent here too (as beat would): both kinds of drain work the pool at once."""
    task = consumer_app.record if delivery == "at_most_once" else consumer_app.durable
    key = "ran" if delivery == "at_most_once" else "durable-done"
    start_worker("--pool=threads", "--concurrency=2", "--redqueue-consumer")
    start_worker("--pool=prefork", "--concurrency=2")
    calls = range(1000, 3000)
    for i in calls:
        task.delay(i)
        if i % 100 == 0:
            task.send_drain()
    store = task.pool
    wait_for(lambda: store.stats().processed == len(calls), timeout=120, message="the calls")
    runs = [int(r.split(":")[-1]) for r in ran(redqueue_redis, redqueue_prefix, key)]
    assert sorted(runs) == list(calls)  # each exactly once
    stats = store.stats()
    assert (stats.depth, stats.in_flight, stats.lost, stats.redelivered) == (0, 0, 0, 0)


@pytest.mark.parametrize("execution_pool", ["prefork", "threads"])
def test_steady_state_calls_send_no_broker_message(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, consumer_app, show_logs, execution_pool
):
    """Calls made with delay() (and events published) to a pool, a bucket and a stream that a
    consumer serves, in bursts, each burst made once the consumer has run the last one (so
    every burst finds it idle, waiting on the wake signals): no drain job goes through the
    broker, from the producer or the worker. The bound is logical: the consumer lists itself
    on every structure before its first drain, and stays listed while it lives."""
    start_worker(f"--pool={execution_pool}", "--concurrency=2", "--redqueue-consumer")
    wait_for(lambda: all(listed(redqueue_redis, consumer_app).values()), timeout=30)
    for burst in range(20):
        calls = range(burst * 5, burst * 5 + 5)
        for i in calls:
            consumer_app.record.delay(i)
            consumer_app.metered.delay(f"t{i % 3}", i)
            publish(consumer_app.app, "events", i)
        made = calls[-1] + 1
        wait_for(
            lambda made=made: all(
                len(ran(redqueue_redis, redqueue_prefix, key)) == made
                for key in ("ran", "metered", "tally")
            ),
            timeout=60,
            message=f"burst {burst}",
        )
    assert drain_messages(redqueue_redis, redqueue_prefix) == {}
    assert redqueue_redis.llen(f"{redqueue_prefix}:broker:celery") == 0


def test_warm_shutdown_takes_the_consumer_off_the_wake_signals(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, consumer_app, show_logs
):
    """SIGTERM to a consumer worker: it takes its listing off every structure it served, so
    the next call asks for a drain job at once (instead of waiting for a listener that is
    gone until its listing runs out)."""
    worker = start_worker("--pool=threads", "--concurrency=2", "--redqueue-consumer")
    wait_for(lambda: all(listed(redqueue_redis, consumer_app).values()), timeout=30)
    os.kill(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert listed(redqueue_redis, consumer_app) == {"pool": False, "bucket": False, "stream": False}
    # (The worker may have handed over a first drain still running: not the producer's.)
    assert "producer" not in drain_messages(redqueue_redis, redqueue_prefix)
    consumer_app.record.delay(1)
    consumer_app.metered.delay("t", 1)
    publish(consumer_app.app, "events", 1)
    assert drain_messages(redqueue_redis, redqueue_prefix).get("producer") == 3


def test_delayed_and_rate_waiting_calls_send_no_broker_message(
    redqueue_redis, redqueue_prefix, start_worker, wait_for, consumer_app, show_logs
):
    """Under a consumer, calls made with a countdown, and bucket calls whose key must wait for
    its rate, send no drain job either: the store wakes the consumer, whose drain finds the
    work due later and hands the wake-up to the consumer itself (before, each store planned a
    countdown job through the broker)."""
    start_worker("--pool=threads", "--concurrency=2", "--redqueue-consumer")
    wait_for(lambda: all(listed(redqueue_redis, consumer_app).values()), timeout=30)
    LeakyBucket(redqueue_redis, f"{APP}.metered", prefix=redqueue_prefix).set_rate("slow", "20/s")
    for burst in range(4):
        for i in range(burst * 5, burst * 5 + 5):
            consumer_app.record.apply_async((i,), countdown=0.2)
            consumer_app.metered.delay("slow", i)
        made = burst * 5 + 5
        wait_for(
            lambda made=made: (
                len(ran(redqueue_redis, redqueue_prefix)) == made
                and len(ran(redqueue_redis, redqueue_prefix, "metered")) == made
            ),
            timeout=60,
            message=f"burst {burst}",
        )
    assert ran(redqueue_redis, redqueue_prefix, "metered") == [f"slow:{i}" for i in range(20)]
    assert drain_messages(redqueue_redis, redqueue_prefix) == {}
