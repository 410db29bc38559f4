"""pool_batch_wait: a drain lets a batch gather (by scheduling itself, never by sleeping in
the worker) before a batch body runs."""

import pytest

from celery_redqueue import ConfigurationError, PoolTask, pool_task

from .conftest import running_worker


@pytest.fixture
def gathered(app):
    batches = []

    @app.task(
        base=PoolTask,
        pool_batch=True,
        pool_batch_size=5,
        pool_batch_wait=2,
        pool_drain_interval=None,
    )
    def write(calls):
        batches.append(sorted(c.args[0] for c in calls))

    write.batches = batches
    return write


def test_five_calls_a_fifth_of_a_second_apart_reach_the_body_as_one_batch(app, gathered, wait_for):
    import time

    with running_worker(app):
        for i in range(5):
            gathered.delay(i)
            time.sleep(0.2)
        wait_for(lambda: gathered.batches, timeout=20, message="a batch ran")
        wait_for(lambda: gathered.pool.stats().processed == 5, message="all five processed")
    assert gathered.batches == [[0, 1, 2, 3, 4]]


def test_a_lone_call_runs_after_the_wait(app, gathered, wait_for):
    with running_worker(app):
        gathered.delay(7)
        wait_for(lambda: gathered.batches == [[7]], timeout=20, message="the lone call ran")
    assert gathered.pool.stats().processed == 1


def test_the_wait_holds_no_worker(app, gathered, redqueue_redis, wait_for):
    """While the batch gathers, the same solo worker runs other tasks: the drain is not
    sleeping in it."""
    ran = []

    @app.task
    def other(x):
        ran.append(x)

    with running_worker(app):
        gathered.delay(1)
        # The drain found one young call: it scheduled its next look (the wake-up) and ended.
        wait_for(lambda: redqueue_redis.exists(gathered.pool.keys("wake")), message="waiting")
        other.delay("a")
        wait_for(lambda: ran == ["a"], timeout=20, message="another task ran meanwhile")
        assert gathered.batches == []  # still gathering while the other task ran
        wait_for(lambda: gathered.batches == [[1]], timeout=20, message="the batch ran")


def test_a_full_batch_runs_without_waiting_out_the_wait(app, wait_for):
    batches = []

    @app.task(
        base=PoolTask,
        pool_batch=True,
        pool_batch_size=10,
        pool_batch_min=3,
        pool_batch_wait=60,
        pool_drain_interval=None,
    )
    def write(calls):
        batches.append(len(calls))

    with running_worker(app):
        write.delay(1)
        write.delay(2)
        write.delay(3)
        wait_for(lambda: batches, timeout=40, message="the batch of three ran before 60 s")
    assert batches == [3]


def test_beats_safety_net_drain_respects_the_wait(app, gathered, wait_for):
    """The drain beat sends (with the drain header) gathers like any other."""
    gathered.pool.add([[1], {}])
    gathered.pool.add([[2], {}])
    with running_worker(app):
        gathered.send_drain()
        wait_for(lambda: gathered.batches, timeout=20, message="the batch ran")
    assert gathered.batches == [[1, 2]]


@pytest.mark.parametrize(
    "options, name",
    [
        ({"pool_batch_size": 5, "pool_batch_min": 6}, "pool_batch_min"),
        ({"pool_batch_min": 0}, "pool_batch_min"),
        ({"pool_batch_wait": -1}, "pool_batch_wait"),
        ({"pool_batch_wait": 1, "pool_shards": 2, "pool_size": 10}, "pool_shards"),
    ],
)
def test_gathering_options_are_checked_at_decoration(options, name):
    with pytest.raises(ConfigurationError, match=name):

        @pool_task(**options)
        def f(x):
            pass
