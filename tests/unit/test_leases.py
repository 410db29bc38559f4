"""LeasedResources against a real Redis: exclusivity across processes, expiry, stale holders."""

import multiprocessing
import os
import random
import signal
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from celery_redqueue.errors import (
    ConfigurationError,
    RedisUnavailableError,
    RedQueueError,
    ReservationError,
)
from celery_redqueue.structures.leases import (
    Lease,
    LeasedResources,
    LeaseKeeper,
    NoFreeResourceError,
)


@pytest.fixture
def make(redqueue_redis, redqueue_prefix):
    def make(resources=("a", "b", "c"), name="p", **kwargs):
        return LeasedResources(redqueue_redis, name, resources, prefix=redqueue_prefix, **kwargs)

    return make


def test_acquire_takes_each_resource_once_then_none(make):
    resources = make()
    leases = [resources.acquire(ttl=30) for _ in range(3)]
    assert all(isinstance(lease, Lease) for lease in leases)
    assert sorted(lease.resource for lease in leases) == ["a", "b", "c"]
    assert len({lease.token for lease in leases}) == 3
    assert resources.acquire(ttl=30) is None
    stats = resources.stats()
    assert (stats.resources, stats.free, stats.leased, stats.acquired, stats.missed) == (
        3,
        0,
        3,
        3,
        1,
    )
    assert all(resources.release(lease) for lease in leases)
    stats = resources.stats()
    assert (stats.free, stats.leased, stats.released) == (3, 0, 3)


def test_lease_expiry_is_reported_by_the_server_clock(make, redqueue_redis):
    resources = make()
    seconds, micros = redqueue_redis.time()
    lease = resources.acquire(ttl=30)
    assert lease.expires_at == pytest.approx(seconds + micros / 1e6 + 30, abs=5)


def test_least_recently_used_resource_goes_first(make):
    resources = make()
    a, b, c = sorted(
        (resources.acquire(ttl=30) for _ in range(3)), key=lambda lease: lease.resource
    )
    for lease in (c, a, b):
        assert resources.release(lease)
        time.sleep(0.01)  # release times are kept in ms; keep them distinct
    assert [resources.acquire(ttl=30).resource for _ in range(3)] == ["c", "a", "b"]


def test_new_resources_go_before_used_ones(make):
    resources = make(resources=["old"])
    resources.release(resources.acquire(ttl=30))
    assert resources.add_resources("new") == 1
    assert resources.acquire(ttl=30).resource == "new"


def test_stale_holder_cannot_release_or_renew(make, wait_for):
    resources = make(resources=["only"])
    stale = resources.acquire(ttl=0.2)
    wait_for(lambda: resources.stats().expired == 1, timeout=10, message="lease expiry")
    fresh = resources.acquire(ttl=30)
    assert fresh is not None and fresh.resource == "only"
    assert resources.release(stale) is False
    assert resources.renew(stale, 30) is None
    # The new holder is untouched by the stale calls.
    stats = resources.stats()
    assert (stats.leased, stats.free, stats.reclaimed, stats.released) == (1, 0, 1, 0)
    assert resources.acquire(ttl=30) is None
    assert resources.renew(fresh, 30) is not None
    assert resources.release(fresh) is True


def test_release_after_expiry_fails_but_frees_the_resource(make, wait_for):
    resources = make(resources=["only"])
    lease = resources.acquire(ttl=0.1)
    wait_for(lambda: resources.stats().expired == 1, timeout=10, message="lease expiry")
    assert resources.release(lease) is False
    stats = resources.stats()
    assert (stats.free, stats.leased, stats.expired, stats.reclaimed) == (1, 0, 0, 1)
    assert resources.acquire(ttl=30).resource == "only"


def test_a_second_release_is_already_done_and_changes_nothing(make):
    resources = make(resources=["only"])
    lease = resources.acquire(ttl=30)
    assert resources.release(lease) is True
    other = resources.acquire(ttl=30)  # the resource is someone else's now
    assert resources.release(lease) is True  # "already done" (a re-send after a lost reply)
    stats = resources.stats()
    assert (stats.released, stats.leased) == (1, 1)
    assert resources.renew(other, 30) is not None  # the second release did not free other's lease


def test_forged_token_is_refused(make):
    resources = make(resources=["only"])
    lease = resources.acquire(ttl=30)
    forged = Lease(lease.base, lease.resource, "0" * 32, lease.expires_at)
    assert resources.release(forged) is False
    assert resources.renew(forged, 30) is None
    assert resources.stats().leased == 1


def test_leases_only_work_with_their_own_resources(make):
    resources = make()
    other = make(name="other")
    lease = other.acquire(ttl=30)
    with pytest.raises(ReservationError):
        resources.release(lease)
    with pytest.raises(ReservationError):
        resources.renew(lease, 30)
    with pytest.raises(ReservationError):
        resources.release("a")


def test_renew_extends_the_lease(make):
    resources = make(resources=["only"])
    lease = resources.acquire(ttl=1.5)
    renewed = resources.renew(lease, 60)
    assert renewed is not None and renewed.token == lease.token
    assert renewed.expires_at > lease.expires_at + 30
    time.sleep(1.8)  # past the first expiry
    assert resources.acquire(ttl=30) is None
    assert resources.stats().expired == 0
    assert resources.release(renewed) is True
    assert resources.stats().renewed == 1


def test_expired_leases_come_back_without_any_release(make, wait_for):
    resources = make()
    for _ in range(3):
        resources.acquire(ttl=0.1)
    wait_for(lambda: resources.stats().expired == 3, timeout=10, message="leases expire")
    leases = [resources.acquire(ttl=30) for _ in range(3)]
    assert sorted(lease.resource for lease in leases) == ["a", "b", "c"]
    stats = resources.stats()
    assert (stats.reclaimed, stats.leased, stats.expired) == (3, 3, 0)


def test_reclaim_returns_expired_leases(make, wait_for):
    resources = make()
    resources.acquire(ttl=0.1)
    live = resources.acquire(ttl=30)
    wait_for(lambda: resources.stats().expired == 1, timeout=10, message="lease expiry")
    assert resources.reclaim() == 1
    assert resources.reclaim() == 0
    stats = resources.stats()
    assert (stats.free, stats.leased, stats.reclaimed) == (2, 1, 1)
    assert resources.release(live)


# Waiting


def test_wait_is_woken_by_a_release_without_polling(make):
    resources = make(resources=["only"])
    held = resources.acquire(ttl=60)
    timer = threading.Timer(1.0, resources.release, args=(held,))
    timer.start()
    started = time.monotonic()
    lease = resources.acquire(ttl=30, wait=20)
    timer.join()
    assert lease is not None and lease.resource == "only"
    assert time.monotonic() - started < 15
    # One failed attempt before blocking, perhaps one more after a wait slice: never a loop.
    assert resources.stats().missed <= 3


def test_wait_is_woken_when_a_lease_expires(make):
    resources = make(resources=["only"])
    resources.acquire(ttl=1.0)  # its holder never releases
    lease = resources.acquire(ttl=30, wait=20)
    assert lease is not None
    stats = resources.stats()
    assert stats.reclaimed == 1
    assert stats.missed <= 4


def test_wait_gives_up_after_the_timeout(make):
    resources = make(resources=["only"])
    resources.acquire(ttl=60)
    started = time.monotonic()
    assert resources.acquire(ttl=30, wait=0.5) is None
    assert 0.4 <= time.monotonic() - started < 10
    assert resources.stats().missed <= 3
    assert resources.acquire(ttl=30, wait=0) is None


def test_wait_is_woken_by_a_new_resource(make):
    resources = make(resources=["busy"])
    resources.acquire(ttl=60)
    timer = threading.Timer(0.5, resources.add_resources, args=("extra",))
    timer.start()
    lease = resources.acquire(ttl=30, wait=20)
    timer.join()
    assert lease is not None and lease.resource == "extra"


def test_many_waiters_share_few_resources(make):
    resources = make(resources=["x", "y"])
    got = []
    lock = threading.Lock()

    def worker():
        for _ in range(5):
            lease = resources.acquire(ttl=30, wait=30)
            assert lease is not None
            time.sleep(0.01)
            with lock:
                got.append(lease.resource)
            assert resources.release(lease)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 30
    stats = resources.stats()
    assert (stats.acquired, stats.released, stats.free) == (30, 30, 2)


# Resources


def test_declaring_does_no_io_until_first_use(make, redqueue_redis, redqueue_prefix):
    resources = make(resources=["a", "b"])
    assert list(redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")) == []
    assert len(resources) == 2
    assert make(resources=["a", "b", "c"]).resources() == {"a", "b", "c"}
    assert make(resources=[]).stats().resources == 3


def test_add_and_remove_at_runtime(make):
    resources = make(resources=["a", "b"])
    assert resources.add_resources("c", "a") == 1
    assert resources.resources() == {"a", "b", "c"}
    held = [resources.acquire(ttl=30) for _ in range(3)]
    held_b = next(lease for lease in held if lease.resource == "b")
    assert resources.remove_resources("b", "zzz") == 1
    assert resources.resources() == {"a", "c"}
    # The holder keeps it until release; then it leaves the set instead of becoming free.
    assert resources.release(held_b) is True
    stats = resources.stats()
    assert (stats.resources, stats.free) == (2, 0)
    for lease in held:
        if lease is not held_b:
            resources.release(lease)
    assert sorted(resources.acquire(ttl=30).resource for _ in range(2)) == ["a", "c"]
    assert resources.acquire(ttl=30) is None


def test_removed_free_resource_is_never_leased(make):
    resources = make(resources=["a", "b"])
    resources.remove_resources("a")
    assert resources.acquire(ttl=30).resource == "b"
    assert resources.acquire(ttl=30) is None


def test_removed_resource_whose_lease_expires_leaves_the_set(make, wait_for):
    resources = make(resources=["a"])
    resources.acquire(ttl=0.1)
    resources.remove_resources("a")
    wait_for(lambda: resources.stats().expired == 1, timeout=10, message="lease expiry")
    assert resources.acquire(ttl=30) is None
    stats = resources.stats()
    assert (stats.resources, stats.free, stats.leased, stats.reclaimed) == (0, 0, 0, 1)


# The context manager and the keeper


def test_lease_context_manager_releases_on_success_and_error(make):
    resources = make(resources=["only"])
    with resources.lease(ttl=30) as resource:
        assert resource == "only"
        assert resources.stats().leased == 1
        with pytest.raises(NoFreeResourceError), resources.lease(ttl=30):
            pass
    assert resources.stats().free == 1
    with pytest.raises(ValueError), resources.lease(ttl=30):
        raise ValueError("boom")
    stats = resources.stats()
    assert (stats.free, stats.released) == (1, 2)


def test_keep_alive_outlives_the_ttl(make):
    resources = make(resources=["only"])
    with resources.lease(ttl=0.6, keep_alive=True):
        time.sleep(2.0)  # more than three TTLs
        assert resources.acquire(ttl=30) is None
    stats = resources.stats()
    assert stats.renewed >= 2
    assert (stats.released, stats.reclaimed, stats.free) == (1, 0, 1)


def test_keeper_notices_a_lost_lease(make, wait_for):
    resources = make(resources=["only"])
    lease = resources.acquire(ttl=0.3)
    keeper = LeaseKeeper(resources, lease, 0.3)
    keeper.start()
    resources.release(lease)  # as if it had run out and been taken back
    wait_for(lambda: keeper.lost, timeout=10, message="keeper notices")
    keeper.stop()


# Processes


def _hold_repeatedly(url, prefix, rounds, seed):
    """Acquire, mark the resource occupied in Redis, hold briefly, unmark, release."""
    client = redis.Redis.from_url(url)
    resources = LeasedResources(client, "shared", prefix=prefix)
    rng = random.Random(seed)
    me = f"{os.getpid()}"
    # Start together (spawned processes come up seconds apart on a busy machine): contention
    # is what this test is about.
    client.incr(f"{prefix}:ready")
    assert client.blpop([f"{prefix}:go"], timeout=120) is not None
    for _ in range(rounds):
        lease = resources.acquire(ttl=30, wait=60)
        assert lease is not None
        marker = f"{prefix}:occupied:{lease.resource}"
        # SET NX fails if another holder's marker is still there: that would be a shared resource.
        if not client.set(marker, me, nx=True):
            client.incr(f"{prefix}:overlaps")
        client.rpush(f"{prefix}:log", lease.resource)
        time.sleep(rng.uniform(0, 0.004))
        if client.get(marker) == me.encode():
            client.delete(marker)
        assert resources.release(lease)


def test_processes_never_share_a_resource(redqueue_server_url, redqueue_redis, redqueue_prefix):
    resources = LeasedResources(
        redqueue_redis, "shared", ["r1", "r2", "r3"], prefix=redqueue_prefix
    )
    assert len(resources) == 3
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_hold_repeatedly, args=(redqueue_server_url, redqueue_prefix, 60, seed))
        for seed in range(6)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 120
    while int(redqueue_redis.get(f"{redqueue_prefix}:ready") or 0) < len(procs):
        assert time.monotonic() < deadline, "the holders did not start"
        time.sleep(0.05)
    redqueue_redis.rpush(f"{redqueue_prefix}:go", *["go"] * len(procs))
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert int(redqueue_redis.get(f"{redqueue_prefix}:overlaps") or 0) == 0
    assert redqueue_redis.llen(f"{redqueue_prefix}:log") == 360
    stats = resources.stats()
    assert (stats.acquired, stats.released, stats.free, stats.leased) == (360, 360, 3, 0)
    assert stats.missed > 0  # there was contention, or the test proved nothing


def _hold_until_killed(url, prefix, ready_key):
    client = redis.Redis.from_url(url)
    resources = LeasedResources(client, "doomed", prefix=prefix)
    lease = resources.acquire(ttl=3.0)  # long enough for the parent to see it still held
    client.rpush(ready_key, lease.resource if lease else "")
    time.sleep(600)


def test_killed_holder_loses_its_resource_when_the_lease_expires(
    redqueue_server_url, redqueue_redis, redqueue_prefix
):
    resources = LeasedResources(redqueue_redis, "doomed", ["device"], prefix=redqueue_prefix)
    assert len(resources) == 1
    ready_key = f"{redqueue_prefix}:ready"
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(
        target=_hold_until_killed, args=(redqueue_server_url, redqueue_prefix, ready_key)
    )
    child.start()
    try:
        # The spawned child may take longer to start than the client's 5 s socket timeout on a
        # busy machine: wait in BLPOPs shorter than that.
        deadline, ready = time.monotonic() + 60, None
        while ready is None and time.monotonic() < deadline:
            ready = redqueue_redis.blpop([ready_key], timeout=2)
        assert ready is not None and ready[1] == b"device"
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL
        assert resources.acquire(ttl=30) is None  # the dead holder's lease is still running
        lease = resources.acquire(ttl=30, wait=30)
    finally:
        if child.is_alive():
            child.kill()
    assert lease is not None and lease.resource == "device"
    stats = resources.stats()
    assert (stats.reclaimed, stats.released, stats.leased) == (1, 0, 1)


# Bad input, keys, errors


def test_bad_input_is_refused(make, redqueue_redis, redqueue_prefix):
    resources = make()
    for bad in [0, -1, float("nan"), float("inf"), "10", True, None]:
        with pytest.raises(ConfigurationError):
            resources.acquire(ttl=bad)
    for bad in [-1, float("nan"), "1", True]:
        with pytest.raises(ConfigurationError):
            resources.acquire(ttl=10, wait=bad)
    lease = resources.acquire(ttl=10)
    with pytest.raises(ConfigurationError):
        resources.renew(lease, 0)
    with pytest.raises(ConfigurationError):
        make(resources="abc")  # one string is not a list of names
    for bad in ["", None, 5, b"bytes"]:
        with pytest.raises(ConfigurationError):
            make(resources=[bad])
        with pytest.raises(ConfigurationError):
            resources.add_resources(bad)
    with pytest.raises(ConfigurationError):
        make(name="a{b}")
    with pytest.raises(ConfigurationError):
        resources.reclaim(0)
    assert isinstance(NoFreeResourceError("x"), RedQueueError)


def test_keys_share_one_hash_tag(make, redqueue_redis, redqueue_prefix):
    resources = make(name="api-keys")
    lease = resources.acquire(ttl=30)
    resources.acquire(ttl=30)
    resources.release(lease)
    resources.renew(resources.acquire(ttl=30), 30)
    listed = {f"{redqueue_prefix}:registry", f"{redqueue_prefix}:{{lease:api-keys}}:meta"}
    keys = {k.decode() for k in redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")} - listed
    assert keys and all(k.startswith(f"{redqueue_prefix}:{{lease:api-keys}}:") for k in keys)
    resources.clear()
    assert {k.decode() for k in redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")} == listed


def test_unreachable_redis_raises_a_package_error():
    client = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    resources = LeasedResources(client, "p", ["a"])
    with pytest.raises(RedisUnavailableError):
        resources.acquire(ttl=10)
    with pytest.raises(RedisUnavailableError):
        resources.stats()
