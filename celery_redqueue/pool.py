"""CappedPool: a bounded Redis structure that sheds load and counts exactly what it shed.

A pool holds at most ``capacity`` distinct entries. What happens to a call that arrives when it
is full depends on the policy:

* ``sample`` (default): every entry gets a uniformly random score and the pool keeps the
  ``capacity`` lowest, so it always holds a uniform random sample of everything offered since
  it was last emptied; popping lowest first returns entries in random order.
* ``newest``: keep the newest ``capacity`` entries (a ring buffer), evicting the oldest.
* ``reject``: keep the oldest, refusing new calls while full (tail drop).

With ``coalesce=True`` equal payloads merge into one entry with a count; capacity counts
distinct entries and consumers receive each payload with its count.

Accounting is exact and can be read at any moment from any process (``stats()``)::

    offered  == accepted + rejected
    accepted == processed + failed + evicted + depth + in_flight + lost

``depth`` counts calls waiting in the pool, ``in_flight`` calls popped but not yet
acknowledged, ``lost`` calls whose batch was never acknowledged before its deadline (its
consumer died: the pool delivers at most once).

Example::

    pool = CappedPool(redis.Redis(), "events", capacity=1000)
    pool.add({"user": 7})
    batch = pool.pop(100)
    for item in batch.items:
        handle(item.payload)
    pool.ack(batch)
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client import redis_errors
from .errors import ConfigurationError
from .keys import DEFAULT_PREFIX, StructureKeys
from .scripts import script
from .serializers import Serializer, get_serializer, to_bytes

POLICIES = ("sample", "newest", "reject")

#: Calls per script invocation in add_many: keeps every script call short (O(chunk)).
ADD_CHUNK = 1000

_REFUSED, _KEPT, _KEPT_EVICTED, _MERGED = 0, 1, 2, 3


@dataclass(frozen=True)
class AddResult:
    """What happened to one offered call. Truthy when the call was kept."""

    kept: bool
    #: An older entry was pushed out to make room (``sample`` and ``newest``).
    evicted: bool = False
    #: The call merged into an equal entry (coalescing pools).
    merged: bool = False
    #: This call armed the pool's "drain pending" flag: the caller should send a drain job.
    drain_needed: bool = False

    def __bool__(self) -> bool:
        return self.kept


@dataclass(frozen=True)
class PoolItem:
    """One popped entry: the payload and how many calls it stands for (1 unless coalescing)."""

    payload: Any
    count: int = 1


@dataclass
class PoolBatch:
    """Entries popped in one atomic step; acknowledge them with ``pool.ack(batch)``."""

    id: str
    items: list[PoolItem]
    #: Calls still waiting in the pool right after this pop.
    remaining: int = 0
    #: The pool is deep enough that one more drain job should be sent to share the work.
    fan_out: bool = False
    #: Entries whose payload could not be decoded; counted as failed on ack.
    undecodable: list[bytes] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(item.count for item in self.items) + len(self.undecodable)

    def __len__(self) -> int:
        return len(self.items) + len(self.undecodable)

    def __bool__(self) -> bool:
        return len(self) > 0


@dataclass(frozen=True)
class PoolStats:
    """A consistent snapshot of one pool's counters (read in one MULTI/EXEC)."""

    offered: int
    accepted: int
    rejected: int
    evicted: int
    processed: int
    failed: int
    depth: int
    entries: int
    in_flight: int
    lost: int
    capacity: int
    drains_pending: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class CappedPool:
    """A capped Redis pool; see the module docstring for policies and accounting."""

    kind = "pool"

    def __init__(
        self,
        client: Any,
        name: str,
        capacity: int,
        *,
        policy: str = "sample",
        coalesce: bool = False,
        prefix: str = DEFAULT_PREFIX,
        serializer: str | Serializer | None = None,
        drain_flag_ttl: float = 300.0,
        batch_timeout: float = 300.0,
        max_drains: int = 1,
    ) -> None:
        validate_pool_options(capacity=capacity, policy=policy, max_drains=max_drains)
        if drain_flag_ttl <= 0 or batch_timeout <= 0:
            raise ConfigurationError("drain_flag_ttl and batch_timeout must be positive seconds")
        self.client = client
        self.name = name
        self.capacity = capacity
        self.policy = policy
        self.coalesce = coalesce
        self.serializer = get_serializer(serializer)
        self.keys = StructureKeys(prefix, self.kind, name)
        self.drain_flag_ttl_ms = int(drain_flag_ttl * 1000)
        self.batch_timeout_ms = int(batch_timeout * 1000)
        self.max_drains = max_drains

    def __repr__(self) -> str:
        return f"<CappedPool {self.keys.base} capacity={self.capacity} policy={self.policy}>"

    # Producing

    def add(self, payload: Any) -> AddResult:
        """Offer one call's payload; one round trip. Raises SerializationError, storing nothing."""
        return self._add_encoded([self.encode(payload)])[0]

    def add_many(self, payloads: Iterable[Any]) -> list[AddResult]:
        """Offer many payloads, one round trip per ``ADD_CHUNK`` of them.

        Every payload is serialized before anything is stored, so one bad payload stores none.
        At most one result has ``drain_needed`` set.
        """
        encoded = [self.encode(p) for p in payloads]
        results: list[AddResult] = []
        for start in range(0, len(encoded), ADD_CHUNK):
            results.extend(self._add_encoded(encoded[start : start + ADD_CHUNK]))
        return results

    def encode(self, payload: Any) -> bytes:
        return to_bytes(self.serializer.dumps(payload))

    def _add_encoded(self, encoded: Sequence[bytes]) -> list[AddResult]:
        args: list[Any] = [
            self.capacity,
            self.policy,
            int(self.coalesce),
            self.drain_flag_ttl_ms,
        ]
        for data in encoded:
            args.append(repr(random.random()))
            args.append(data)
        reply = script("pool_add")(
            self.client,
            [self.keys("items"), self.keys("counts"), self.keys("stats"), self.keys("drains")],
            args,
        )
        send = bool(reply[0])
        results = []
        for i, status in enumerate(reply[1:]):
            results.append(
                AddResult(
                    kept=status != _REFUSED,
                    evicted=status == _KEPT_EVICTED,
                    merged=status == _MERGED,
                    drain_needed=send and i == 0,
                )
            )
        return results

    # Consuming

    def pop(self, n: int = 100) -> PoolBatch:
        """Atomically pop up to ``n`` entries as one in-flight batch.

        An empty batch means the pool was empty at that instant; the drain-pending flag was
        cleared in the same step, so nothing that arrives afterwards is stranded.
        """
        if n < 1:
            raise ConfigurationError(f"pop size must be at least 1, got {n!r}")
        batch_id = uuid.uuid4().hex
        reply = script("pool_pop")(
            self.client,
            [
                self.keys("items"),
                self.keys("counts"),
                self.keys("stats"),
                self.keys("drains"),
                self.keys("inflight"),
                self.keys("inflight_calls"),
            ],
            [
                n,
                batch_id,
                self.batch_timeout_ms,
                self.drain_flag_ttl_ms,
                self.max_drains,
                int(self.coalesce),
            ],
        )
        batch = PoolBatch(id=batch_id, items=[], fan_out=bool(reply[0]), remaining=int(reply[1]))
        for i in range(2, len(reply), 2):
            raw, count = reply[i], int(reply[i + 1])
            try:
                batch.items.append(PoolItem(self.serializer.loads(raw), count))
            except Exception:
                batch.undecodable.extend([raw] * count)
        return batch

    def ack(self, batch: PoolBatch, *, failed: int = 0) -> bool:
        """Finish a batch: its calls count as processed, except ``failed`` of them.

        Returns False when the batch had already been reaped as lost (it ran past its
        deadline), in which case nothing is counted twice.
        """
        failed += len(batch.undecodable)
        return self._finish(batch.id, batch.calls - failed, failed)

    def _finish(self, batch_id: str, processed: int, failed: int) -> bool:
        reply = script("pool_ack")(
            self.client,
            [self.keys("stats"), self.keys("inflight"), self.keys("inflight_calls")],
            [batch_id, processed, failed],
        )
        return bool(reply)

    def reap(self, limit: int = 1000) -> int:
        """Count batches past their deadline as lost; returns how many calls that was."""
        return int(
            script("pool_reap")(
                self.client,
                [self.keys("stats"), self.keys("inflight"), self.keys("inflight_calls")],
                [limit],
            )
        )

    # Reading

    def stats(self) -> PoolStats:
        """One consistent snapshot of the counters (a MULTI/EXEC of three reads)."""
        with redis_errors(f"reading stats of {self.keys.base}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.keys("stats"))
            pipe.zcard(self.keys("items"))
            pipe.get(self.keys("drains"))
            raw, entries, drains = pipe.execute()
        counters = {k.decode(): int(v) for k, v in raw.items()}

        def get(name: str) -> int:
            return counters.get(name, 0)

        return PoolStats(
            offered=get("offered"),
            accepted=get("accepted"),
            rejected=get("rejected"),
            evicted=get("evicted"),
            processed=get("processed"),
            failed=get("failed"),
            depth=get("queued"),
            entries=int(entries),
            in_flight=get("in_flight"),
            lost=get("lost"),
            capacity=self.capacity,
            drains_pending=int(drains or 0),
        )

    def __len__(self) -> int:
        """Calls waiting in the pool."""
        return self.stats().depth

    def clear(self) -> None:
        """Delete the pool's items and counters (this pool's keys only)."""
        with redis_errors(f"clearing {self.keys.base}"):
            self.client.delete(
                *(
                    self.keys(part)
                    for part in ("items", "counts", "stats", "drains", "inflight", "inflight_calls")
                )
            )


def validate_pool_options(*, capacity: Any, policy: Any, max_drains: Any = 1) -> None:
    """Shared by CappedPool and PoolTask so both fail with the same message."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigurationError(f"pool_size must be a positive integer, got {capacity!r}")
    if policy not in POLICIES:
        raise ConfigurationError(f"pool_policy must be one of {POLICIES}, got {policy!r}")
    if isinstance(max_drains, bool) or not isinstance(max_drains, int) or max_drains < 1:
        raise ConfigurationError(
            f"pool_drain_concurrency must be a positive integer, got {max_drains!r}"
        )
