"""Sharded pools and buckets: one logical structure spread over N hash tags (so over the nodes
of a Redis Cluster), for the user whose one hot pool or bucket outgrows a node.

A [`ShardedPool`][celery_redqueue.ShardedPool] holds N [`CappedPool`][celery_redqueue.CappedPool]
shards and a [`ShardedBucket`][celery_redqueue.ShardedBucket] N
[`LeakyBucket`][celery_redqueue.LeakyBucket] shards; each shard is a complete structure under its
own hash tag, ``<prefix>:{pool:<name>#<i>.<j>}:<part>``, so every script still touches one slot.
``j`` is the smallest number that puts shard ``i``'s slot in the ``i``-th N-th of the slot space:
with N equal to the number of masters and the slots split evenly (as ``redis-cli --cluster create``
does), the shards land on distinct masters.

Pools: each call goes to one shard, chosen with probability proportional to the shard's
capacity (the capacity is split as evenly as it divides): at random; by a hash of the payload
when the pool coalesces (equal payloads must meet on one shard to merge); by a hash of its
dedupe id when it has one (a duplicate must meet its original). Each shard applies the policy
to what it received. Buckets: a key lives on one shard (a hash of the key), so its rate,
burst, order and in-flight limit are those of one bucket: exact.

Drains sweep the shards round-robin, starting after the shard that last gave work, so no shard
starves. The drain flag is one per shard: it must live in the slot of the items it guards, or
"clear the flag only if still empty" could not be one atomic step. A running drain holds every
shard's lease (the heartbeat renews each) and an empty sweep clears each shard's flag in that
shard's own pop, so nothing that arrives on any shard is stranded. Stats, figures, reaping and
dead letters are summed or merged over the shards; the registry lists the logical structure
once (``shards`` in its settings), never its shards.

Example:

    pool = ShardedPool(cluster_client, "events", capacity=30_000, shards=3)
    pool.add({"user": 7})
    batch = pool.pop(100)          # from the next shard with work
    pool.ack(batch)                # back to the shard it came from
"""

from __future__ import annotations

import dataclasses
import random
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from ..errors import ReservationError
from . import catalog
from .bucket import (
    BucketProducer,
    BucketStats,
    Dequeued,
    KeyLoad,
    LeakyBucket,
    Limits,
    Reservation,
)
from .bucket_types import EncodedCall, _check_key
from .pool import CappedPool, PoolBatch, PoolProducer, PoolStats
from .receipts import ReapResult
from .sharding import (
    Sharded,
    by_key,
    on_every,
    on_owner,
    split_id,
    spread,
    stable_hash,
    sum_results,
    swept,
    validate_shards,
)

__all__ = [
    "AnyBucket",
    "AnyPool",
    "ShardedBucket",
    "ShardedPool",
    "make_bucket",
    "make_pool",
    "validate_shards",
]


def _own_batch(self: ShardedPool, batch: PoolBatch) -> tuple[CappedPool, PoolBatch]:
    """The shard a batch came from (its id names it), and the batch as that shard knows it."""
    i, inner = split_id(batch.id, len(self.shards))
    return self.shards[i], dataclasses.replace(batch, id=inner)


def _merge_pop(
    self: ShardedPool, i: int | None, batch: PoolBatch | None, empties: list[tuple[int, PoolBatch]]
) -> PoolBatch:
    """The batch of the shard that had work, its id naming the shard. Otherwise an empty batch:
    every shard was empty (and released its flag, unless lingering); ``wait``/``schedule``
    are the earliest shard's."""
    malformed = sum(b.malformed for _, b in empties)
    if batch is not None:
        batch.id = f"{i}:{batch.id}"
        batch.malformed += malformed
        return batch
    result = PoolBatch(id="", items=[], malformed=malformed)
    result.lingering = any(b.lingering for _, b in empties)
    earliest = None if result.lingering else self._earliest(empties)
    self._release_claims(empties, keep=None if earliest is None else earliest[0])
    if earliest is not None:
        result.wait, result.schedule = earliest[1].wait, earliest[1].schedule
    return result


class ShardedPool(Sharded, PoolProducer):
    """A capped pool spread over ``shards`` CappedPools; see the module docstring.

    Args:
        capacity: the logical capacity, split between the shards as evenly as it divides.
        shards: how many shards (at most ``capacity``).
        options: every other CappedPool option, applied to each shard.
    """

    kind = "pool"
    _figure_names = ("depth", ("offered",), ("rejected", "evicted", "lost"))
    _shared = ("policy", "coalesce")
    policy: str
    coalesce: bool

    def __init__(
        self, client: Any, name: str, capacity: int, *, shards: int, **options: Any
    ) -> None:
        validate_shards("shards", shards, capacity)
        self.capacity = capacity
        #: Each shard's capacity: the logical one split as evenly as it divides.
        self._caps = [
            capacity // shards + (1 if i < capacity % shards else 0) for i in range(shards)
        ]
        #: Upper bounds of each shard's share of [0, capacity): a point picks its shard.
        self._bounds = [sum(self._caps[: i + 1]) for i in range(shards)]
        super().__init__(client, name, shards=shards, **options)

    def _make_shard(
        self, client: Any, name: str, index: int, of: int, options: dict[str, Any]
    ) -> Any:
        return CappedPool(client, name, self._caps[index], **options)

    def settings(self) -> dict[str, Any]:
        return dict(super().settings(), capacity=self.capacity)

    def shard_of(self, data: bytes, dedupe_id: str | None = None) -> int:
        """The shard a call goes to, with probability proportional to its capacity."""
        if self.coalesce:
            point = stable_hash(data) % self.capacity
        elif dedupe_id:
            point = stable_hash(dedupe_id.encode()) % self.capacity
        else:
            point = random.randrange(self.capacity)
        return bisect_right(self._bounds, point)

    def _shard_of_call(self, call: bytes, dedupe_id: str | None) -> int:
        return self.shard_of(call, dedupe_id)

    store_encoded = spread(CappedPool.store_encoded)
    #: From the next shard with work; the batch's id names its shard (`ack`, the heartbeat).
    pop = swept(CappedPool.pop, lambda b: bool(b) or b.pop_again, _merge_pop)
    ack = on_owner(CappedPool.ack, _own_batch)
    reap = on_every(CappedPool.reap, lambda parts: sum_results(ReapResult, parts), register=True)
    #: Counters summed over the shards. Each shard's snapshot is consistent, and the
    #: accounting identities are sums of per-shard ones, so they hold on the sum.
    stats = on_every(CappedPool.stats, lambda parts: sum_results(PoolStats, parts))

    def __len__(self) -> int:
        """Calls waiting in every shard."""
        return self.stats().depth


def _own_reservation(
    self: ShardedBucket, reservation: Reservation | str
) -> tuple[LeakyBucket, Reservation | str]:
    """The shard a reservation belongs to, and the reservation as that shard knows it."""
    if isinstance(reservation, Reservation):
        if reservation.bucket not in ("", self.keys.base):
            raise ReservationError(
                f"reservation {reservation.id} belongs to {reservation.bucket}, "
                f"not {self.keys.base}"
            )
        i, inner = split_id(reservation.id, len(self.shards))
        return self.shards[i], dataclasses.replace(
            reservation, id=inner, bucket=self.shards[i].keys.base
        )
    i, inner = split_id(str(reservation), len(self.shards))
    return self.shards[i], inner


def _merge_dequeue(
    self: ShardedBucket, i: int | None, poll: Dequeued | None, empties: list[tuple[int, Dequeued]]
) -> Dequeued:
    """The reservation of the shard that had an eligible key, its id naming the shard;
    otherwise the earliest shard's wait."""
    malformed = sum(p.malformed for _, p in empties)
    if poll is not None and poll.reservation is not None:
        reservation = dataclasses.replace(
            poll.reservation, id=f"{i}:{poll.reservation.id}", bucket=self.keys.base
        )
        return Dequeued(reservation, malformed=malformed + poll.malformed)
    earliest = self._earliest(empties)
    self._release_claims(empties, keep=None if earliest is None else earliest[0])
    if earliest is None:
        return Dequeued(malformed=malformed)
    return Dequeued(wait=earliest[1].wait, schedule=earliest[1].schedule, malformed=malformed)


class ShardedBucket(Sharded, BucketProducer):
    """A leaky bucket spread over ``shards`` LeakyBuckets, each key on one shard; see the
    module docstring. ``options`` are LeakyBucket's, applied to each shard."""

    kind = "bucket"
    #: Called when resume() needs a drain job (the task glue sets it; see BucketLimits).
    drain_sender: Callable[[], object] | None = None
    _figure_names = (
        "depth",
        ("enqueued", "rejected", "duplicates"),
        ("rejected", "dropped", "duplicates"),
    )

    _shared = ("ordered", "limits", "default_interval_ms", "default_burst")
    ordered: bool
    limits: Limits
    default_interval_ms: float
    default_burst: float

    def _make_shard(
        self, client: Any, name: str, index: int, of: int, options: dict[str, Any]
    ) -> Any:
        # A total rate is split evenly: each shard meters its share in its own scripts, so a
        # release costs no extra round trip (see docs/metered-apis.md). Recorded settings name
        # total_shares; the shard count decides.
        return LeakyBucket(client, name, **dict(options, total_shares=of))

    def shard_of(self, key: str) -> int:
        """The shard of a key: the same in every process, so a key's rate is one bucket's."""
        return stable_hash(_check_key(key).encode()) % len(self.shards)

    def _shard_of_call(self, call: EncodedCall, dedupe_id: str | None) -> int:
        return self.shard_of(call[0])

    def shard(self, key: str) -> LeakyBucket:
        """The LeakyBucket that holds ``key``."""
        bucket: LeakyBucket = self.shards[self.shard_of(key)]
        return bucket

    # A key's rates, pause and figures live on its shard.
    set_rate = on_owner(LeakyBucket.set_rate, by_key)
    clear_rate = on_owner(LeakyBucket.clear_rate, by_key)
    set_cost_rate = on_owner(LeakyBucket.set_cost_rate, by_key)
    pause = on_owner(LeakyBucket.pause, by_key)
    key_stats = on_owner(LeakyBucket.key_stats, by_key)

    def resume(self, key: str) -> bool:
        """Resume a key on its shard; its drain job goes through `drain_sender`."""
        shard = self.shard(key)
        shard.drain_sender = self.drain_sender
        return shard.resume(key)

    def paused(self, limit: int = 100) -> list[tuple[str, float]]:
        """Paused keys of every shard, soonest end first."""
        rows = [row for shard in self.shards for row in shard.paused(limit)]
        return sorted(rows, key=lambda row: (row[1], row[0]))[:limit]

    paused_count = on_every(LeakyBucket.paused_count, sum)

    def busiest(self, top: int = 10) -> list[KeyLoad]:
        """The busiest keys of every shard; a share is of its own shard's releases."""
        rows = [row for shard in self.shards for row in shard.busiest(top)]
        return sorted(rows, key=lambda row: (-row.releases, row.key))[:top]

    def longest_waiting(self, top: int = 10) -> list[KeyLoad]:
        rows = [row for shard in self.shards for row in shard.longest_waiting(top)]
        return sorted(rows, key=lambda row: (-(row.oldest_age or 0), row.key))[:top]

    store_encoded = spread(LeakyBucket.store_encoded)
    #: From the next shard with an eligible key; the reservation's id names its shard.
    dequeue = swept(LeakyBucket.dequeue, lambda p: p.reservation, _merge_dequeue)
    # A reservation is finished, put back, paused or buried on the shard that holds it.
    commit = on_owner(LeakyBucket.commit, _own_reservation)
    retry_later = on_owner(LeakyBucket.retry_later, _own_reservation)
    backoff = on_owner(LeakyBucket.backoff, _own_reservation)
    dead_letter = on_owner(LeakyBucket.dead_letter, _own_reservation)
    reap = on_every(LeakyBucket.reap, lambda parts: sum_results(ReapResult, parts), register=True)
    #: Counters summed over the shards (the identities hold on the sum, as for pools).
    stats = on_every(LeakyBucket.stats, lambda parts: sum_results(BucketStats, parts))


#: What a pooled task's ``pool`` is: one CappedPool, or a ShardedPool.
AnyPool = CappedPool | ShardedPool
#: What a bucket task's ``bucket`` is: one LeakyBucket, or a ShardedBucket.
AnyBucket = LeakyBucket | ShardedBucket


def make_pool(shards: int, client: Any, name: str, capacity: int, **options: Any) -> AnyPool:
    """A CappedPool, or a ShardedPool when ``shards`` > 1 (the tasks' hook)."""
    if shards > 1:
        return ShardedPool(client, name, capacity, shards=shards, **options)
    return CappedPool(client, name, capacity, **options)


def make_bucket(shards: int, client: Any, name: str, **options: Any) -> AnyBucket:
    """A LeakyBucket, or a ShardedBucket when ``shards`` > 1 (the tasks' hook)."""
    if shards > 1:
        return ShardedBucket(client, name, shards=shards, **options)
    return LeakyBucket(client, name, **options)


catalog.add_sharded(ShardedPool.kind, ShardedPool)
catalog.add_sharded(ShardedBucket.kind, ShardedBucket)
