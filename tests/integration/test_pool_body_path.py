"""A drain reaches a plain pooled task's body without the per-call ``__call__`` chain (resolved
once per batch), and the body still runs as a stored call: ``self.retry()`` raises the drain's
Retry (the call waits in its pool for its countdown and is counted as retried, not sent to the
broker), and a base with a ``__call__`` of its own is still entered once per call."""

from celery import Task

from celery_redqueue import PoolTask


def test_a_plain_body_runs_as_a_stored_call(app, redqueue_redis, redqueue_prefix):
    seen = []

    @app.task(base=PoolTask, bind=True, pool_drain_interval=None, pool_drain_linger=0)
    def record(self, n):
        seen.append((n, self._in_stored_call()))
        if n == 2:
            self.retry(countdown=5)

    record.add_many([((n,), {}) for n in range(4)])
    summary = record.drain()
    assert sorted(seen) == [(0, True), (1, True), (2, True), (3, True)]
    assert (summary.processed, summary.failed, summary.retried) == (3, 0, 1)
    stats = record.pool.stats()
    assert (stats.processed, stats.failed, stats.retried, stats.depth) == (3, 0, 1, 1)
    # The drain job add_many sent and the one scheduled for the retry's countdown: the call
    # itself went back to the pool, not to the broker.
    assert redqueue_redis.llen(f"{redqueue_prefix}:broker:celery") == 2
    assert not record._in_stored_call()


def test_a_base_with_its_own_call_is_entered_per_stored_call(app):
    entered = []

    class Counting(Task):
        def __call__(self, *args, **kwargs):
            entered.append(args)
            return super().__call__(*args, **kwargs)

    class Pooled(Counting, PoolTask):
        pass

    @app.task(base=Pooled, pool_drain_interval=None, pool_drain_linger=0)
    def record(n):
        return n

    record.add_many([((n,), {}) for n in range(3)])
    assert record.drain().processed == 3
    assert sorted(entered) == [(0,), (1,), (2,)]
