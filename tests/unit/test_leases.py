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
    pool = make()
    leases = [pool.acquire(ttl=30) for _ in range(3)]
    assert all(isinstance(lease, Lease) for lease in leases)
    assert sorted(lease.resource for lease in leases) == ["a", "b", "c"]
    assert len({lease.token for lease in leases}) == 3
    assert pool.acquire(ttl=30) is None
    stats = pool.stats()
    assert (stats.resources, stats.free, stats.leased, stats.acquired, stats.missed) == (
        3,
        0,
        3,
        3,
        1,
    )
    assert all(pool.release(lease) for lease in leases)
    stats = pool.stats()
    assert (stats.free, stats.leased, stats.released) == (3, 0, 3)


def test_lease_expiry_is_reported_by_the_server_clock(make, redqueue_redis):
    pool = make()
    seconds, micros = redqueue_redis.time()
    lease = pool.acquire(ttl=30)
    assert lease.expires_at == pytest.approx(seconds + micros / 1e6 + 30, abs=5)


def test_least_recently_used_resource_goes_first(make):
    pool = make()
    a, b, c = sorted((pool.acquire(ttl=30) for _ in range(3)), key=lambda lease: lease.resource)
    for lease in (c, a, b):
        assert pool.release(lease)
        time.sleep(0.01)  # release times are kept in ms; keep them distinct
    assert [pool.acquire(ttl=30).resource for _ in range(3)] == ["c", "a", "b"]


def test_new_resources_go_before_used_ones(make):
    pool = make(resources=["old"])
    pool.release(pool.acquire(ttl=30))
    assert pool.add_resources("new") == 1
    assert pool.acquire(ttl=30).resource == "new"


def test_stale_holder_cannot_release_or_renew(make, wait_for):
    pool = make(resources=["only"])
    stale = pool.acquire(ttl=0.2)
    wait_for(lambda: pool.stats().expired == 1, timeout=10, message="lease expiry")
    fresh = pool.acquire(ttl=30)
    assert fresh is not None and fresh.resource == "only"
    assert pool.release(stale) is False
    assert pool.renew(stale, 30) is None
    # The new holder is untouched by the stale calls.
    stats = pool.stats()
    assert (stats.leased, stats.free, stats.reclaimed, stats.released) == (1, 0, 1, 0)
    assert pool.acquire(ttl=30) is None
    assert pool.renew(fresh, 30) is not None
    assert pool.release(fresh) is True


def test_release_after_expiry_fails_but_frees_the_resource(make, wait_for):
    pool = make(resources=["only"])
    lease = pool.acquire(ttl=0.1)
    wait_for(lambda: pool.stats().expired == 1, timeout=10, message="lease expiry")
    assert pool.release(lease) is False
    stats = pool.stats()
    assert (stats.free, stats.leased, stats.expired, stats.reclaimed) == (1, 0, 0, 1)
    assert pool.acquire(ttl=30).resource == "only"


def test_a_second_release_is_already_done_and_changes_nothing(make):
    pool = make(resources=["only"])
    lease = pool.acquire(ttl=30)
    assert pool.release(lease) is True
    other = pool.acquire(ttl=30)  # the resource is someone else's now
    assert pool.release(lease) is True  # "already done" (a re-send after a lost reply)
    stats = pool.stats()
    assert (stats.released, stats.leased) == (1, 1)
    assert pool.renew(other, 30) is not None  # the second release did not free other's lease


def test_forged_token_is_refused(make):
    pool = make(resources=["only"])
    lease = pool.acquire(ttl=30)
    forged = Lease(lease.base, lease.resource, "0" * 32, lease.expires_at)
    assert pool.release(forged) is False
    assert pool.renew(forged, 30) is None
    assert pool.stats().leased == 1


def test_leases_only_work_with_their_own_pool(make):
    pool = make()
    other = make(name="other")
    lease = other.acquire(ttl=30)
    with pytest.raises(ReservationError):
        pool.release(lease)
    with pytest.raises(ReservationError):
        pool.renew(lease, 30)
    with pytest.raises(ReservationError):
        pool.release("a")


def test_renew_extends_the_lease(make):
    pool = make(resources=["only"])
    lease = pool.acquire(ttl=1.5)
    renewed = pool.renew(lease, 60)
    assert renewed is not None and renewed.token == lease.token
    assert renewed.expires_at > lease.expires_at + 30
    time.sleep(1.8)  # past the first expiry
    assert pool.acquire(ttl=30) is None
    assert pool.stats().expired == 0
    assert pool.release(renewed) is True
    assert pool.stats().renewed == 1


def test_expired_leases_come_back_without_any_release(make, wait_for):
    pool = make()
    for _ in range(3):
        pool.acquire(ttl=0.1)
    wait_for(lambda: pool.stats().expired == 3, timeout=10, message="leases expire")
    leases = [pool.acquire(ttl=30) for _ in range(3)]
    assert sorted(lease.resource for lease in leases) == ["a", "b", "c"]
    stats = pool.stats()
    assert (stats.reclaimed, stats.leased, stats.expired) == (3, 3, 0)


def test_reclaim_returns_expired_leases(make, wait_for):
    pool = make()
    pool.acquire(ttl=0.1)
    live = pool.acquire(ttl=30)
    wait_for(lambda: pool.stats().expired == 1, timeout=10, message="lease expiry")
    assert pool.reclaim() == 1
    assert pool.reclaim() == 0
    stats = pool.stats()
    assert (stats.free, stats.leased, stats.reclaimed) == (2, 1, 1)
    assert pool.release(live)


# Waiting


def test_wait_is_woken_by_a_release_without_polling(make):
    pool = make(resources=["only"])
    held = pool.acquire(ttl=60)
    timer = threading.Timer(1.0, pool.release, args=(held,))
    timer.start()
    started = time.monotonic()
    lease = pool.acquire(ttl=30, wait=20)
    timer.join()
    assert lease is not None and lease.resource == "only"
    assert time.monotonic() - started < 15
    # One failed attempt before blocking, perhaps one more after a wait slice: never a loop.
    assert pool.stats().missed <= 3


def test_wait_is_woken_when_a_lease_expires(make):
    pool = make(resources=["only"])
    pool.acquire(ttl=1.0)  # its holder never releases
    lease = pool.acquire(ttl=30, wait=20)
    assert lease is not None
    stats = pool.stats()
    assert stats.reclaimed == 1
    assert stats.missed <= 4


def test_wait_gives_up_after_the_timeout(make):
    pool = make(resources=["only"])
    pool.acquire(ttl=60)
    started = time.monotonic()
    assert pool.acquire(ttl=30, wait=0.5) is None
    assert 0.4 <= time.monotonic() - started < 10
    assert pool.stats().missed <= 3
    assert pool.acquire(ttl=30, wait=0) is None


def test_wait_is_woken_by_a_new_resource(make):
    pool = make(resources=["busy"])
    pool.acquire(ttl=60)
    timer = threading.Timer(0.5, pool.add_resources, args=("extra",))
    timer.start()
    lease = pool.acquire(ttl=30, wait=20)
    timer.join()
    assert lease is not None and lease.resource == "extra"


def test_many_waiters_share_few_resources(make):
    pool = make(resources=["x", "y"])
    got = []
    lock = threading.Lock()

    def worker():
        for _ in range(5):
            lease = pool.acquire(ttl=30, wait=30)
            assert lease is not None
            time.sleep(0.01)
            with lock:
                got.append(lease.resource)
            assert pool.release(lease)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 30
    stats = pool.stats()
    assert (stats.acquired, stats.released, stats.free) == (30, 30, 2)


# Resources


def test_declaring_does_no_io_until_first_use(make, redqueue_redis, redqueue_prefix):
    pool = make(resources=["a", "b"])
    assert list(redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")) == []
    assert len(pool) == 2
    assert make(resources=["a", "b", "c"]).resources() == {"a", "b", "c"}
    assert make(resources=[]).stats().resources == 3


def test_add_and_remove_at_runtime(make):
    pool = make(resources=["a", "b"])
    assert pool.add_resources("c", "a") == 1
    assert pool.resources() == {"a", "b", "c"}
    held = [pool.acquire(ttl=30) for _ in range(3)]
    held_b = next(lease for lease in held if lease.resource == "b")
    assert pool.remove_resources("b", "zzz") == 1
    assert pool.resources() == {"a", "c"}
    # The holder keeps it until release; then it leaves the pool instead of becoming free.
    assert pool.release(held_b) is True
    stats = pool.stats()
    assert (stats.resources, stats.free) == (2, 0)
    for lease in held:
        if lease is not held_b:
            pool.release(lease)
    assert sorted(pool.acquire(ttl=30).resource for _ in range(2)) == ["a", "c"]
    assert pool.acquire(ttl=30) is None


def test_removed_free_resource_is_never_leased(make):
    pool = make(resources=["a", "b"])
    pool.remove_resources("a")
    assert pool.acquire(ttl=30).resource == "b"
    assert pool.acquire(ttl=30) is None


def test_removed_resource_whose_lease_expires_leaves_the_pool(make, wait_for):
    pool = make(resources=["a"])
    pool.acquire(ttl=0.1)
    pool.remove_resources("a")
    wait_for(lambda: pool.stats().expired == 1, timeout=10, message="lease expiry")
    assert pool.acquire(ttl=30) is None
    stats = pool.stats()
    assert (stats.resources, stats.free, stats.leased, stats.reclaimed) == (0, 0, 0, 1)


# The context manager and the keeper


def test_lease_context_manager_releases_on_success_and_error(make):
    pool = make(resources=["only"])
    with pool.lease(ttl=30) as resource:
        assert resource == "only"
        assert pool.stats().leased == 1
        with pytest.raises(NoFreeResourceError), pool.lease(ttl=30):
            pass
    assert pool.stats().free == 1
    with pytest.raises(ValueError), pool.lease(ttl=30):
        raise ValueError("boom")
    stats = pool.stats()
    assert (stats.free, stats.released) == (1, 2)


def test_keep_alive_outlives_the_ttl(make):
    pool = make(resources=["only"])
    with pool.lease(ttl=0.6, keep_alive=True):
        time.sleep(2.0)  # more than three TTLs
        assert pool.acquire(ttl=30) is None
    stats = pool.stats()
    assert stats.renewed >= 2
    assert (stats.released, stats.reclaimed, stats.free) == (1, 0, 1)


def test_keeper_notices_a_lost_lease(make, wait_for):
    pool = make(resources=["only"])
    lease = pool.acquire(ttl=0.3)
    keeper = LeaseKeeper(pool, lease, 0.3)
    keeper.start()
    pool.release(lease)  # as if it had run out and been taken back
    wait_for(lambda: keeper.lost, timeout=10, message="keeper notices")
    keeper.stop()


# Processes


def _hold_repeatedly(url, prefix, rounds, seed):
    """Acquire, mark the resource occupied in Redis, hold briefly, unmark, release."""
    client = redis.Redis.from_url(url)
    pool = LeasedResources(client, "shared", prefix=prefix)
    rng = random.Random(seed)
    me = f"{os.getpid()}"
    # Start together (spawned processes come up seconds apart on a busy machine): contention
    # is what this test is about.
    client.incr(f"{prefix}:ready")
    assert client.blpop([f"{prefix}:go"], timeout=120) is not None
    for _ in range(rounds):
        lease = pool.acquire(ttl=30, wait=60)
        assert lease is not None
        marker = f"{prefix}:occupied:{lease.resource}"
        # SET NX fails if another holder's marker is still there: that would be a shared resource.
        if not client.set(marker, me, nx=True):
            client.incr(f"{prefix}:overlaps")
        client.rpush(f"{prefix}:log", lease.resource)
        time.sleep(rng.uniform(0, 0.004))
        if client.get(marker) == me.encode():
            client.delete(marker)
        assert pool.release(lease)


def test_processes_never_share_a_resource(redqueue_server_url, redqueue_redis, redqueue_prefix):
    pool = LeasedResources(redqueue_redis, "shared", ["r1", "r2", "r3"], prefix=redqueue_prefix)
    assert len(pool) == 3
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
    stats = pool.stats()
    assert (stats.acquired, stats.released, stats.free, stats.leased) == (360, 360, 3, 0)
    assert stats.missed > 0  # there was contention, or the test proved nothing


def _hold_until_killed(url, prefix, ready_key):
    client = redis.Redis.from_url(url)
    pool = LeasedResources(client, "doomed", prefix=prefix)
    lease = pool.acquire(ttl=3.0)  # long enough for the parent to see it still held
    client.rpush(ready_key, lease.resource if lease else "")
    time.sleep(600)


def test_killed_holder_loses_its_resource_when_the_lease_expires(
    redqueue_server_url, redqueue_redis, redqueue_prefix
):
    pool = LeasedResources(redqueue_redis, "doomed", ["device"], prefix=redqueue_prefix)
    assert len(pool) == 1
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
        assert pool.acquire(ttl=30) is None  # the dead holder's lease is still running
        lease = pool.acquire(ttl=30, wait=30)
    finally:
        if child.is_alive():
            child.kill()
    assert lease is not None and lease.resource == "device"
    stats = pool.stats()
    assert (stats.reclaimed, stats.released, stats.leased) == (1, 0, 1)


# Bad input, keys, errors


def test_bad_input_is_refused(make, redqueue_redis, redqueue_prefix):
    pool = make()
    for bad in [0, -1, float("nan"), float("inf"), "10", True, None]:
        with pytest.raises(ConfigurationError):
            pool.acquire(ttl=bad)
    for bad in [-1, float("nan"), "1", True]:
        with pytest.raises(ConfigurationError):
            pool.acquire(ttl=10, wait=bad)
    lease = pool.acquire(ttl=10)
    with pytest.raises(ConfigurationError):
        pool.renew(lease, 0)
    with pytest.raises(ConfigurationError):
        make(resources="abc")  # one string is not a list of names
    for bad in ["", None, 5, b"bytes"]:
        with pytest.raises(ConfigurationError):
            make(resources=[bad])
        with pytest.raises(ConfigurationError):
            pool.add_resources(bad)
    with pytest.raises(ConfigurationError):
        make(name="a{b}")
    with pytest.raises(ConfigurationError):
        pool.reclaim(0)
    assert isinstance(NoFreeResourceError("x"), RedQueueError)


def test_keys_share_one_hash_tag(make, redqueue_redis, redqueue_prefix):
    pool = make(name="api-keys")
    lease = pool.acquire(ttl=30)
    pool.acquire(ttl=30)
    pool.release(lease)
    pool.renew(pool.acquire(ttl=30), 30)
    listed = {f"{redqueue_prefix}:registry", f"{redqueue_prefix}:{{lease:api-keys}}:meta"}
    keys = {k.decode() for k in redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")} - listed
    assert keys and all(k.startswith(f"{redqueue_prefix}:{{lease:api-keys}}:") for k in keys)
    pool.clear()
    assert {k.decode() for k in redqueue_redis.scan_iter(match=f"{redqueue_prefix}:*")} == listed


def test_unreachable_redis_raises_a_package_error():
    client = redis.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    pool = LeasedResources(client, "p", ["a"])
    with pytest.raises(RedisUnavailableError):
        pool.acquire(ttl=10)
    with pytest.raises(RedisUnavailableError):
        pool.stats()
