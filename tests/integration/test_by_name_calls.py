"""By-name calls (a message with arguments: send_task, `celery call`, Flower's send-task, a
beat row with arguments) are stored in the structure by the worker that receives them, with the
same checks and counters as .delay(), and acknowledged after the store."""

import pytest

from celery_redqueue import BucketTask, PoolTask

from .conftest import broker_depth, running_worker


def test_by_name_calls_to_a_5_per_second_key_keep_its_rate_and_all_run(app, wait_for):
    released = []

    @app.task(
        base=BucketTask,
        bucket_key="domain",
        bucket_rate="5/s",
        bucket_drain_interval=None,
    )
    def fetch(domain, path):
        released.append((path, fetch.reservation.released_at))

    with running_worker(app):
        for i in range(20):
            app.send_task(fetch.name, args=["example.com", f"/{i}"])
        wait_for(lambda: len(released) == 20, timeout=60, message="20 by-name calls ran")
    stats = fetch.bucket.stats()
    assert (stats.enqueued, stats.processed, stats.depth) == (20, 20, 0)
    times = sorted(at for _, at in released)
    # Release times are the server's: no 1-second window holds more than 5 of them.
    for i, start in enumerate(times):
        assert sum(1 for t in times[i:] if t < start + 1.0) <= 5, times
    assert sorted(p for p, _ in released) == sorted(f"/{i}" for i in range(20))


def test_by_name_calls_into_a_full_reject_pool_run_at_most_its_capacity_and_are_counted(
    app, redqueue_redis, redqueue_prefix, wait_for, assert_identities
):
    ran = []

    @app.task(base=PoolTask, pool_size=10, pool_policy="reject", pool_drain_interval=None)
    def record(i):
        ran.append(i)

    for i in range(30):
        app.send_task(record.name, args=[i])
    assert broker_depth(redqueue_redis, redqueue_prefix) == 30  # nothing stored in the caller
    with running_worker(app):
        wait_for(lambda: record.pool.stats().offered == 30, message="30 calls offered")
        wait_for(lambda: record.pool.stats().processed == len(ran) == 10, message="10 ran")
        wait_for(lambda: broker_depth(redqueue_redis, redqueue_prefix) == 0, message="acked")
    stats = record.pool.stats()
    assert (stats.offered, stats.accepted, stats.rejected) == (30, 10, 20)
    assert sorted(ran) == list(range(10))  # a reject pool keeps the oldest
    assert_identities(stats)
    assert redqueue_redis.hlen(f"{redqueue_prefix}:broker:unacked") == 0


def test_a_by_name_call_is_acknowledged_only_after_it_is_stored(
    app, redqueue_redis, redqueue_prefix, wait_for
):
    """A by-name message is acked late: the worker takes it unacknowledged and acks after
    the store returned."""

    @app.task(base=PoolTask, pool_drain_interval=None)
    def record(i):
        pass

    assert record.acks_late
    app.send_task(record.name, args=[1])
    with running_worker(app):
        wait_for(lambda: record.pool.stats().processed == 1, message="the call ran")
        wait_for(
            lambda: redqueue_redis.hlen(f"{redqueue_prefix}:broker:unacked") == 0,
            message="the message acked",
        )


def test_a_malformed_by_name_call_is_dead_lettered_with_its_reason(
    app, redqueue_redis, redqueue_prefix, wait_for, assert_identities
):
    ran = []

    @app.task(base=PoolTask, pool_drain_interval=None)
    def record(product_id, user_id):
        ran.append(product_id)

    @app.task(base=BucketTask, bucket_key="shop", bucket_drain_interval=None)
    def notify(shop, order):
        ran.append(order)

    with running_worker(app):
        app.send_task(record.name, args=[1, 2, 3])  # one argument too many
        app.send_task(notify.name, kwargs={"order": 5})  # no shop: no key
        app.send_task(record.name, args=[4, 5])
        wait_for(lambda: ran == [4], message="the good call ran")
        wait_for(lambda: record.pool.stats().dead == 1, message="pool dead letter")
        wait_for(lambda: notify.bucket.stats().dead == 1, message="bucket dead letter")
    [letter] = record.pool.dead_letters()
    assert letter.payload == [[1, 2, 3], {}]
    assert "by-name call not stored" in letter.error and "TypeError" in letter.error
    [letter] = notify.bucket.dead_letters()
    assert letter.payload == [[], {"order": 5}]
    assert "by-name call not stored" in letter.error
    assert_identities(record.pool.stats())
    stats = notify.bucket.stats()
    assert stats.enqueued == stats.dead == 1
    assert broker_depth(redqueue_redis, redqueue_prefix) == 0
    assert notify.bucket.purge_dead() == 1


def test_by_name_calls_are_deduplicated_by_the_tasks_key_and_by_header(app, wait_for):
    ran = []

    @app.task(
        base=PoolTask, pool_dedupe_key=lambda order: f"order-{order}", pool_drain_interval=None
    )
    def pack(order):
        ran.append(order)

    with running_worker(app):
        for order in (1, 1, 2):
            app.send_task(pack.name, args=[order])
        wait_for(
            lambda: pack.pool.stats().offered + pack.pool.stats().duplicates >= 3,
            message="three calls seen",
        )
        wait_for(lambda: sorted(ran) == [1, 2], message="two distinct calls ran")
    assert pack.pool.stats().duplicates == 1


def test_a_by_name_call_with_a_countdown_is_stored_and_runs(app, wait_for):
    ran = []

    @app.task(base=PoolTask, pool_drain_interval=None)
    def remind(user):
        ran.append(user)

    with running_worker(app):
        app.send_task(remind.name, args=["ann"], countdown=1)
        wait_for(lambda: ran == ["ann"], timeout=30, message="the delayed call ran")
    assert remind.pool.stats().processed == 1


def test_a_by_name_lease_call_runs_holding_a_lease(app, wait_for):
    from celery_redqueue import LeaseTask, leased_resources

    leased_resources(app, "keys", ["k1"])
    held = []

    @app.task(base=LeaseTask, lease_resources="keys", lease_ttl=30)
    def fetch(url):
        held.append((url, fetch.resource))

    with running_worker(app):
        app.send_task(fetch.name, args=["https://example.com/"])
        wait_for(lambda: held, message="the leased call ran")
    assert held == [("https://example.com/", "k1")]


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_an_empty_message_is_still_a_drain_trigger(app, kind, wait_for):
    ran = []
    if kind == "pool":

        @app.task(base=PoolTask, pool_drain_interval=None)
        def task(x):
            ran.append(x)

        task.pool.add([[1], {}])
    else:

        @app.task(base=BucketTask, bucket_key="x", bucket_drain_interval=None)
        def task(x):
            ran.append(x)

        task.bucket.enqueue("1", [[1], {}])
    with running_worker(app):
        app.send_task(task.name)
        wait_for(lambda: ran == [1], message="the stored call ran")


def test_a_by_name_calls_dedupe_id_rides_in_a_header(app, wait_for):
    ran = []

    @app.task(base=PoolTask, pool_drain_interval=None)
    def pack(order):
        ran.append(order)

    with running_worker(app):
        for order in (1, 2, 3):
            app.send_task(pack.name, args=[order], headers={"redqueue_dedupe_id": "same"})
        wait_for(lambda: pack.pool.stats().duplicates == 2, message="two duplicates refused")
        wait_for(lambda: ran == [1], message="the first call ran")


def test_a_by_name_calls_message_result_is_its_receipt(app, redqueue_server_url, wait_for):
    app.conf.result_backend = redqueue_server_url

    @app.task(base=PoolTask, pool_size=1, pool_policy="reject", pool_drain_interval=None)
    def record(i):
        pass

    first = app.send_task(record.name, args=[1])
    second = app.send_task(record.name, args=[2])
    with running_worker(app):
        assert first.get(timeout=30)["kept"] is True
        refused = second.get(timeout=30)
    assert refused["kept"] is False and refused["id"] == second.id


@pytest.mark.parametrize("kind", ["pool", "bucket"])
def test_a_copy_of_a_by_name_message_is_not_stored_twice(app, kind, wait_for):
    """A redelivered message (the worker died between the store and the ack) or one sent again
    after a lost reply that was applied carries the same id: the call is stored once."""
    ran = []
    if kind == "pool":

        @app.task(base=PoolTask, pool_drain_interval=None)
        def record(i):
            ran.append(i)

        structure = record.pool
    else:

        @app.task(base=BucketTask, bucket_key="shop", bucket_drain_interval=None)
        def record(shop, i):  # type: ignore[no-redef]
            ran.append(i)

        structure = record.bucket
    args = [1] if kind == "pool" else ["s", 1]
    first = app.send_task(record.name, args=args)
    app.send_task(record.name, args=args, task_id=first.id)  # the same message again
    app.send_task(record.name, args=args)  # another message with the same arguments
    with running_worker(app):
        wait_for(lambda: structure.stats().duplicates == 1, message="the copy refused")
        wait_for(lambda: len(ran) == 2, message="two calls ran")
    assert ran == [1, 1]
