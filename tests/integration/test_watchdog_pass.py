"""One pass of the workers' watchdog (celery_redqueue/tasks/watchdog.py), in this process: of
many workers looking at a stranded structure at once only one sends its drain; a structure that
fails does not stop the others; a worker watches only what its queues carry. The watchdog in
real `celery worker` processes: tests/faults/test_watchdog.py."""

import threading
import time

from celery_redqueue import BucketTask, PoolTask
from celery_redqueue.tasks.watchdog import watch_once, watched_tasks

from .conftest import broker_depth


def test_of_many_watchdogs_looking_at_once_only_one_sends_the_drain(
    app, redqueue_redis, redqueue_prefix
):
    @app.task(base=PoolTask, pool_drain_lease=0.3, pool_drain_interval=None)
    def t(i):
        pass

    assert t.delay(0).drain_sent
    # The worker that took the drain job died with it: the job is gone, its flag expires.
    redqueue_redis.delete(f"{redqueue_prefix}:broker:celery")
    time.sleep(0.5)
    assert not t.pool.stats().drains and len(t.pool) == 1
    start = threading.Barrier(8)

    def look():
        start.wait()
        watch_once([t])

    threads = [threading.Thread(target=look) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1
    assert t.pool.stats().drains == 1
    # The flag the winner armed is live: later passes send nothing more.
    watch_once([t])
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1


def test_a_structure_that_fails_does_not_stop_the_pass(app, redqueue_redis, redqueue_prefix):
    @app.task(base=PoolTask, pool_drain_interval=None)
    def broken(i):
        pass

    @app.task(base=BucketTask, bucket_key="k", bucket_drain_lease=0.3, bucket_drain_interval=None)
    def stranded(k):
        pass

    redqueue_redis.set(broken.pool.keys("inflight"), "not a sorted set")  # its reap raises
    assert stranded.delay("a").drain_sent
    redqueue_redis.delete(f"{redqueue_prefix}:broker:celery")
    time.sleep(0.5)
    watch_once([broken, stranded])
    assert broker_depth(redqueue_redis, redqueue_prefix) == 1  # the bucket's drain


def test_a_worker_watches_the_structures_its_queues_carry(app):
    @app.task(base=PoolTask, pool_drain_interval=None)
    def here(i):
        pass

    @app.task(base=PoolTask, pool_drain_interval=None, queue="elsewhere")
    def there(i):
        pass

    @app.task
    def plain(i):
        pass

    assert [t.name for t in watched_tasks(app, {"celery"})] == [here.name]
    assert [t.name for t in watched_tasks(app, {"elsewhere"})] == [there.name]
    assert {t.name for t in watched_tasks(app, None)} == {here.name, there.name}
