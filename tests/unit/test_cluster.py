"""Pools, buckets and the figures on a real Redis Cluster (three masters started for the test).

Every script touches only the keys it is given, and every key of a structure shares one hash
tag, so all of it must work where keys live on different nodes.
"""

import time

import pytest
import redis
from redis.crc import key_slot

from celery_redqueue import CappedPool, LeakyBucket
from celery_redqueue.errors import RedisCommandError
from celery_redqueue.redis.client import make_client
from celery_redqueue.redis.lua import script
from celery_redqueue.structures.catalog import registered


@pytest.fixture
def cluster_client(cluster_url):
    client = make_client(cluster_url)
    yield client
    client.close()


def test_pool_works_across_cluster_nodes(cluster_client, redqueue_prefix):
    pools = [
        CappedPool(
            cluster_client,
            f"events-{i}",
            5,
            policy="newest",
            prefix=redqueue_prefix,
            delivery="at_least_once",
            max_receives=1,
            dedupe_window=60,
        )
        for i in range(6)  # different names, so different slots and nodes
    ]
    for pool in pools:
        pool.add_many(range(8))
        # Due in 1 s: long enough that a loaded machine does not reach the first pop after it.
        assert pool.add("later", delay=1.0).delayed
        batch = pool.pop(10)
        assert [i.payload for i in batch.items] == [3, 4, 5, 6, 7]
        pool.ack(batch, failures={0: "ValueError: x"})
        assert [x.payload for x in pool.dead_letters()] == [3]
        assert pool.requeue_dead() == 1
        time.sleep(1.05)
        # The requeued letter re-entered when requeued; the delayed call enters when due, like
        # any call (docs/semantics.md, Delays), so after it.
        assert [i.payload for i in pool.pop(10).items] == [3, "later"]
        stats = pool.stats()
        assert stats.offered == stats.accepted + stats.rejected
        assert pool.figures().offered == stats.offered
    found = {name for kind, name, _ in registered(cluster_client, redqueue_prefix)}
    assert found == {f"events-{i}" for i in range(6)}


def test_bucket_works_across_cluster_nodes(cluster_client, redqueue_prefix):
    for i in range(6):
        bucket = LeakyBucket(
            cluster_client,
            f"crawl-{i}",
            prefix=redqueue_prefix,
            default_rate="1000/s",
            visibility_timeout=0.05,
            ordered=True,
        )
        bucket.set_rate("a", "500/s")
        bucket.enqueue_many([("a", 1), ("a", 2), ("b", 3)])
        assert bucket.enqueue("c", 4, delay=0.02).delayed
        first = bucket.dequeue().reservation
        second = bucket.dequeue().reservation
        assert {first.key, second.key} == {"a", "b"}
        assert bucket.commit(second)
        time.sleep(0.06)
        assert bucket.reap().returned == 1
        bucket.dead_letter(bucket.dequeue().reservation, "boom")
        assert bucket.requeue_dead() == 1
        figures = bucket.figures()
        assert figures.depth + figures.in_flight + figures.delayed >= 1
        assert bucket.key_stats("a").interval == pytest.approx(0.002)


def _move_slot(client, slot, source, target):
    """Move ``slot`` (with its keys) from the master ``source`` to ``target`` as redis-cli
    --cluster reshard does: IMPORTING/MIGRATING, MIGRATE the keys, then SETSLOT NODE on every
    master."""
    masters = {n.name: n.redis_connection for n in client.get_primaries()}
    ids = {name: conn.execute_command("CLUSTER MYID").decode() for name, conn in masters.items()}
    masters[target].execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[source])
    masters[source].execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target])
    host, port = target.rsplit(":", 1)
    while keys := masters[source].execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
        masters[source].execute_command("MIGRATE", host, port, "", 0, 5000, "KEYS", *keys)
    for conn in masters.values():
        conn.execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target])


def test_the_script_path_follows_a_slot_that_moved(cluster_client, redqueue_prefix):
    pool = CappedPool(cluster_client, "moving", 1000, prefix=redqueue_prefix)
    assert all(r.kept for r in (pool.add(i) for i in range(10)))
    slot = cluster_client.keyslot(pool.keys("items"))
    first = cluster_client.nodes_manager.slots_cache[slot][0]
    target = next(n.name for n in cluster_client.get_primaries() if n.name != first.name)
    _move_slot(cluster_client, slot, first.name, target)
    try:
        # The first call meets MOVED, which updates the slot table; it and later ones go to
        # the new master.
        assert all(r.kept for r in (pool.add(i) for i in range(10, 20)))
        assert cluster_client.nodes_manager.slots_cache[slot][0].name == target
        stats = pool.stats()
        assert (stats.offered, stats.depth) == (20, 20)
        assert sorted(item.payload for item in pool.pop(100).items) == list(range(20))
    finally:
        _move_slot(cluster_client, slot, target, first.name)  # the cluster is shared


def test_a_plain_client_on_the_wrong_node_gets_a_named_error(cluster_client, redqueue_prefix):
    """A plain redis.Redis pointed at one cluster node has no slot map to follow a MOVED
    reply with: a script fails with the package's error naming it, not an AttributeError."""
    node = cluster_client.get_primaries()[0]
    plain = redis.Redis(host=node.host, port=node.port)
    try:
        key = next(  # a key another node serves
            k
            for k in (f"{redqueue_prefix}:elsewhere-{i}" for i in range(1000))
            if cluster_client.nodes_manager.get_node_from_slot(key_slot(k.encode())).name
            != node.name
        )
        with pytest.raises(RedisCommandError, match="MovedError"):
            script("wake_arm")(plain, [key], ["listener", 1000])
        assert not cluster_client.exists(key)
    finally:
        plain.close()
