"""A stats hash field another program (or a corruption) left unreadable: ``stats()`` and the
figures raise a RedQueueError naming the structure's key and the field, not a bare ValueError
from int()."""

import pytest

from celery_redqueue import CorruptDataError, EventStream, LeasedResources, RedQueueError


@pytest.fixture
def structures(make_pool, make_bucket, redqueue_redis, redqueue_prefix):
    pool = make_pool("corrupt")
    pool.add(1)
    bucket = make_bucket("corrupt")
    bucket.enqueue("k", 1)
    stream = EventStream(redqueue_redis, "corrupt", prefix=redqueue_prefix, groups=["g"])
    stream.publish({"a": 1})
    leases = LeasedResources(redqueue_redis, "corrupt", ["r1"], prefix=redqueue_prefix)
    leases.release(leases.acquire(ttl=5))
    return {"pool": pool, "bucket": bucket, "stream": stream, "lease": leases}


@pytest.mark.parametrize("kind", ["pool", "bucket", "stream", "lease"])
@pytest.mark.parametrize("value", [b"12abc", b"", b"1.5"])
def test_a_corrupt_counter_names_the_structure_and_field(structures, kind, value):
    structure = structures[kind]
    key = structure.keys("stats")
    structure.client.hset(key, "bad_field", value)
    with pytest.raises(CorruptDataError) as caught:
        structure.stats()
    assert isinstance(caught.value, RedQueueError)
    assert key in str(caught.value) and "bad_field" in str(caught.value)
    if kind in ("pool", "bucket"):
        with pytest.raises(CorruptDataError, match="bad_field"):
            structure.figures()
    structure.client.hdel(key, "bad_field")
    structure.stats()
