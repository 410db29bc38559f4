"""LeaseTask with a real Celery worker on a real Redis broker."""

import threading
import time

import pytest
from celery.signals import task_failure, task_retry

from celery_redqueue.errors import ConfigurationError, NoFreeResourceError, RedQueueError
from celery_redqueue.tasks.lease import LeaseTask, lease_task, leased_resources

from .conftest import running_worker


@pytest.fixture
def signals():
    """Failures and retries of tasks, recorded through Celery's own signals."""
    seen = {"failures": [], "retries": []}

    def on_failure(sender=None, exception=None, **kwargs):
        seen["failures"].append((sender.name, exception))

    def on_retry(sender=None, reason=None, **kwargs):
        seen["retries"].append((sender.name, reason))

    task_failure.connect(on_failure, weak=False)
    task_retry.connect(on_retry, weak=False)
    yield seen
    task_failure.disconnect(on_failure)
    task_retry.disconnect(on_retry)


def test_body_sees_its_resource_and_releases_it(app, wait_for):
    resources = leased_resources(app, "keys", ["key-1"])
    seen = []

    @app.task(base=LeaseTask, lease_resources="keys", lease_ttl=30, bind=True)
    def use_key(self, x):
        seen.append((x, self.resource, resources.stats().leased))

    with running_worker(app):
        use_key.delay(1)
        wait_for(lambda: seen, message="body ran")
        wait_for(lambda: resources.stats().released == 1, message="lease released")
    assert seen == [(1, "key-1", 1)]
    stats = resources.stats()
    assert (stats.free, stats.leased, stats.acquired) == (1, 0, 1)
    assert use_key.lease is None  # nothing is held outside a call


def test_unbound_body_reads_the_resource_from_the_task(app, wait_for):
    leased_resources(app, "devices", ["phone-1"])
    seen = []

    @lease_task(app=app, lease_resources="devices")
    def flash(build):
        seen.append((build, flash.resource))

    with running_worker(app):
        flash.delay("b42")
        wait_for(lambda: seen, message="body ran")
    assert seen == [("b42", "phone-1")]


def test_call_without_a_free_resource_is_retried_until_one_frees_up(app, signals, wait_for):
    resources = leased_resources(app, "accounts", ["acct"])
    held = resources.acquire(ttl=60)
    seen = []

    @app.task(
        base=LeaseTask,
        lease_resources="accounts",
        lease_retry_backoff=0.2,
        lease_retry_backoff_max=0.4,
        bind=True,
    )
    def charge(self, amount):
        seen.append((amount, self.resource, self.request.retries))

    others = []

    @app.task
    def other_work():
        others.append(1)

    with running_worker(app):  # a single solo worker
        charge.delay(5)
        wait_for(lambda: len(signals["retries"]) >= 2, message="two retries")
        assert seen == []  # the body never ran without the resource
        other_work.delay()  # the waiting call does not occupy the worker
        wait_for(lambda: others, message="other work ran meanwhile")
        assert seen == []
        assert resources.release(held)
        wait_for(lambda: seen, message="body ran after the release")
    assert seen[0][:2] == (5, "acct") and seen[0][2] >= 2
    assert all(isinstance(reason.exc, NoFreeResourceError) for _, reason in signals["retries"])
    assert resources.stats().missed >= 2
    assert resources.stats().free == 1


def test_lease_is_released_after_the_body_fails(app, signals, wait_for):
    resources = leased_resources(app, "keys", ["key-1"])

    @app.task(base=LeaseTask, lease_resources="keys")
    def explode():
        raise ValueError("boom")

    with running_worker(app):
        explode.delay()
        wait_for(lambda: signals["failures"], message="task failed")
        wait_for(lambda: resources.stats().released == 1, message="lease released")
    assert isinstance(signals["failures"][0][1], ValueError)
    stats = resources.stats()
    assert (stats.free, stats.leased, stats.reclaimed) == (1, 0, 0)


def test_long_body_keeps_its_lease_by_renewing_it(app, wait_for):
    resources = leased_resources(app, "slow", ["only"])
    done = threading.Event()
    probes = []

    @app.task(base=LeaseTask, lease_resources="slow", lease_ttl=0.6)
    def slow():
        deadline = time.monotonic() + 2.0  # more than three TTLs
        while time.monotonic() < deadline:
            probes.append(resources.acquire(ttl=30))  # somebody else tries to take it meanwhile
            time.sleep(0.2)
        done.set()

    with running_worker(app):
        slow.delay()
        wait_for(done.is_set, message="slow body finished")
        wait_for(lambda: resources.stats().released == 1, message="lease released")
    assert probes and all(p is None for p in probes)
    stats = resources.stats()
    assert stats.renewed >= 2
    assert (stats.reclaimed, stats.free) == (0, 1)


def test_retries_give_up_with_no_free_resource_error(app, signals, wait_for):
    resources = leased_resources(app, "scarce", ["one"])
    resources.acquire(ttl=60)

    @app.task(
        base=LeaseTask,
        lease_resources="scarce",
        lease_retry_backoff=0.1,
        lease_retry_jitter=False,
        lease_max_retries=2,
    )
    def never_runs():
        raise AssertionError("ran without a resource")

    with running_worker(app):
        never_runs.delay()
        wait_for(lambda: signals["failures"], message="task gave up")
    assert len(signals["retries"]) == 2
    assert isinstance(signals["failures"][0][1], NoFreeResourceError)


def test_body_retries_itself_with_its_own_request(app, signals, wait_for):
    # The body sees the request of the call that runs it, on every supported Celery: before 5.5,
    # Task.__call__ pushed a bare one (no id, retries 0, "called directly"), and the body's own
    # autoretry_for re-raised at once instead of retrying.
    resources = leased_resources(app, "own", ["one"])
    runs = []

    @app.task(
        base=LeaseTask,
        lease_resources="own",
        bind=True,
        autoretry_for=(ValueError,),
        max_retries=2,
        retry_kwargs={"countdown": 0.1},
    )
    def flaky(self):
        runs.append((self.request.id, self.request.retries))
        raise ValueError("always")

    with running_worker(app):
        result = flaky.delay()
        wait_for(lambda: signals["failures"], message="task gave up")
        wait_for(lambda: resources.stats().released == 3, message="every lease released")
    assert runs == [(result.id, 0), (result.id, 1), (result.id, 2)]
    assert isinstance(signals["failures"][0][1], ValueError)
    assert resources.stats().free == 1


def test_eager_body_sees_its_request(app):
    leased_resources(app, "eager-request", ["e1"])

    @app.task(base=LeaseTask, lease_resources="eager-request", bind=True)
    def which(self):
        return self.request.id, self.request.is_eager

    app.conf.task_always_eager = True
    result = which.delay()
    assert tuple(result.get()) == (result.id, True)


def test_pool_without_resources_is_a_configuration_error(app):
    @app.task(base=LeaseTask, lease_resources="undeclared")
    def orphan():
        return "ran"

    with pytest.raises(ConfigurationError, match="undeclared"):
        orphan()


def test_direct_and_eager_calls(app):
    resources = leased_resources(app, "eager", ["e1"])

    @app.task(base=LeaseTask, lease_resources="eager", bind=True)
    def which(self):
        return self.resource

    assert which() == "e1"
    app.conf.task_always_eager = True
    assert which.delay().get() == "e1"
    held = resources.acquire(ttl=60)
    with pytest.raises(NoFreeResourceError):
        which()
    with pytest.raises(NoFreeResourceError):
        which.delay().get()  # no eager retry loop
    resources.release(held)
    assert resources.stats().free == 1


def test_pool_name_defaults_to_the_task_name(app):
    @app.task(base=LeaseTask, name="tasks.crawl", bind=True)
    def crawl(self):
        return self.resource

    leased_resources(app, "tasks.crawl", ["proxy-1"])
    assert crawl.leased_resources.name == "tasks.crawl"
    assert crawl() == "proxy-1"


def test_resource_outside_a_call_is_an_error(app):
    @app.task(base=LeaseTask, lease_resources="keys")
    def noop():
        pass

    with pytest.raises(RedQueueError, match="only available while"):
        _ = noop.resource


@pytest.mark.parametrize(
    "option, value",
    [
        ("lease_ttl", 0),
        ("lease_ttl", "60"),
        ("lease_wait", -1),
        ("lease_retry_backoff", 0),
        ("lease_retry_backoff_max", None),
        ("lease_max_retries", -1),
        ("lease_max_retries", 1.5),
        ("lease_renew", "yes"),
        ("lease_retry_jitter", 1),
        ("lease_resources", "bad{name}"),
        ("lease_resources", ""),
    ],
)
def test_bad_options_fail_at_decoration_naming_the_option(app, option, value):
    with pytest.raises(ConfigurationError, match=option):

        @lease_task(app=app, **{option: value})
        def task():
            pass


def test_bad_options_fail_on_subclassing():
    with pytest.raises(ConfigurationError, match="lease_ttl"):

        class Broken(LeaseTask):
            lease_ttl = -5


def test_leased_resources_helper_is_one_object_per_process_and_merges_declarations(app):
    first = leased_resources(app, "merged", ["a"])
    second = leased_resources(app, "merged", ["b"])
    assert first is second
    assert first.resources() == {"a", "b"}
    with pytest.raises(ConfigurationError):
        leased_resources(app, "x{y}")


def test_lease_retries_do_not_change_the_bodys_own_retry_limit(app, signals, wait_for):
    resources = leased_resources(app, "limits", ["one"])
    held = resources.acquire(ttl=60)
    runs = []

    @app.task(
        base=LeaseTask,
        lease_resources="limits",
        lease_retry_backoff=0.1,
        lease_max_retries=10,
        autoretry_for=(ValueError,),
        max_retries=1,
        retry_kwargs={"countdown": 0.1},
    )
    def flaky():
        runs.append(1)
        raise ValueError("always")

    with running_worker(app):
        flaky.delay()
        wait_for(lambda: signals["retries"], message="a retry for want of a resource")
        resources.release(held)
        wait_for(lambda: signals["failures"], message="task gave up")
    assert isinstance(signals["failures"][0][1], ValueError)
    # The body's own limit (max_retries=1) still applies, not lease_max_retries=10; the retry
    # spent waiting for the resource counts in request.retries (documented), so no run is left.
    assert len(runs) == 1
