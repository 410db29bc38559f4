"""A dead-letter entry that is not ``<JSON metadata>\\n<payload>`` (written by something else, or
cut short) never wedges the dead-letter tools, for pools, buckets and streams alike.

Decision: such a letter cannot be requeued (nothing says where it goes or what it is), so
requeue leaves it listed, as evidence, and steps over it to the letters behind it; purge deletes
it like any other, counted as one purged letter (``dead`` down by one, ``purged`` up by one, so
the accounting identities still hold).
"""

import pytest

from celery_redqueue import CappedPool, EventStream, LeakyBucket

MALFORMED = [b"no newline at all", b"not json\npayload", b"[1, 2]\npayload"]


def pool_with_letters(client, prefix):
    pool = CappedPool(
        client, "letters", 100, prefix=prefix, delivery="at_least_once", max_receives=1
    )
    pool.add_many(["a", "b"])
    batch = pool.pop(10)
    pool.ack(batch, failures={0: "bad", 1: "bad"})
    return pool


def bucket_with_letters(client, prefix):
    bucket = LeakyBucket(client, "letters", prefix=prefix, default_rate="1000/s")
    bucket.enqueue_many([("k", "a"), ("k", "b")])
    for _ in range(2):
        reservation = None
        while reservation is None:
            reservation = bucket.dequeue().reservation
        bucket.dead_letter(reservation, "bad")
    return bucket


def stream_with_letters(client, prefix):
    stream = EventStream(client, "letters", prefix=prefix, groups=["g"], max_receives=1)
    stream.publish_many(["a", "b"])
    read = stream.read("g", "c", 10)
    stream.ack(read, failures={event.id: "bad" for event in read.events})
    return stream


MAKERS = [pool_with_letters, bucket_with_letters, stream_with_letters]


def dead_count(structure):
    stats = structure.stats()
    return None if isinstance(stats, dict) else stats.dead


def purged_count(structure):
    stats = structure.stats()
    return stats["purged"] if isinstance(stats, dict) else stats.purged


@pytest.fixture(params=MAKERS, ids=["pool", "bucket", "stream"])
def letters(request, redqueue_redis, redqueue_prefix):
    """A structure with two good dead letters behind three malformed ones (oldest first)."""
    structure = request.param(redqueue_redis, redqueue_prefix)
    assert len(structure.dead_letters()) == 2
    redqueue_redis.lpush(structure.keys("dead"), *reversed(MALFORMED))
    if dead_count(structure) is not None:  # as if they had been counted when written
        redqueue_redis.hincrby(structure.keys("stats"), "dead", len(MALFORMED))
    return structure


@pytest.mark.timeout(60)
def test_malformed_letters_are_listed_raw(letters):
    listed = letters.dead_letters()
    assert [letter.raw for letter in listed[:3]] == MALFORMED
    assert all(letter.error == "unreadable dead-letter entry" for letter in listed[:3])
    assert sorted(letter.payload for letter in listed[3:]) == ["a", "b"]


@pytest.mark.timeout(60)
def test_requeue_steps_over_malformed_letters_and_keeps_them(letters):
    assert letters.requeue_dead(limit=1) == 1  # the oldest good one, past the three
    assert [letter.raw for letter in letters.dead_letters()][:3] == MALFORMED
    assert len(letters.dead_letters()) == 4
    assert letters.requeue_dead() == 1  # "all": the rest, and it ends
    assert [letter.raw for letter in letters.dead_letters()] == MALFORMED
    assert letters.requeue_dead(letters.dead_letters()[:1]) == 0  # named: kept, no error
    if dead_count(letters) is not None:
        assert dead_count(letters) == len(MALFORMED)


@pytest.mark.timeout(60)
def test_purge_deletes_malformed_letters_too(letters):
    before = purged_count(letters)
    assert letters.purge_dead(letters.dead_letters()[:1]) == 1  # named
    assert letters.purge_dead() == 4  # all: two malformed, two good
    assert letters.dead_letters() == []
    assert purged_count(letters) == before + 5
    if dead_count(letters) is not None:
        assert dead_count(letters) == 0


@pytest.mark.timeout(60)
def test_a_stream_loses_no_letter_when_one_is_malformed(redqueue_redis, redqueue_prefix):
    """Validate before write: a bad letter among good ones removes nothing it cannot use."""
    stream = stream_with_letters(redqueue_redis, redqueue_prefix)
    redqueue_redis.rpush(stream.keys("dead"), MALFORMED[0])
    assert stream.requeue_dead() == 2
    assert [letter.raw for letter in stream.dead_letters()] == [MALFORMED[0]]
    assert stream.stats()["requeued"] == 2 and stream.group_figures("g").lag == 2
