"""Problem 11 of issue 8: a lease holder is told of every loss, at once, and each lease carries
a fencing token that increases per resource."""

import time

import pytest

from celery_redqueue import LeasedResources, LeaseKeeper, LeaseTask, leased_resources
from celery_redqueue.redis.client import make_client

pytest_plugins = ["tests.faults.fixtures_errors"]


@pytest.mark.timeout(60)
def test_keeper_reports_the_loss_at_the_deadline_while_redis_is_stalled(
    fault_server, stopped, wait_for
):
    server = fault_server()
    resources = LeasedResources(make_client(server.url, {"socket_timeout": 0.5}), "gpus", ["gpu-1"])
    lease = resources.acquire(ttl=1.0)
    reports = []
    keeper = LeaseKeeper(resources, lease, 1.0)
    keeper.on_lost = lambda lost, why: reports.append((time.monotonic(), why))
    keeper.start()
    with stopped(server):
        # Redis cannot renew nor say the lease is gone: the keeper must not wait for it.
        wait_for(lambda: keeper.lost, timeout=10, message="the loss reported during the stall")
        assert keeper.lost_reason and "deadline" in keeper.lost_reason
        noticed = time.monotonic()
    assert len(reports) == 1
    assert reports[0][0] >= lease.local_deadline  # never before the lease could have ended
    print(
        f"\nloss reported {1000 * (reports[0][0] - lease.local_deadline):.0f} ms after the "
        f"local deadline; checked {1000 * (noticed - lease.local_deadline):.0f} ms after it"
    )

    # Redis is back: the lease ran out there too; the release says so and reports nothing new.
    assert keeper.release() is False
    assert len(reports) == 1
    successor = resources.acquire(ttl=5)
    assert successor is not None and successor.fence > lease.fence


@pytest.mark.timeout(60)
def test_every_release_that_finds_the_lease_gone_is_a_reported_loss(make):
    resources = make(resources=["r1", "r2"])
    reports = []
    falses = 0
    for _ in range(15):
        lease = resources.acquire(ttl=0.05)
        keeper = LeaseKeeper(resources, lease, 0.05, on_lost=lambda lost, why: reports.append(why))
        time.sleep(0.1)  # the holder overran its lease (no renewing thread)
        if not keeper.release():
            falses += 1
        assert keeper.lost
    assert falses == 15
    assert len(reports) == 15

    lost_in_block = []
    with resources.lease(ttl=0.05, on_lost=lambda lost, why: lost_in_block.append(lost.resource)):
        time.sleep(0.1)
    assert len(lost_in_block) == 1


@pytest.mark.timeout(60)
def test_a_held_lease_released_in_time_is_not_a_loss(make):
    resources = make(resources=["r1"])
    reports = []
    lease = resources.acquire(ttl=0.3)
    keeper = LeaseKeeper(resources, lease, 0.3, on_lost=lambda lost, why: reports.append(why))
    keeper.start()
    time.sleep(0.5)  # renewed past its first ttl
    assert not keeper.lost
    assert keeper.release() is True
    time.sleep(0.4)  # the local deadline passes after the release: still no loss
    assert not keeper.lost
    assert reports == []


@pytest.mark.timeout(60)
def test_fencing_tokens_increase_per_resource_even_after_redis_lost_its_data(fault_server):
    server = fault_server()
    resources = LeasedResources(make_client(server.url), "accounts", ["a", "b"])
    fences = {"a": [], "b": []}
    for _ in range(5):
        for lease in (resources.acquire(ttl=5), resources.acquire(ttl=5)):
            fences[lease.resource].append(lease.fence)
            resources.release(lease)
    for seen in fences.values():
        assert seen == sorted(seen) and len(set(seen)) == len(seen)
    last = max(fences["a"])

    server.restart()  # no persistence: every key is gone
    resources = LeasedResources(make_client(server.url), "accounts", ["a", "b"])
    after = [resources.acquire(ttl=5), resources.acquire(ttl=5)]
    assert {lease.resource for lease in after} == {"a", "b"}
    assert all(lease.fence > last for lease in after if lease.resource == "a")


@pytest.mark.timeout(120)
def test_fencing_tokens_keep_growing_after_a_restart_with_many_acquires_per_ms(fault_server):
    """Issue 18, 6: a resource leased several times a millisecond. Tokens in whole ms of server
    time ran ahead of the clock (last + 1 per acquire), so after a restart without persistence
    the first token (the clock) was smaller than the last one before it."""
    server = fault_server()
    resources = LeasedResources(make_client(server.url), "hot", ["only"])
    from celery_redqueue.redis.lua import script

    resources.release(resources.acquire(ttl=5))  # loads the scripts
    # Acquire and release pipelined, as many clients of one hot resource would do together.
    acquire, release = script("lease_acquire"), script("lease_release")
    keys = resources._keys
    fences = []
    started = time.monotonic()
    for round_ in range(20):
        pipe = resources.client.pipeline(transaction=False)
        for i in range(500):
            # Queued by SHA on the pipeline (as the heartbeat's renewals are): calling a script
            # object runs it at once through the package's own call path.
            pipe.evalsha(acquire.sha, len(keys), *keys, 5000, f"t{round_}-{i}", 100)
            pipe.evalsha(release.sha, len(keys), *keys, "only", f"t{round_}-{i}")
        fences += [int(reply[3]) for reply in pipe.execute()[::2]]
    per_ms = len(fences) / ((time.monotonic() - started) * 1000)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    server.restart()  # no persistence: the fences hash is gone
    resources = LeasedResources(make_client(server.url), "hot", ["only"])
    first = resources.acquire(ttl=5)
    print(f"\n{per_ms:.1f} acquires per ms; last token {fences[-1]}, after restart {first.fence}")
    assert first.fence > fences[-1]


@pytest.fixture
def make(redqueue_redis, redqueue_prefix):
    def build(name="res", resources=()):
        return LeasedResources(redqueue_redis, name, resources, prefix=redqueue_prefix)

    return build


@pytest.mark.timeout(60)
def test_a_lease_task_learns_that_its_lease_ran_out(redqueue_celery_app):
    app = redqueue_celery_app
    leased_resources(app, "devices", ["phone-1"])
    reports = []

    class Guarded(LeaseTask):
        def on_lease_lost(self, lease, reason):
            reports.append((lease.resource, reason))

    @app.task(
        base=Guarded, bind=True, shared=False, lease_resources="devices", lease_ttl=0.2,
        lease_renew=False,
    )  # fmt: skip
    def overrun(self):
        fence = self.lease.fence
        time.sleep(0.4)  # longer than the lease, with nothing renewing it
        return self.lease_lost, fence

    lost, fence = overrun.apply().get()
    assert lost is True
    assert len(reports) == 1 and reports[0][0] == "phone-1"
    assert overrun.apply().get()[1] > fence
