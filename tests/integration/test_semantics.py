"""Queue semantics through the Celery task API: delays, dedupe, the guard, dead letters."""

import threading
import time
from datetime import timedelta

from celery_redqueue import BucketTask, PoolTask
from celery_redqueue.structures.bucket import LeakyBucket
from celery_redqueue.tasks.heartbeat import heartbeat

from .conftest import running_worker


class Reaper:
    """Runs a task's reaper every 50 ms, as beat would (faster, for the test)."""

    def __init__(self, task):
        self.task, self.stop = task, threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        while not self.stop.wait(0.05):
            self.task.reap()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def test_bucket_countdown_longer_than_the_reservation_runs_once(app, wait_for):
    runs = []

    @app.task(base=BucketTask, bucket_key=lambda job: "k", bucket_visibility_timeout=0.3)
    def cancel_unpaid(job):
        runs.append((job, time.monotonic()))

    sent = time.monotonic()
    receipt = cancel_unpaid.apply_async(("order-1",), countdown=1.0)
    assert receipt.delayed and receipt.wake_in is not None
    with running_worker(app), Reaper(cancel_unpaid):
        wait_for(lambda: runs, timeout=30)
        time.sleep(1.0)  # several reaper rounds past the reservation timeout
    assert [job for job, _ in runs] == ["order-1"]
    assert runs[0][1] - sent >= 0.9
    stats = cancel_unpaid.bucket.stats()
    assert (stats.processed, stats.redelivered, stats.delayed) == (1, 0, 0)


def test_pool_eta_longer_than_the_batch_timeout_runs_once(app, wait_for):
    runs = []

    @app.task(
        base=PoolTask,
        pool_delivery="at_least_once",
        pool_visibility_timeout=0.3,
        pool_policy="newest",
    )
    def remind(user):
        runs.append(user)

    remind.apply_async(("ann",), eta=app.now() + timedelta(seconds=1.0))
    assert remind.pool.stats().delayed == 1
    with running_worker(app), Reaper(remind):
        wait_for(lambda: runs, timeout=30)
        time.sleep(1.0)
    assert runs == ["ann"]
    stats = remind.pool.stats()
    assert (stats.processed, stats.redelivered, stats.delayed, stats.depth) == (1, 0, 0, 0)


def test_duplicate_calls_inside_the_window_are_refused(app):
    @app.task(base=PoolTask, pool_dedupe_key=lambda order_id, kind: f"{order_id}:{kind}")
    def notify(order_id, kind):
        pass

    @app.task(base=BucketTask, bucket_key="order_id", bucket_dedupe_window=60)
    def apply_points(order_id, points):
        pass

    assert notify.delay(1, "sms").kept
    assert notify.delay(1, "sms").duplicate
    assert notify.delay(1, "email").kept
    assert apply_points.apply_async((1, 10), dedupe_id="points-1").kept
    assert apply_points.apply_async((1, 10), dedupe_id="points-1").duplicate
    assert notify.pool.stats().duplicates == 1
    assert apply_points.bucket.stats().duplicates == 1


def test_guard_keeps_a_redelivered_item_from_applying_twice(app, wait_for):
    applied = []

    @app.task(
        base=BucketTask,
        bucket_key="order_id",
        bucket_rate="100/s",
        bucket_visibility_timeout=0.2,
        bucket_processed_guard=3600,
    )
    def apply_points(order_id, points):
        if not applied:
            # The heartbeat stops renewing this reservation (as when a process stalls), so the
            # body outlives it and the reaper hands out a copy.
            heartbeat().drop(apply_points.bucket, apply_points.reservation.id)
            time.sleep(0.6)
        applied.append((order_id, points))

    apply_points.delay("o-1", 50)
    with running_worker(app), Reaper(apply_points):
        wait_for(lambda: apply_points.bucket.stats().guard_skipped == 1, timeout=30)
    assert applied == [("o-1", 50)]


def test_dead_letters_requeued_through_the_task_run_again(app, wait_for):
    outcomes = []

    @app.task(base=BucketTask, bucket_key=lambda x: "k", bucket_rate="100/s")
    def fragile(x):
        if not outcomes:
            outcomes.append("failed")
            raise ValueError("first time")
        outcomes.append("ok")

    fragile.delay(1)
    with running_worker(app):
        wait_for(lambda: fragile.bucket.stats().dead == 1, timeout=30)
        assert fragile.bucket.dead_letters()[0].error == "ValueError: first time"
        assert fragile.requeue_dead() == 1
        wait_for(lambda: fragile.bucket.stats().processed == 1, timeout=30)
    assert outcomes == ["failed", "ok"]


def test_beat_reaper_also_reaps_registered_structures(app, redqueue_redis, redqueue_prefix):
    """A bucket used by another process (no task in this app) is still reaped."""
    bucket = LeakyBucket(
        redqueue_redis,
        "used-elsewhere",
        prefix=redqueue_prefix,
        visibility_timeout=0.05,
        default_rate="100/s",
    )
    bucket.enqueue("k", "item")
    assert bucket.dequeue().reservation is not None
    time.sleep(0.1)
    app.finalize()
    result = app.tasks["celery_redqueue.reap"].apply().get()
    assert result == {"bucket:used-elsewhere": 1}
    assert bucket.dequeue().reservation.receives == 2
