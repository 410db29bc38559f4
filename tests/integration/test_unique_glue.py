"""`celery_redqueue.unique` in Celery's in-process worker and in eager mode: a queued call's
retry refused while another call of its key waits, and retries under ``task_always_eager``
(tests that run tasks eagerly) in every mode."""

import pytest

from celery_redqueue import unique

from .conftest import running_worker


def test_a_queued_retry_is_refused_while_another_call_of_its_key_waits(app, wait_for):
    ran = []

    @unique(key=["job"], mode="queued", ttl=10)
    @app.task(bind=True, name="glue.refresh")
    def refresh(self, job, who):
        ran.append((who, self.request.retries))
        if who == "first" and self.request.retries == 0:
            refresh.delay(job, "second")  # waits in the broker: it holds the key now
            raise self.retry(countdown=0)

    locks = refresh.unique_locks()
    first = refresh.delay("k", "first").id
    with running_worker(app):
        wait_for(lambda: ("second", 0) in ran and not locks.held(), timeout=60, message="runs")
    # The first call's retry found the second call waiting and was refused: that call does
    # the work, once.
    assert ran == [("first", 0), ("second", 0)]
    stats = locks.stats()
    assert (stats.acquired, stats.refused, stats.released, stats.held) == (2, 1, 2, 0)
    assert locks.holder("job='k'") is None
    assert first not in [h.task_id for h in locks.held()]


@pytest.mark.parametrize("mode", ["queued", "running", "until_done"])
def test_eager_retries_run_and_free_the_key(app, mode):
    app.conf.task_always_eager = True
    ran = []

    @unique(key=["job"], mode=mode, ttl=10)
    @app.task(bind=True, name=f"glue.eager_{mode}", max_retries=2)
    def job(self, job):
        ran.append(self.request.retries)
        if self.request.retries < 2:
            raise self.retry(countdown=0)
        return "done"

    assert job.delay("k").get() == "done"
    assert ran == [0, 1, 2]
    locks = job.unique_locks()
    assert locks.held() == []
    assert locks.stats().refused == 0
    # The key is free: the next call runs too.
    assert job.delay("k").get() == "done"
