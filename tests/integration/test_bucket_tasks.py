"""BucketTask with real Celery workers on a real Redis broker."""

import threading
import time

import pytest

from celery_redqueue import (
    BucketTask,
    ConfigurationError,
    InvalidArgumentError,
    Receipt,
    RedQueueError,
    bucket_task,
)

from .conftest import running_worker


def test_worker_releases_each_key_at_its_rate(app, wait_for):
    done = []
    lock = threading.Lock()

    @app.task(base=BucketTask, bucket_key="domain", bucket_rate="4/s")
    def fetch(domain, path):
        with lock:
            done.append((domain, path, time.time()))

    fetch.bucket.set_rate("fast.example", "50/s")
    receipts = [fetch.delay("slow.example", f"/{i}") for i in range(4)]
    receipts += [fetch.delay(domain="fast.example", path=f"/{i}") for i in range(20)]
    assert all(isinstance(r, Receipt) and r.kept for r in receipts)
    assert sum(r.drain_needed for r in receipts) == 1
    with running_worker(app, pool="threads", concurrency=2):
        wait_for(lambda: fetch.bucket.stats().processed == 24, timeout=60)
    slow = sorted(t for d, _, t in done if d == "slow.example")
    fast_paths = [p for d, p, _ in done if d == "fast.example"]
    assert sorted(fast_paths, key=lambda p: int(p[1:])) == [f"/{i}" for i in range(20)]
    # Four items at 4/s cannot all start within less than three intervals (0.75 s).
    assert slow[-1] - slow[0] >= 0.7
    assert fetch.bucket.stats().in_flight == 0


def test_failures_retry_with_backoff_then_dead_letter(app, wait_for):
    attempts, receives = [], []

    @app.task(
        base=BucketTask,
        bucket_key=lambda order: f"order-{order['id']}",
        bucket_rate="100/s",
        autoretry_for=(ValueError,),
        max_retries=2,
        retry_backoff=False,
        default_retry_delay=0.05,
    )
    def apply_points(order):
        attempts.append(order["id"])
        if order["id"] == 1:
            receives.append(apply_points.reservation.receives)
        if order.get("malformed"):
            raise ValueError("order has no customer")

    apply_points.delay({"id": 1, "malformed": True})
    apply_points.delay({"id": 2})
    with running_worker(app):
        wait_for(lambda: apply_points.bucket.stats().dead == 1, timeout=60)
        wait_for(lambda: apply_points.bucket.stats().processed == 1, timeout=60)
    assert attempts.count(1) == 3  # first try plus max_retries=2
    assert receives == [1, 2, 3]  # the body sees its reservation
    assert apply_points.reservation is None  # outside a drain
    (letter,) = apply_points.bucket.dead_letters()
    assert letter.payload == [[{"id": 1, "malformed": True}], {}]
    assert letter.receives == 3
    assert letter.error == "ValueError: order has no customer"


def test_unexpected_exception_is_dead_lettered_at_once(app, wait_for):
    @app.task(base=BucketTask, bucket_key=lambda x: "k", bucket_rate="100/s")
    def poison(x):
        raise KeyError(x)

    poison.delay("boom")
    with running_worker(app):
        wait_for(lambda: poison.bucket.stats().dead == 1, timeout=60)
    assert poison.bucket.dead_letters()[0].receives == 1


def test_ordered_bucket_completes_each_key_in_order(app, wait_for):
    steps = []

    @app.task(base=BucketTask, bucket_key="order_id", bucket_rate="1000/s", bucket_ordered=True)
    def process(order_id, step):
        time.sleep(0.005)
        steps.append((order_id, step))

    for step in ("placed", "paid", "packed", "shipped"):
        for order_id in ("A", "B", "C"):
            process.delay(order_id, step)
    with running_worker(app, pool="threads", concurrency=3):
        wait_for(lambda: process.bucket.stats().processed == 12, timeout=60)
    for order_id in ("A", "B", "C"):
        assert [s for o, s in steps if o == order_id] == ["placed", "paid", "packed", "shipped"]


def test_drain_sleeps_until_the_next_key_is_eligible(
    app, redqueue_redis, redqueue_prefix, wait_for
):
    """With one slow key the drain schedules itself rather than looping: few broker messages."""

    @app.task(base=BucketTask, bucket_key=lambda i: "slow", bucket_rate="5/s")
    def tick(i):
        pass

    for i in range(5):
        tick.delay(i)
    sent = []
    original = tick.send_drain

    def counting_send_drain(**options):
        sent.append(options.get("countdown"))
        return original(**options)

    tick.send_drain = counting_send_drain
    with running_worker(app):
        wait_for(lambda: tick.bucket.stats().processed == 5, timeout=60)
    # One self-scheduled job per wait (four waits at 5/s), each with a countdown: no busy loop.
    assert 1 <= len(sent) <= 8
    assert all(c is not None and 0 < c <= 0.2 + 1e-6 for c in sent)


def test_call_site_errors_store_nothing(app):
    @app.task(base=BucketTask, bucket_key=lambda url: url.split("/")[2])
    def fetch(url):
        pass

    with pytest.raises(RedQueueError, match="bucket_key failed"):
        fetch.delay("no-slashes")
    with pytest.raises(TypeError):
        fetch.delay("a", "b")
    # No arguments at all, to a body that needs some: a forgotten argument, refused.
    with pytest.raises(InvalidArgumentError, match=r"fetch\(url\) needs arguments"):
        fetch.delay()

    @app.task(base=BucketTask, bucket_key=lambda x: 42)
    def numeric(x):
        pass

    with pytest.raises(RedQueueError, match="non-empty string"):
        numeric.delay(1)
    assert fetch.bucket.stats().enqueued == 0 and numeric.bucket.stats().enqueued == 0


@pytest.mark.parametrize(
    "options, name",
    [
        ({"bucket_rate": "10/x"}, "bucket_rate"),
        ({"bucket_burst": -1}, "bucket_burst"),
        ({"bucket_max_receives": 0}, "bucket_max_receives"),
        ({"bucket_overflow": "drop_newest"}, "bucket_overflow"),
        ({"bucket_key": 5}, "bucket_key"),
        ({"bucket_drain_lease": 0}, "bucket_drain_lease"),
        ({"bucket_drain_linger": -1}, "bucket_drain_linger"),
        ({"bucket_dedupe_key": "x"}, "bucket_dedupe_key"),
        ({"bucket_dedupe_window": -1}, "bucket_dedupe_window"),
        ({"bucket_name": ""}, "bucket_name"),
    ],
)
def test_bad_options_fail_at_decoration(options, name):
    options.setdefault("bucket_key", "x")
    with pytest.raises(ConfigurationError, match=name):

        @bucket_task(**options)
        def f(x):
            pass


def test_bucket_key_is_required():
    with pytest.raises(ConfigurationError, match="bucket_key"):

        @bucket_task(bucket_rate="1/s")
        def f(x):
            pass


def test_eager_mode_runs_the_body(app):
    app.conf.task_always_eager = True

    @app.task(base=BucketTask, bucket_key="user")
    def notify(user, text):
        return f"{user}:{text}"

    assert notify.delay("ann", "hi").get() == "ann:hi"
    assert notify.bucket.stats().enqueued == 0


def test_self_retry_in_a_bound_body_releases_then_dead_letters(app, wait_for):
    tries = []

    @app.task(
        base=BucketTask, bind=True, bucket_key=lambda x: "k", bucket_rate="100/s", max_retries=1
    )
    def flaky(self, x):
        tries.append(x)
        raise self.retry(exc=ConnectionError("upstream down"), countdown=0.05)

    flaky.delay("a")
    with running_worker(app):
        wait_for(lambda: flaky.bucket.stats().dead == 1, timeout=60)
    assert tries == ["a", "a"]
    assert flaky.bucket.dead_letters()[0].error == "ConnectionError: upstream down"
