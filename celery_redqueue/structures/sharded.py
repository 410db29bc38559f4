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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ReservationError
from ..redis.keys import DEFAULT_PREFIX
from ..redis.serializers import Serializer
from . import catalog
from .bucket import (
    BucketProducer,
    BucketStats,
    Dequeued,
    KeyLoad,
    KeyStats,
    LeakyBucket,
    Reservation,
)
from .bucket_types import EncodedCall, _check_key
from .pool import CappedPool, PoolBatch, PoolProducer, PoolStats
from .receipts import ReapResult, Receipt
from .sharding import Sharded, shard_names, split_id, stable_hash, sum_results, validate_shards

__all__ = [
    "AnyBucket",
    "AnyPool",
    "ShardedBucket",
    "ShardedPool",
    "make_bucket",
    "make_pool",
    "validate_shards",
]


class ShardedPool(Sharded, PoolProducer):
    """A capped pool spread over ``shards`` CappedPools; see the module docstring.

    Args:
        capacity: the logical capacity, split between the shards as evenly as it divides.
        shards: how many shards (at most ``capacity``).
        options: every other CappedPool option, applied to each shard.
    """

    kind = "pool"
    _figure_names = ("depth", ("offered",), ("rejected", "evicted", "lost"))

    def __init__(
        self,
        client: Any,
        name: str,
        capacity: int,
        *,
        shards: int,
        prefix: str = DEFAULT_PREFIX,
        serializer: str | Serializer | None = None,
        listed: bool = False,
        **options: Any,
    ) -> None:
        validate_shards("shards", shards, capacity)
        caps = [capacity // shards + (1 if i < capacity % shards else 0) for i in range(shards)]
        parts = [
            CappedPool(
                client, shard, cap, prefix=prefix, serializer=serializer, listed=True, **options
            )
            for shard, cap in zip(shard_names(self.kind, name, shards), caps, strict=True)
        ]
        self._setup_logical(client, name, prefix, parts, listed)
        self.capacity = capacity
        self.policy = parts[0].policy
        self.coalesce = parts[0].coalesce
        #: Upper bounds of each shard's share of [0, capacity): a point picks its shard.
        self._bounds = [sum(caps[: i + 1]) for i in range(shards)]

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

    # Producing

    def store_encoded(
        self,
        encoded: Sequence[bytes],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        ids = list(dedupe_ids or [None] * len(encoded))
        return self._store(
            encoded,
            lambda n: self.shard_of(encoded[n], ids[n]),
            lambda shard, data, ds: shard.store_encoded(data, delay=delay, dedupe_ids=ds),
            ids,
        )

    # Consuming

    def pop(
        self,
        n: int = 100,
        *,
        linger: bool = False,
        listen: float = 0.0,
        listener: str | None = None,
    ) -> PoolBatch:
        """Pop a batch from the next shard that has work (see ``CappedPool.pop``); its id names
        the shard, so `ack()` and the heartbeat find it. An empty batch means every shard
        was empty (and released its flag, unless lingering); ``wait``/``schedule`` are the
        earliest shard's."""
        batch: PoolBatch | None
        i, batch, empties = self._sweep(
            lambda shard: shard.pop(n, linger=linger, listen=listen, listener=listener),
            lambda b: bool(b) or b.pop_again,
        )
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

    def ack(
        self,
        batch: PoolBatch,
        *,
        failures: Mapping[int, str] | None = None,
        seconds: float = 0.0,
    ) -> bool:
        """Finish a batch on the shard it came from (see ``CappedPool.ack``)."""
        i, inner = split_id(batch.id, len(self.shards))
        own = dataclasses.replace(batch, id=inner)
        return bool(self.shards[i].ack(own, failures=failures, seconds=seconds))

    def reap(self, limit: int = 1000) -> ReapResult:
        """Reap every shard; the counts are summed."""
        self.register_once()
        return sum_results(ReapResult, [s.reap(limit) for s in self.shards])

    # Reading

    def stats(self) -> PoolStats:
        """Counters summed over the shards. Each shard's snapshot is consistent, and the
        accounting identities are sums of per-shard ones, so they hold on the sum."""
        return sum_results(PoolStats, [s.stats() for s in self.shards], capacity=self.capacity)

    def __len__(self) -> int:
        """Calls waiting in every shard."""
        return self.stats().depth


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

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        shards: int,
        prefix: str = DEFAULT_PREFIX,
        serializer: str | Serializer | None = None,
        listed: bool = False,
        **options: Any,
    ) -> None:
        validate_shards("shards", shards)
        options.pop("total_shares", None)  # recorded settings name it; the shard count decides
        # A total rate is split evenly: each shard meters its share in its own scripts, so a
        # release costs no extra round trip (see docs/metered-apis.md).
        parts = [
            LeakyBucket(
                client,
                shard,
                prefix=prefix,
                serializer=serializer,
                listed=True,
                total_shares=shards,
                **options,
            )
            for shard in shard_names(self.kind, name, shards)
        ]
        self._setup_logical(client, name, prefix, parts, listed)
        self.ordered = parts[0].ordered
        self.limits = parts[0].limits
        self.default_interval_ms = parts[0].default_interval_ms
        self.default_burst = parts[0].default_burst

    def shard_of(self, key: str) -> int:
        """The shard of a key: the same in every process, so a key's rate is one bucket's."""
        return stable_hash(_check_key(key).encode()) % len(self.shards)

    def shard(self, key: str) -> LeakyBucket:
        """The LeakyBucket that holds ``key``."""
        bucket: LeakyBucket = self.shards[self.shard_of(key)]
        return bucket

    # Rates

    def set_rate(self, key: str, rate: str | float, burst: float | None = None) -> None:
        """Set a key's rate on its shard (see ``LeakyBucket.set_rate``)."""
        self.shard(key).set_rate(key, rate, burst)

    def clear_rate(self, key: str) -> None:
        self.shard(key).clear_rate(key)

    def set_cost_rate(self, key: str, rate: str | float, burst: float | None = None) -> None:
        """Set a key's cost budget on its shard (see ``LeakyBucket.set_cost_rate``)."""
        self.shard(key).set_cost_rate(key, rate, burst)

    def pause(self, key: str, seconds: float | None = None) -> bool:
        """Pause a key on its shard (see ``LeakyBucket.pause``)."""
        return self.shard(key).pause(key, seconds)

    def resume(self, key: str) -> bool:
        """Resume a key on its shard; its drain job goes through `drain_sender`."""
        shard = self.shard(key)
        shard.drain_sender = self.drain_sender
        return shard.resume(key)

    def paused(self, limit: int = 100) -> list[tuple[str, float]]:
        """Paused keys of every shard, soonest end first."""
        rows = [row for shard in self.shards for row in shard.paused(limit)]
        return sorted(rows, key=lambda row: (row[1], row[0]))[:limit]

    def paused_count(self) -> int:
        return sum(shard.paused_count() for shard in self.shards)

    def busiest(self, top: int = 10) -> list[KeyLoad]:
        """The busiest keys of every shard; a share is of its own shard's releases."""
        rows = [row for shard in self.shards for row in shard.busiest(top)]
        return sorted(rows, key=lambda row: (-row.releases, row.key))[:top]

    def longest_waiting(self, top: int = 10) -> list[KeyLoad]:
        rows = [row for shard in self.shards for row in shard.longest_waiting(top)]
        return sorted(rows, key=lambda row: (-(row.oldest_age or 0), row.key))[:top]

    # Producing

    def store_encoded(
        self,
        encoded: Sequence[EncodedCall],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        return self._store(
            encoded,
            lambda n: self.shard_of(encoded[n][0]),
            lambda shard, items, ds: shard.store_encoded(items, delay=delay, dedupe_ids=ds),
            dedupe_ids,
        )

    # Consuming

    def dequeue(
        self,
        *,
        listen: float = 0.0,
        listener: str | None = None,
        linger: bool = False,
        ahead: bool = False,
    ) -> Dequeued:
        """Reserve from the next shard with an eligible key (see ``LeakyBucket.dequeue``); the
        reservation's id names its shard. Otherwise the earliest shard's wait."""
        i, poll, empties = self._sweep(
            lambda shard: shard.dequeue(
                listen=listen, listener=listener, linger=linger, ahead=ahead
            ),
            lambda p: p.reservation,
        )
        malformed = sum(p.malformed for _, p in empties)
        if poll is not None:
            reservation = dataclasses.replace(
                poll.reservation, id=f"{i}:{poll.reservation.id}", bucket=self.keys.base
            )
            return Dequeued(reservation, malformed=malformed + poll.malformed)
        earliest = self._earliest(empties)
        self._release_claims(empties, keep=None if earliest is None else earliest[0])
        if earliest is None:
            return Dequeued(malformed=malformed)
        return Dequeued(wait=earliest[1].wait, schedule=earliest[1].schedule, malformed=malformed)

    def _own(self, reservation: Reservation | str) -> tuple[LeakyBucket, Reservation | str]:
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

    def commit(
        self, reservation: Reservation | str, *, seconds: float = 0.0, cost: float | None = None
    ) -> bool:
        """Finish an item on its shard (see ``LeakyBucket.commit``)."""
        shard, own = self._own(reservation)
        return shard.commit(own, seconds=seconds, cost=cost)

    def retry_later(self, reservation: Reservation | str, delay: float = 0.0) -> bool:
        """Put an item back at the head of its key's queue (see ``LeakyBucket.retry_later``)."""
        shard, own = self._own(reservation)
        return shard.retry_later(own, delay=delay)

    def backoff(
        self, reservation: Reservation | str, seconds: float, *, cost: float | None = None
    ) -> bool:
        """Pause an item's key on its shard and put the item back (``LeakyBucket.backoff``)."""
        shard, own = self._own(reservation)
        return shard.backoff(own, seconds, cost=cost)

    def dead_letter(self, reservation: Reservation | str, error: str) -> bool:
        """Move a held item to its shard's dead-letter list."""
        shard, own = self._own(reservation)
        return shard.dead_letter(own, error)

    def reap(self, limit: int = 1000) -> ReapResult:
        """Reap every shard; the counts are summed."""
        self.register_once()
        return sum_results(ReapResult, [s.reap(limit) for s in self.shards])

    # Reading

    def stats(self) -> BucketStats:
        """Counters summed over the shards (the identities hold on the sum, as for pools)."""
        return sum_results(BucketStats, [s.stats() for s in self.shards])

    def key_stats(self, key: str) -> KeyStats:
        """One key's figures, read on its shard."""
        return self.shard(key).key_stats(key)


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
