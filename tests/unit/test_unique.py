"""UniqueLocks against a real Redis: one holder per key, leases that run out, fencing, and
scripts that are safe to send twice."""

import time

import pytest

from celery_redqueue import ConfigurationError, Lease, UniqueLocks
from celery_redqueue.structures.unique import Refused


@pytest.fixture
def locks(redqueue_redis, redqueue_prefix):
    return UniqueLocks(redqueue_redis, "t", prefix=redqueue_prefix)


def test_a_held_key_is_refused_naming_its_holder(locks):
    first = locks.acquire("k", task_id="a", ttl=30)
    assert isinstance(first, Lease)
    second = locks.acquire("k", task_id="b", ttl=30)
    assert isinstance(second, Refused) and second.holder == "a"
    assert isinstance(locks.acquire("other", task_id="b", ttl=30), Lease)
    assert locks.release(first)
    third = locks.acquire("k", task_id="c", ttl=30)
    assert isinstance(third, Lease) and third.fence > first.fence
    stats = locks.stats()
    assert (stats.held, stats.acquired, stats.refused, stats.released) == (2, 3, 1, 1)


def test_a_lease_that_ran_out_frees_the_key_and_fences_its_holder(locks):
    old = locks.acquire("k", task_id="a", ttl=0.2)
    time.sleep(0.3)
    assert locks.holder("k") is None
    new = locks.acquire("k", task_id="b", ttl=30)
    assert isinstance(new, Lease) and new.fence > old.fence
    # The process that lost it can neither renew nor release the new holder's lock.
    assert locks.renew(old, 30) is None
    assert locks.release(old) is False
    held = locks.holder("k")
    assert held is not None and held.task_id == "b" and held.phase == "running"
    assert locks.stats().expired == 1


def test_renew_keeps_the_key_past_its_first_ttl(locks):
    lease = locks.acquire("k", task_id="a", ttl=0.5)
    for _ in range(4):
        time.sleep(0.2)
        lease = locks.renew(lease, 0.5)
        assert lease is not None
    assert isinstance(locks.acquire("k", task_id="b", ttl=1), Refused)


def test_sending_the_same_acquire_or_release_twice_applies_it_once(locks):
    first = locks.acquire("k", task_id="a", ttl=30, token="tok")
    again = locks.acquire("k", task_id="a", ttl=30, token="tok")
    assert isinstance(again, Lease) and again.fence == first.fence
    refused = locks.acquire("k", task_id="b", ttl=30, token="tok2")
    refused_again = locks.acquire("k", task_id="b", ttl=30, token="tok2")
    assert isinstance(refused_again, Refused) and refused_again.holder == refused.holder == "a"
    assert locks.release(first) and locks.release(first)  # "already done"
    stats = locks.stats()
    assert (stats.acquired, stats.refused, stats.released, stats.held) == (1, 1, 1, 0)


def test_a_queued_lock_is_taken_over_by_its_own_task_only(locks):
    queued = locks.acquire("k", task_id="a", ttl=30, token="a", phase="queued")
    assert isinstance(queued, Lease)
    assert isinstance(locks.acquire("k", task_id="b", ttl=30, claim=True), Refused)
    running = locks.acquire("k", task_id="a", ttl=30, claim=True)
    assert isinstance(running, Lease) and running.fence > queued.fence
    # A second delivery of the same message is refused while the first runs.
    refused = locks.acquire("k", task_id="a", ttl=30, claim=True)
    assert isinstance(refused, Refused) and refused.holder == "a"
    assert locks.release_queued("k", "a") is False  # the queued token lost the key
    # A retry hands the lock to the task's next message.
    assert locks.release(running, hand_back=("a", 30))
    assert locks.holder("k").phase == "queued"
    assert isinstance(locks.acquire("k", task_id="b", ttl=30), Refused)
    assert locks.release_queued("k", "a") and locks.holder("k") is None


def test_held_lists_who_since_and_until(locks):
    locks.acquire("k1", task_id="a", ttl=30, who="host:1")
    locks.acquire("k2", task_id="b", ttl=10, who="host:2", phase="queued", token="b")
    held = locks.held()
    assert [(h.key, h.task_id, h.who, h.phase) for h in held] == [
        ("k2", "b", "host:2", "queued"),
        ("k1", "a", "host:1", "running"),
    ]
    assert all(h.since <= time.time() < h.until for h in held)


def test_bad_arguments_are_refused_before_anything_is_stored(locks, redqueue_redis):
    with pytest.raises(ConfigurationError):
        locks.acquire("", task_id="a", ttl=1)
    with pytest.raises(ConfigurationError):
        locks.acquire("k", task_id="a", ttl=0)
    with pytest.raises(ConfigurationError):
        locks.acquire("k", task_id="a", ttl=1, phase="later")
    assert redqueue_redis.exists(locks.keys("held"), locks.keys("stats")) == 0


def test_clear_leaves_no_key_of_the_table(locks, redqueue_redis, redqueue_prefix):
    locks.acquire("k", task_id="a", ttl=30)
    assert redqueue_redis.exists(locks.keys("meta"))
    locks.clear()
    assert redqueue_redis.keys(f"{redqueue_prefix}*") == []
    # Used again, it is registered again.
    locks.acquire("k", task_id="a", ttl=30)
    assert redqueue_redis.exists(locks.keys("meta"))
