"""PoolTask with real Celery workers on a real Redis broker."""

import threading
import time

import pytest
from celery import Celery

from celery_redqueue import (
    ConfigurationError,
    PoolCall,
    PoolTask,
    Receipt,
    RedQueueError,
    SerializationError,
    pool_task,
)
from celery_redqueue.tasks.wire import DRAIN_HEADER

from .conftest import broker_depth, running_worker


@pytest.fixture
def recorded():
    return []


@pytest.fixture
def pooled(app, recorded):
    @app.task(base=PoolTask, pool_size=1000, pool_batch_size=25)
    def record(x, y=0):
        if x == "boom":
            raise ValueError("bad item")
        recorded.append(x + y)

    return record


def test_worker_drains_calls(app, pooled, recorded, wait_for):
    with running_worker(app):
        receipts = [pooled.delay(i, y=1) for i in range(200)]
        assert all(isinstance(r, Receipt) and r.kept for r in receipts)
        wait_for(lambda: pooled.pool.stats().processed == 200, message="200 processed")
    assert sorted(recorded) == list(range(1, 201))
    stats = pooled.pool.stats()
    assert stats.depth == 0 and stats.failed == 0


def test_one_failing_call_does_not_lose_its_batch(app, pooled, recorded, wait_for):
    calls = (
        [((i,), {}) for i in range(10)] + [(("boom",), {})] + [((i,), {}) for i in range(10, 20)]
    )
    pooled.add_many(calls)
    with running_worker(app):
        wait_for(lambda: pooled.pool.stats().processed == 20, message="20 processed")
    stats = pooled.pool.stats()
    assert stats.failed == 1
    assert sorted(recorded) == list(range(20))


def test_burst_sends_one_drain_message(app, redqueue_redis, redqueue_prefix, wait_for):
    done = []

    @app.task(base=PoolTask, pool_size=50, pool_policy="reject")
    def slow(i):
        done.append(i)

    receipts = [slow.delay(i) for i in range(500)]
    assert sum(r.drain_needed for r in receipts) == 1
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1
    assert sum(r.kept for r in receipts) == 50
    with running_worker(app):
        wait_for(lambda: slow.pool.stats().processed == 50)
    assert sorted(done) == list(range(50))  # reject keeps the oldest
    stats = slow.pool.stats()
    assert (stats.offered, stats.rejected, stats.drains) == (500, 450, 0)


def test_coalescing_task_gets_counts(app, wait_for):
    counts = {}

    @app.task(base=PoolTask, pool_size=100, pool_coalesce=True)
    def count_error(fingerprint, count=1):
        counts[fingerprint] = counts.get(fingerprint, 0) + count

    for i in range(300):
        count_error.delay(f"fp{i % 3}")
    assert count_error.pool.stats().entries == 3
    with running_worker(app):
        wait_for(lambda: count_error.pool.stats().processed == 300)
    assert counts == {"fp0": 100, "fp1": 100, "fp2": 100}
    with pytest.raises(RedQueueError, match="count="):
        count_error.delay("fp", count=3)


@pytest.mark.filterwarnings("ignore::celery_redqueue.PickleWarning")
def test_a_failed_coalesced_call_with_a_binary_serializer_is_retried(app, wait_for):
    """A coalescing pool's entry id is its stored payload: with a binary serializer (pickle
    here; msgpack alike) those bytes are not UTF-8, and the id must still name the entry when
    the ack reports its failure, or at least once the call is counted failed, not retried."""
    app.conf.redqueue_serializer = "pickle"
    runs = []

    @app.task(base=PoolTask, pool_size=100, pool_coalesce=True, pool_delivery="at_least_once")
    def count_error(fingerprint, count=1):
        runs.append((fingerprint, count))
        if runs.count((fingerprint, count)) == 1:
            raise ValueError("first run fails")

    for i in range(30):
        count_error.delay(f"fp{i % 3}")

    def settled():
        stats = count_error.pool.stats()
        return stats.processed + stats.failed + stats.dead == 30

    with running_worker(app):
        wait_for(settled)
    stats = count_error.pool.stats()
    assert (stats.processed, stats.failed, stats.retried, stats.dead) == (30, 0, 30, 0)
    assert sorted(runs) == sorted([(f"fp{i}", 10) for i in range(3)] * 2)


def test_batch_task_gets_lists_of_calls(app, wait_for):
    batches = []

    @app.task(
        base=PoolTask, pool_size=1000, pool_batch=True, pool_batch_size=40, pool_policy="newest"
    )
    def store(calls):
        assert all(isinstance(c, PoolCall) for c in calls)
        batches.append([c.args[0] for c in calls])

    store.add_many([((i,), {}) for i in range(100)])
    with running_worker(app):
        wait_for(lambda: store.pool.stats().processed == 100)
    assert [len(b) for b in batches] == [40, 40, 20]
    assert [x for b in batches for x in b] == list(range(100))


def test_fan_out_spreads_a_deep_pool_over_several_drains(
    app, redqueue_redis, redqueue_prefix, wait_for
):
    @app.task(base=PoolTask, pool_size=10_000, pool_batch_size=10, pool_drain_concurrency=3)
    def noop(i):
        pass

    noop.add_many([((i,), {}) for i in range(1000)])
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1
    first = noop.pool.pop(10)  # what the first drain job does: it finds the pool deep
    assert first.fan_out
    noop.pool.ack(first)
    with running_worker(app, pool="threads", concurrency=3):
        wait_for(lambda: noop.pool.stats().processed == 1000)
    assert noop.pool.stats().drains == 0


def test_calls_are_checked_at_the_call_site(pooled):
    with pytest.raises(SerializationError):
        pooled.delay(object())
    with pytest.raises(TypeError):
        pooled.delay(1, 2, 3)
    with pytest.raises(RedQueueError, match="countdown"):
        pooled.apply_async((1,), countdown="soon")
    assert pooled.pool.stats().offered == 0


def test_eager_mode_runs_the_body_on_round_tripped_arguments(app):
    app.conf.task_always_eager = True
    seen = []

    @app.task(base=PoolTask)
    def echo(value):
        seen.append(value)
        return "ran"

    result = echo.delay((1, 2))
    assert result.get() == "ran"
    assert seen == [[1, 2]]  # as a worker would see it after JSON
    assert echo.pool.stats().offered == 0
    with pytest.raises(SerializationError):
        echo.delay({1, 2})


def test_drain_job_header_passes_through_apply_async(app, redqueue_redis, redqueue_prefix):
    @app.task(base=PoolTask)
    def noop(i):
        pass

    noop.apply_async((), {}, headers={DRAIN_HEADER: 1})  # what beat does
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1
    assert noop.pool.stats().offered == 0


def test_beat_schedule_is_registered(app):
    @app.task(base=PoolTask, pool_drain_interval=5)
    def a(i):
        pass

    @app.task(base=PoolTask, pool_drain_interval=None)
    def b(i):
        pass

    app.finalize()
    schedule = app.conf.beat_schedule
    entry = schedule[f"redqueue: drain {a.name}"]
    assert entry["schedule"] == 5 and entry["options"]["headers"] == {DRAIN_HEADER: 1}
    assert f"redqueue: drain {b.name}" not in schedule
    assert schedule["redqueue: reap"]["task"] == "celery_redqueue.reap"


def test_beat_registration_can_be_switched_off(app):
    app.conf.redqueue_beat = False

    @app.task(base=PoolTask)
    def a(i):
        pass

    app.finalize()
    assert not [k for k in app.conf.beat_schedule if k.startswith("redqueue")]


@pytest.mark.parametrize(
    "options, name",
    [
        ({"pool_size": 0}, "pool_size"),
        ({"pool_policy": "lifo"}, "pool_policy"),
        ({"pool_batch_size": -5}, "pool_batch_size"),
        ({"pool_drain_interval": 0}, "pool_drain_interval"),
        ({"pool_drain_concurrency": 0}, "pool_drain_concurrency"),
        ({"pool_drain_time_budget": 0}, "pool_drain_time_budget"),
        ({"pool_visibility_timeout": -1}, "pool_visibility_timeout"),
        ({"pool_dedupe_key": "user_id"}, "pool_dedupe_key"),
        ({"pool_dedupe_window": 0}, "pool_dedupe_window"),
        ({"pool_name": "a{b}"}, "pool_name"),
        ({"pool_results": "yes"}, "pool_results"),
    ],
)
def test_bad_options_fail_at_decoration(options, name):
    with pytest.raises(ConfigurationError, match=name):

        @pool_task(**options)
        def f(x):
            pass


def test_bad_options_on_app_task_fail_at_finalization(app):
    @app.task(base=PoolTask, pool_size=-1)
    def f(x):
        pass

    with pytest.raises(ConfigurationError, match="pool_size"):
        app.finalize()


def test_missing_url_is_named(redqueue_prefix):
    app = Celery("no-redis", broker="amqp://localhost//", set_as_current=False)

    @app.task(base=PoolTask, shared=False)
    def f(x):
        pass

    with pytest.raises(ConfigurationError, match="redqueue_url"):
        app.finalize()


def test_django_style_namespace_settings(redqueue_server_url, redqueue_prefix, redqueue_redis):
    class Settings:
        CELERY_BROKER_URL = "amqp://localhost//"
        CELERY_REDQUEUE_URL = redqueue_server_url
        CELERY_REDQUEUE_KEY_PREFIX = redqueue_prefix

    app = Celery("django-like", set_as_current=False)
    app.config_from_object(Settings, namespace="CELERY")

    @app.task(base=PoolTask, pool_drain_interval=None, shared=False)
    def f(x):
        pass

    app.conf.redqueue_beat = False
    f.pool.add([[1], {}])
    assert redqueue_redis.exists(f"{redqueue_prefix}:{{pool:{f.name}}}:items")


def test_a_lingering_drain_covers_a_whole_burst(app, wait_for):
    """While calls keep coming, the one drain job keeps working: the burst sends one drain
    message, not one per time the pool ran dry (which it does constantly with a fast worker)."""

    @app.task(base=PoolTask, pool_size=100_000, pool_drain_linger=2.0)
    def noop(i):
        pass

    with running_worker(app):
        receipts = []
        for i in range(3000):
            receipts.append(noop.delay(i))
            if i % 100 == 0:
                time.sleep(0.005)  # let the worker catch up and find the pool empty
        wait_for(lambda: noop.pool.stats().processed == 3000)
    assert 1 <= sum(r.drain_needed for r in receipts) <= 2


def test_batch_tasks_take_any_call_shape(app, wait_for):
    seen = []

    @app.task(base=PoolTask, pool_batch=True)
    def store_events(calls):
        seen.extend((c.args, c.kwargs) for c in calls)

    store_events.delay(user=7, page="/")
    store_events.delay(1, 2)
    with running_worker(app):
        wait_for(lambda: store_events.pool.stats().processed == 2)
    assert sorted(seen, key=repr) == sorted(
        [((), {"user": 7, "page": "/"}), ((1, 2), {})], key=repr
    )


def test_add_many_checks_every_call_and_honours_eager_mode(app):
    ran = []

    @app.task(base=PoolTask)
    def two(a, b):
        ran.append((a, b))

    with pytest.raises(TypeError):
        two.add_many([((1, 2), {}), ((1, 2, 3, 4, 5), {"zzz": 1})])
    assert two.pool.stats().offered == 0
    app.conf.task_always_eager = True
    results = two.add_many([((1, 2), {}), ((3, 4), {})])
    assert ran == [(1, 2), (3, 4)] and len(results) == 2
    assert two.pool.stats().offered == 0


def test_linger_counts_from_when_the_work_ended(app, wait_for):
    """A drain whose batch took longer than the linger still lingers after it."""

    @app.task(base=PoolTask, pool_drain_linger=0.5, pool_batch_size=1)
    def slow(i):
        time.sleep(0.6)

    with running_worker(app):
        assert slow.delay(1).drain_needed
        wait_for(lambda: slow.pool.stats().processed == 1)
        time.sleep(0.2)  # the drain is lingering now
        assert not slow.delay(2).drain_needed
        wait_for(lambda: slow.pool.stats().processed == 2)


def test_a_drain_that_ends_after_a_batch_takes_its_listener_off(app):
    """A drain that lingered, then ended after a batch (its time budget spent, as a drain that
    yields ends), is no longer listed on the wake signal: once the next job ended on the empty
    pool, a call asks for a drain job instead of waking a drain that has gone (issue 29)."""

    @app.task(base=PoolTask, pool_drain_linger=2.0, pool_drain_time_budget=0.3)
    def noop(i):
        pass

    assert noop.delay(0).drain_needed
    drain = threading.Thread(target=noop.drain)
    drain.start()
    time.sleep(0.4)  # it ran the call and lingers, listed; its time budget is spent
    assert not noop.delay(1).drain_needed  # woken: it runs the call and hands over
    drain.join(timeout=5)
    assert not drain.is_alive()
    assert noop.pool.stats().processed == 2
    noop.drain()  # the job it handed over to: the pool is empty, it ends at once
    assert noop.delay(2).drain_needed
