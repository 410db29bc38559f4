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

Accounting is exact and can be read at any moment from any process (``stats()``):

    offered  == accepted + rejected
    accepted == processed + failed + evicted + depth + in_flight + lost + dead + purged

``depth`` counts calls waiting (in the pool, or out a retry's delay), ``in_flight`` calls popped
but not acknowledged, ``lost`` calls whose batch missed its deadline (its consumer died and the
pool delivers at most once, the default). With ``delivery="at_least_once"`` those go back into
the pool, and past ``max_receives`` into the dead-letter list (``dead``; ``purged`` once purged).
Calls held for later (``add(..., delay=)``) count as ``delayed`` and are offered when due.

The drain-pending flag is a short lease (``drain_lease``, 10 s by default) that a running drain
renews, so a drain job that dies or was never sent frees the pool within seconds; a batch's
deadline (``visibility_timeout``) is pushed forward by `CappedPool.renew()` while bodies run.
An entry that cannot be parsed or decoded is dead-lettered with the reason and counted
(``dead``); the rest of its batch carries on. ``name_evicted=True``: a call's receipt names the
call it pushed out (``Receipt.evicted_calls``; stores take ``pool_add``). ``shards=N`` spreads
the pool over N hash tags (cluster nodes): see `sharding`.

Example:

    pool = CappedPool(redis.Redis(), "events", capacity=1000)
    pool.add({"user": 7})
    batch = pool.pop(100)
    for item in batch.items:
        handle(item.payload)
    pool.ack(batch)
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX
from ..redis.lua import MIXED, UPKEEP
from ..redis.serializers import Serializer
from ..validation import one_of, positive_int, seconds
from . import sharding
from .base import DRAIN_LEASE, Structure, decode_ids
from .figures import parse_counters, unfold
from .pool_gather import PoolGathering
from .pool_replies import ack_args, decodable, name_victims, read_pop
from .pool_types import (
    COUNTERS,
    DELIVERIES,
    POLICIES,
    PoolBatch,
    PoolItem,
    PoolStats,
    validate_pool_options,
)
from .protocols import Producer, in_chunks
from .receipts import ReapResult, Receipt
from .sharded import Sharded
from .wake import Listening, listen_ms, listener_id

__all__ = [
    "COUNTERS",
    "DELIVERIES",
    "POLICIES",
    "CappedPool",
    "PoolBatch",
    "PoolItem",
    "PoolStats",
    "ReapResult",
    "Receipt",
    "validate_pool_options",
]


#: The keys every pool script receives, in this order (see lua/pool_keys.lua).
# fmt: off
PARTS = (
    # pool_add and pool_add_plain receive only the parts their headers name (fewer arguments
    # on the hot path); the other scripts receive them all.
    "items", "counts", "stats", "drains", "receives", "ages", "arrivals", "flow", "scheduled",
    "dedupe", "wake", "signal", "listening", "inflight", "inflight_calls", "inflight_items",
    "dead", "done", "calls", "calls_at",
)
# fmt: on

#: Calls per script invocation in add_many: keeps every script call short (O(chunk)).
ADD_CHUNK = 1000

logger = logging.getLogger(__name__)

#: What became of an offered call (lua/pool_status.lua names the same values).
_REFUSED, _KEPT, _KEPT_EVICTED, _MERGED, _DUPLICATE, _DELAYED = 0, 1, 2, 3, 4, 5


def held_batch(pool: Any, kwargs: dict[str, Any]) -> tuple[int, str] | None:
    """The shard holding in flight the batch a pop names (``batch_id``, as the caller chose it
    or as this pool answered it, ``<shard>:<id>``) and its id there: a pop sent again after a
    lost reply replays it there, never pops a second batch from another shard."""
    batch_id = kwargs.get("batch_id")
    if not batch_id:
        return None
    index, sep, inner = batch_id.partition(":")
    if sep and index.isdigit() and int(index) < len(pool.shards):
        candidates = [(int(index), inner)]
    else:
        candidates = [(i, batch_id) for i in range(len(pool.shards))]
    for i, own in candidates:
        if pool.client.hexists(pool.shards[i].keys("inflight_calls"), own):
            return i, own
    return None


class CappedPool(Sharded, Structure, Producer[bytes], PoolGathering, Listening):
    """A capped Redis pool; see the module docstring for policies and accounting."""

    kind = "pool"
    figure_names = ("depth", ("offered",), ("rejected", "evicted", "lost"))
    parts = PARTS
    dead_script = "pool_dead"
    unstored_counters = ("offered", "accepted", "dead")
    store_chunk = ADD_CHUNK

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
        drain_lease: float = DRAIN_LEASE,
        visibility_timeout: float = 60.0,
        max_drains: int = 1,
        delivery: str = "at_most_once",
        max_receives: int = 5,
        dedupe_window: float = 0.0,
        processed_guard: float = 0.0,
        name_evicted: bool = False,
        listed: bool = False,
        shards: int = 1,
    ) -> None:
        validate_pool_options(capacity=capacity, policy=policy, max_drains=max_drains)
        seconds("drain_lease", drain_lease, positive=True)
        seconds("visibility_timeout", visibility_timeout, positive=True)
        one_of("delivery", delivery, DELIVERIES)
        positive_int("max_receives", max_receives)
        seconds("dedupe_window", dedupe_window)
        seconds("processed_guard", processed_guard)
        if coalesce and processed_guard:
            raise ConfigurationError(
                "processed_guard is not available on coalescing pools: equal calls merge "
                "into one entry, so an entry has no identity of its own to remember"
            )
        self._setup(client, name, prefix, serializer, listed)
        self.capacity = capacity
        self.policy = policy
        self.coalesce = coalesce
        self.drain_lease_ms = max(int(drain_lease * 1000), 1)
        self.visibility_timeout_ms = int(visibility_timeout * 1000)
        self.max_drains = max_drains
        self.at_least_once = delivery == "at_least_once"
        self.max_receives = max_receives
        self.dedupe_window_ms = int(dedupe_window * 1000)
        self.processed_guard_ms = int(processed_guard * 1000)
        self.name_evicted = bool(name_evicted)
        # With shards > 1, each holds its share of the capacity.
        self._build_shards(shards, sharding.split_capacity, capacity)

    #: A sharded pool has no one oldest call to count a gathering wait from.
    gather = sharding.unsharded(PoolGathering.gather)

    def __repr__(self) -> str:
        return f"<CappedPool {self.keys.base} capacity={self.capacity} policy={self.policy}>"

    # Producing

    def _script_head(self) -> list[Any]:
        return [self.capacity, self.policy, int(self.coalesce), self.drain_lease_ms]

    @sharding.recorded
    def settings(self) -> dict[str, Any]:
        """What another process needs to open this pool (the registry keeps it)."""
        return {
            "capacity": self.capacity,
            "policy": self.policy,
            "coalesce": self.coalesce,
            "delivery": "at_least_once" if self.at_least_once else "at_most_once",
            "max_receives": self.max_receives,
            "visibility_timeout": self.visibility_timeout_ms / 1000,
            "max_drains": self.max_drains,
            "drain_lease": self.drain_lease_ms / 1000,
        }

    @sharding.spread(sharding.pool_shard)
    def store_encoded(
        self,
        encoded: Sequence[bytes],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        delay_ms = int(seconds("delay", delay) * 1000)
        if (delay_ms == 0 and not self.name_evicted) and (
            dedupe_ids is None or not self.dedupe_window_ms or not any(dedupe_ids)
        ):
            return self._add_plain(encoded)
        args: list[Any] = [self.dedupe_window_ms]
        score = random.random
        if dedupe_ids is None:
            for data in encoded:
                args += (repr(score()), data, "", delay_ms)
        else:
            for data, dedupe_id in zip(encoded, dedupe_ids, strict=True):
                args += (repr(score()), data, dedupe_id or "", delay_ms)
        reply = self._run("pool_add", args)
        send, wake_ms = reply[0] == 1, int(reply[1])
        statuses = reply[2 : 2 + len(encoded)]
        results = [_QUIET_RESULTS[status] for status in statuses]
        if send or wake_ms >= 0:
            # Only the first result carries the drain the call asked for.
            results[0] = _add_result(statuses[0], send, wake_ms / 1000.0 if wake_ms >= 0 else None)
        victims = reply[2 + len(encoded) :]
        return name_victims(results, victims, self) if victims else results

    def add(self, payload: Any, *, delay: float = 0.0, dedupe_id: str | None = None) -> Receipt:
        """Offer one call's payload; one round trip. Raises SerializationError, storing nothing.

        ``delay`` holds the call in the delayed set for that many seconds before it is offered;
        ``dedupe_id`` refuses the call if the same id was seen within ``dedupe_window``.
        """
        return self.store_encoded([self.encode(payload)], delay=delay, dedupe_ids=[dedupe_id])[0]

    def add_many(self, payloads: Iterable[Any], *, delay: float = 0.0) -> list[Receipt]:
        """Offer many payloads, one round trip per ``ADD_CHUNK`` of them.

        Every payload is serialized before anything is stored, so one bad payload stores none.
        At most one result has ``drain_needed`` set.
        """
        encoded = [self.encode(p) for p in payloads]
        return in_chunks(lambda chunk: self.store_encoded(chunk, delay=delay), encoded, ADD_CHUNK)

    def _add_plain(self, encoded: Sequence[bytes]) -> list[Receipt]:
        """Calls with no dedupe id and no delay (a single .delay(), add_many, a buffer's
        flush): the smaller script, two arguments per call, sent as one script call."""
        score = random.random
        if len(encoded) == 1:
            reply = self._run("pool_add_plain", [repr(score()), encoded[0]])
        else:
            tail: list[Any] = []
            for data in encoded:
                tail += (repr(score()), data)
            reply = self._run("pool_add_plain", tail)
        statuses = reply[2:]
        results = [_QUIET_RESULTS[status] for status in statuses]
        if reply[0] == 1:
            # Only the first result carries the drain the call asked for.
            results[0] = _add_result(statuses[0], True)
        return results

    # Consuming

    # From the next shard with work; a batch's id names its shard (ack, the heartbeat).
    @sharding.swept(sharding.batch_has_work, sharding.merge_pop, held_batch)
    def pop(
        self,
        n: int = 100,
        *,
        linger: bool = False,
        listen: float = 0.0,
        listener: str | None = None,
        batch_id: str | None = None,
    ) -> PoolBatch:
        """Atomically pop up to ``n`` entries as one in-flight batch (due delayed calls first
        enter the pool, in a step of their own: ``pool_due``).

        An entry received before (returned by the reaper or by a failed ack) is popped alone: a
        batch of one, so a call that kills its process takes no good call with it again.
        An empty batch with ``wait`` None means the pool was empty at that instant; the
        drain-pending flag was cleared in the same step, so nothing that arrives afterwards is
        stranded. With ``wait`` set, only delayed calls remain, the first due in ``wait`` s;
        the flag was released (calls due now send their own drain job), and ``schedule`` asks
        the caller to send one drain job with that countdown (none is scheduled earlier).
        Entries that cannot be parsed are dead-lettered (``malformed``); undecodable payloads
        are listed in ``undecodable`` and dead-lettered by `ack()`. With ``linger=True``
        an empty pop keeps the flag (``batch.lingering``): the caller promises to pop again
        soon, so calls arriving meanwhile send no drain job. ``listen`` (s): a pop taking nothing
        lists ``listener`` (default: this thread) on the wake signal that long, or (0) takes it
        off; see `listen` and `wake`.

        ``batch_id`` (default: a new one) names the batch: a pop with the id of a batch still
        in flight pops nothing and returns that batch again, which is what makes a pop whose
        reply was lost safe to send again (the call path does, once).
        """
        if n < 1:
            raise ConfigurationError(f"pop size must be at least 1, got {n!r}")
        batch_id = batch_id or uuid.uuid4().hex
        args: list[Any] = [
            n,
            batch_id,
            self.visibility_timeout_ms,
            self.max_drains,
            int(self.processed_guard_ms > 0),
            int(linger),
            listen_ms(listen),
            listener or listener_id(),
            int(self.at_least_once),
            1,  # due delayed calls first
        ]
        # The common pop; what it leaves to other scripts its status names (lua/pool_pop.lua).
        reply = self._run("pool_pop", args)
        malformed = 0
        if reply[0] == UPKEEP:
            malformed = int(self._run("pool_due", [n]))
            args[-1] = 0
            reply = self._run("pool_pop", args)
        if reply[0] == MIXED:
            reply = self._run("pool_pop_mixed", args)
        reply[5] = int(reply[5]) + malformed
        return read_pop(reply, batch_id, self.serializer.loads, self.coalesce, self.keys.base)

    @sharding.on_batch
    def ack(
        self,
        batch: PoolBatch,
        *,
        failures: Mapping[int, str] | None = None,
        retry_in: Mapping[int, float] | None = None,
        dead: Collection[int] = (),
        seconds: float = 0.0,
    ) -> bool:
        """Finish a batch. ``failures`` maps positions in ``batch.items`` to error texts: one
        in ``retry_in`` is retried after that many seconds in either mode (0: now; else as a
        delayed call, in ``depth``, its receives kept), one in ``dead`` dead-lettered now, any
        other counted ``failed`` at most once and back now at least once; past ``max_receives``
        dead-lettered. ``seconds``: the bodies' time (workers-needed). False: the reaper had
        taken the batch back (nothing counted twice); True, changing nothing, for a re-sent ack.
        Retried calls that need a drain job nobody holds set ``batch.drain_needed``."""
        guard, again = self.processed_guard_ms > 0, "@0" if self.at_least_once else ""
        args: list[Any] = [
            batch.id,
            int(self.at_least_once),
            self.max_receives,
            self.processed_guard_ms,
            repr(float(seconds)),
            *ack_args(batch, failures or {}, guard, retry_in, dead, again),
        ]
        held, send_drain = self._run("pool_ack", args)
        batch.drain_needed = bool(send_drain)
        return bool(held)

    @sharding.on_owners
    def renew(self, batch_ids: Sequence[str]) -> list[str]:
        """Push the deadline of batches still in flight to now + ``visibility_timeout`` and renew
        the drain lease, in one round trip (the worker's heartbeat). Returns the ids that were
        no longer in flight: the reaper had taken them back."""
        name, _, args = self.renew_call(batch_ids)
        reply = self._run(name, args)
        return decode_ids(reply)

    def renew_call(self, batch_ids: Sequence[str]) -> tuple[str, list[str], list[Any]]:
        """The script, keys and arguments of `renew()` (a heartbeat pipelines them)."""
        return "pool_renew", self._keys, [self.visibility_timeout_ms, *batch_ids]

    def heartbeat_interval(self) -> float:
        """Seconds between renewals while a worker holds batches or the drain lease: a third
        of the shorter of the two, so two renewals can fail before anything expires."""
        return min(self.visibility_timeout_ms, self.drain_lease_ms) / 3000.0

    @sharding.on_every(sharding.sum_results(ReapResult), register=True)
    def reap(self, limit: int = 1000, *, lost_calls: bool = False) -> ReapResult:
        """Take back batches past their deadline: lost (at most once) or returned to the pool
        / dead-lettered (at least once). ``lost_calls``: also return the payloads of the calls
        counted lost or evicted (``ReapResult.lost_calls``), so that their waiters can be told."""
        reply = self._run(
            "pool_reap", [limit, int(self.at_least_once), self.max_receives, int(lost_calls)]
        )
        lost, returned, dead, send = reply[:4]
        return ReapResult(
            lost=int(lost),
            returned=int(returned),
            dead_lettered=int(dead),
            drain_needed=bool(send),
            lost_calls=decodable(reply[4:], self.serializer.loads, self.keys.base),
        )

    # Reading

    @sharding.on_every(sharding.sum_results(PoolStats))
    def stats(self) -> PoolStats:
        """One consistent snapshot of the counters (one read-only script: works at maxmemory;
        summed over the shards, whose identities add up)."""
        from ..redis.lua import pairs, read_atomic

        with redis_errors(f"reading stats of {self.keys.base}"):
            flat, entries, drains = read_atomic(
                self.client,
                [
                    ("HGETALL", self.keys("stats"), ()),
                    ("ZCARD", self.keys("items"), ()),
                    ("GET", self.keys("drains"), ()),
                ],
            )
        counters = unfold(parse_counters(self.keys("stats"), pairs(flat)))
        pending = parse_counters(self.keys("drains"), {b"drains": drains or b"0"})["drains"]
        return PoolStats(
            **{name: counters.get(name, 0) for name in COUNTERS},
            depth=counters.get("depth", 0),
            entries=int(entries),
            capacity=self.capacity,
            drains_pending=pending,
        )

    def __len__(self) -> int:
        """Calls waiting in the pool."""
        return self.stats().depth


def _add_result(status: int, drain_needed: bool = False, wake_in: float | None = None) -> Receipt:
    return Receipt(
        kept=status in (_KEPT, _KEPT_EVICTED, _MERGED),
        evicted=status == _KEPT_EVICTED,
        merged=status == _MERGED,
        drain_needed=drain_needed,
        duplicate=status == _DUPLICATE,
        delayed=status == _DELAYED,
        wake_in=wake_in,
    )


#: The result of each status when the call asks for no drain job: results are frozen, so the
#: producer path hands out these instead of building one per call.
_QUIET_RESULTS = tuple(_add_result(status) for status in range(_DELAYED + 1))
