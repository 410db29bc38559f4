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

The drain flag is a short lease (``drain_lease``, 10 s by default) that a running drain
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

import dataclasses
import logging
import random
import re
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX
from ..redis.lua import AGAIN, LATER, LINGER, MIXED, UPKEEP, KeyOrArg
from ..redis.serializers import Serializer
from ..validation import one_of, positive_int, seconds
from . import debounce, sharding
from .base import DRAIN_LEASE, decode_ids
from .debounce import DebouncedKey
from .figures import parse_counters, unfold
from .protocols import in_chunks
from .receipts import QueueCounters, ReapResult, Receipt
from .sharded import Sharded
from .sharding import Split, _routing, earliest, release_claims, split_id, stable_hash
from .wake import listen_ms, listener_id

if TYPE_CHECKING:
    from ..redis.client import Client

logger = logging.getLogger(__name__)

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


# What a pool hands back (results, batches, counters) and its option checks (shared with
# PoolTask).

POLICIES = ("sample", "newest", "reject")
DELIVERIES = ("at_most_once", "at_least_once")


@dataclass(frozen=True)
class PoolItem:
    """One popped entry: the payload and how many calls it stands for (1 unless coalescing)."""

    payload: object
    count: int = 1
    #: Times this entry has been handed out, this time included (at-least-once redelivery).
    receives: int = 1
    #: The entry's id (what the processed-guard records).
    id: str = ""


@dataclass
class PoolBatch:
    """Entries popped in one atomic step; acknowledge them with ``pool.ack(batch)``."""

    id: str
    items: list[PoolItem]
    #: Calls still waiting in the pool right after this pop.
    remaining: int = 0
    #: The pool is deep enough that one more drain job should be sent to share the work.
    fan_out: bool = False
    #: Entries whose payload could not be decoded: (id, count, raw); ack dead-letters them.
    undecodable: list[tuple[str, int, bytes]] = field(default_factory=list)
    #: Why each undecodable entry could not be decoded, by id.
    errors: dict[str, str] = field(default_factory=dict)
    #: Only delayed calls remain: the first is due in this many seconds (else None).
    wait: float | None = None
    #: With ``wait``: no drain job is scheduled for then yet; the caller should send one with
    #: that countdown (the pop released the drain flag, so calls due now send their own).
    schedule: bool = False
    #: Entries that could not be parsed, dead-lettered by this pop (counted in ``dead``).
    malformed: int = 0
    #: Empty, and the drain flag was kept because the pop asked to linger.
    lingering: bool = False
    #: Empty only because the processed-guard skipped what was popped; more waits.
    pop_again: bool = False
    #: Set by ``pool.ack``: retried calls wait and no drain job holds the pool; send one.
    drain_needed: bool = False

    @property
    def calls(self) -> int:
        return sum(item.count for item in self.items) + sum(c for _, c, _ in self.undecodable)

    def __len__(self) -> int:
        return len(self.items) + len(self.undecodable)

    def __bool__(self) -> bool:
        return len(self) > 0


#: PoolStats fields read straight from the stats hash under the same name.
COUNTERS = (
    "offered",
    "accepted",
    "rejected",
    "evicted",
    "processed",
    "failed",
    "in_flight",
    "lost",
    "dead",
    "purged",
    "delayed",
    "duplicates",
    "retried",
    "redelivered",
    "guard_skipped",
    "late",
    "debounced",
)


@dataclass(frozen=True, kw_only=True)
class PoolStats(QueueCounters):
    """A consistent snapshot of one pool's counters (read in one MULTI/EXEC); the counters
    every queue kind keeps are `QueueCounters`'."""

    offered: int
    accepted: int
    rejected: int
    evicted: int
    failed: int
    entries: int
    lost: int
    capacity: int
    #: Drain jobs sent or running: the count in the pool's drain flag (at most ``max_drains``).
    drains: int
    #: Calls that replaced a held debounced call of their dedupe id (``debounce``).
    debounced: int = 0


#: A held debounced member of ``scheduled``: "<hex seq>#<count>#<hex dedupe id>:" (pool_debounce).
_DEBOUNCED = re.compile(rb"^[0-9a-f]+#(\d+)#([0-9a-f]*):")


def validate_pool_options(
    *,
    capacity: object,
    policy: object,
    max_drains: object = 1,
    names: Mapping[str, str] | None = None,
) -> None:
    """Shared by CappedPool and PoolTask; ``names`` maps each parameter to the caller's name
    for it (PoolTask says ``pool_size`` where CappedPool says ``capacity``)."""
    name = (names or {}).get
    positive_int(name("capacity", "capacity"), capacity)
    one_of(name("policy", "policy"), policy, POLICIES)
    positive_int(name("max_drains", "max_drains"), max_drains)


# What crosses the wire per popped call: reading a ``pool_pop`` reply into a `PoolBatch`, and
# the arguments of its ``pool_ack`` (and the lost calls a ``pool_reap`` or ``pool_add`` replies).
# A drain runs this for every call it takes, so it is written for that: the reply lists each
# entry's member once (``id:payload``), with counts and receives only where they are not 1 (see
# lua/pool_reply_entries.lua); an ack names only the calls that did not succeed.

_new, _set = object.__new__, object.__setattr__


def _item(payload: object, count: int, receives: int, entry_id: str) -> PoolItem:
    """``PoolItem(...)`` without the call through the dataclass's ``__init__`` (a quarter of
    the cost, once per popped call). Set field by field, never through ``__dict__``: that would
    give every item a dict object of its own, and a batch's items live long enough for the
    garbage collector to promote them, which makes its full collections come sooner."""
    item = _new(PoolItem)
    _set(item, "payload", payload)
    _set(item, "count", count)
    _set(item, "receives", receives)
    _set(item, "id", entry_id)
    return item


def read_pop(
    reply: list[Any], batch_id: str, loads: Callable[[bytes], object], coalesce: bool, name: str
) -> PoolBatch:
    """The batch a ``pool_pop`` reply describes; payloads that cannot be decoded are listed in
    ``undecodable`` (``ack`` dead-letters them) with the reason in ``errors``."""
    status, fan_out, remaining, wait_ms, schedule, malformed, k = reply[:7]
    batch = PoolBatch(
        id=batch_id,
        items=[],
        fan_out=bool(fan_out),
        remaining=int(remaining),
        wait=int(wait_ms) / 1000.0 if status == LATER else None,
        schedule=bool(schedule),
        malformed=int(malformed),
        lingering=status == LINGER,
        pop_again=status == AGAIN,
    )
    if batch.malformed:
        logger.warning("%s: %d malformed entries dead-lettered by a pop", name, batch.malformed)
    if not k:
        return batch
    members = reply[7 : 7 + k]
    extras = reply[7 + k :]
    if coalesce:
        parts = [(member, b"", member) for member in members]
    else:
        parts = [member.partition(b":") for member in members]
    if not extras:
        # The common case: fresh calls, one each. A decoding error takes the path below.
        try:
            batch.items = [_item(loads(raw), 1, 1, head.decode()) for head, _, raw in parts]
            return batch
        except Exception:
            pass
    special = {extras[j] - 1: (extras[j + 1], extras[j + 2]) for j in range(0, len(extras), 3)}
    for index, (head, _, raw) in enumerate(parts):
        count, receives = special.get(index, (1, 1))
        # Lossless: a coalescing pool's id is its payload, binary with msgpack or pickle, and
        # ack_args encodes it back to the very member the ack must find.
        entry_id = head.decode(errors="surrogateescape")
        try:
            payload = loads(raw)
        except Exception as exc:
            # It can never succeed: ack() dead-letters it at once, with the reason.
            logger.warning(
                "%s: entry %r is undecodable (%s); it will be dead-lettered", name, entry_id, exc
            )
            batch.undecodable.append((entry_id, int(count), raw))
            batch.errors[entry_id] = f"undecodable payload: {type(exc).__name__}: {exc}"
        else:
            batch.items.append(_item(payload, int(count), int(receives), entry_id))
    return batch


def decodable(
    raws: Sequence[bytes], loads: Callable[[bytes], object], name: str
) -> tuple[object, ...]:
    """The payloads among ``raws`` (a reap's lost calls) that decode: one that does not is
    logged, and has no id to tell its waiter by."""
    payloads = []
    for raw in raws:
        try:
            payloads.append(loads(raw))
        except Exception as exc:
            logger.warning("%s: a lost call's payload is undecodable: %s", name, exc)
    return tuple(payloads)


def name_victims(
    results: list[Receipt], victims: Sequence[bytes], pool: CappedPool
) -> list[Receipt]:
    """``results`` (of a ``pool_add`` reply) with each evicting call's receipt naming the call
    it pushed out (``evicted_calls``): the reply lists the members after the statuses, one per
    call that evicted, in order."""
    victims_left = iter(victims)
    for index, result in enumerate(results):
        member = next(victims_left, None) if result.evicted else None
        if member is not None:
            raw = member if pool.coalesce else member.partition(b":")[2]
            named = decodable([raw], pool.serializer.loads, pool.keys.base)
            results[index] = dataclasses.replace(result, evicted_calls=named)
    return results


def _member_id(entry_id: str) -> bytes:
    """The id's bytes as stored (read_pop decoded them with ``surrogateescape``)."""
    return entry_id.encode("utf-8", "surrogateescape")


def ack_args(
    batch: PoolBatch,
    failures: Mapping[int, str],
    guard: bool,
    retry_in: Mapping[int, float] | None = None,
    dead: Collection[int] = (),
    again: str = "",
) -> list[KeyOrArg]:
    """After the batch's id and settings: the calls it holds, then each call that did not
    succeed (id, count, error text, and what becomes of it: ``@`` and its retry delay in ms,
    ``d`` to dead-letter it, ``!`` and the raw payload to bury now, or ``again``, the delivery
    mode's rule: ``@0`` back now, or nothing: failed), then, for the processed ``guard``, the
    ids of those that did."""
    items = batch.items
    retry_in = retry_in or {}
    args: list[KeyOrArg] = [batch.calls, len(failures) + len(batch.undecodable)]
    for index, error in failures.items():
        item = items[index]
        delay = retry_in.get(index)
        mark = "d" if index in dead else again if delay is None else f"@{max(int(delay * 1000), 0)}"
        args += (_member_id(item.id), item.count, str(error)[:4000] or "failed", mark)
    for entry_id, count, raw in batch.undecodable:
        reason = batch.errors.get(entry_id, "undecodable payload")[:4000]
        args += (_member_id(entry_id), count, reason, b"!" + raw)
    if guard:
        args += [item.id for index, item in enumerate(items) if index not in failures]
    return args


# Gathering:
# Gathering: whether a drain should pop a pool now or let a batch fill first.
#
# A ``pool_batch`` body that writes to a database wants batches, not single calls: "every 10 s or
# every 100 calls". `CappedPool.gather()` answers, in one atomic read, whether the pool
# holds ``min_calls`` or its oldest call has waited ``wait`` seconds (pop now), or how long the
# drain should let calls gather. When it says wait, it holds the drain flag until then (calls
# arriving meanwhile send no drain job) and marks the wake-up, so that of all the drains that ask
# (a call's, beat's) one schedules the next look.


@dataclass(frozen=True)
class Gather:
    """A gather answer: ``wait`` 0 means pop now; else look again in ``wait`` seconds, sending
    a drain job with that countdown when ``schedule`` (none is scheduled for then yet)."""

    wait: float = 0.0
    schedule: bool = False


# Sharded pools (see `sharding`)


def pool_shard(pool: CappedPool, call: bytes, dedupe_id: str | None) -> int:
    """The shard a pooled call goes to, with probability proportional to its capacity."""
    if pool.coalesce:
        point = stable_hash(call) % pool.capacity
    elif dedupe_id:
        point = stable_hash(dedupe_id.encode()) % pool.capacity
    else:
        point = random.randrange(pool.capacity)
    # Capacities as even as they divide: the first ``rest`` shards hold one entry more.
    n = len(pool.shards or ())  # only sharded pools route
    big, rest = pool.capacity // n + 1, pool.capacity % n
    shard = point // big if point < rest * big else rest + (point - rest * big) // (big - 1)
    return int(shard)


def split_capacity(pool: CappedPool, shard: CappedPool, index: int) -> None:
    """Shard ``index``'s capacity: the logical one split as evenly as it divides."""
    n = len(pool.shards or ())  # only sharded pools split
    shard.capacity = pool.capacity // n + (1 if index < pool.capacity % n else 0)


def _on_batch(
    method: Callable[..., object], self: Split, batch: PoolBatch, *args: object, **kw: object
) -> object:
    i, inner = split_id(batch.id, len(self.shards))  # the shard its id names
    own = dataclasses.replace(batch, id=inner)
    held = method(self.shards[i], own, *args, **kw)
    batch.drain_needed = own.drain_needed  # what ack tells the batch, the caller's batch tells
    return held


#: Run on the shard a batch came from, the batch under its id there (`ack`).
on_batch = _routing("on_owner", _on_batch)


def batch_has_work(batch: PoolBatch) -> bool:
    return bool(batch) or batch.pop_again


def merge_pop(
    pool: Split, i: int | None, batch: PoolBatch | None, empties: list[tuple[int, PoolBatch]]
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
    first = None if result.lingering else earliest(empties)
    release_claims(pool, empties, keep=None if first is None else first[0])
    if first is not None:
        result.wait, result.schedule = first[1].wait, first[1].schedule
    return result


#: The keys every pool script receives, in this order (see lua/pool_keys.lua).
# fmt: off
PARTS = (
    # pool_add receives only the parts its header names (fewer keys on the hot path); the
    # other scripts receive them all.
    "items", "counts", "stats", "drains", "receives", "ages", "arrivals", "flow", "scheduled",
    "dedupe", "wake", "signal", "listening", "inflight", "inflight_calls", "inflight_items",
    "dead", "done", "calls", "calls_at", "debounce",
)
# fmt: on

#: Calls per script invocation in add_many: keeps every script call short (O(chunk)).
ADD_CHUNK = 1000


#: What became of an offered call (lua/pool_status.lua names the same values).
_REFUSED, _KEPT, _KEPT_EVICTED, _MERGED, _DUPLICATE, _DELAYED = 0, 1, 2, 3, 4, 5


def held_batch(pool: CappedPool, kwargs: dict[str, object]) -> tuple[int, str] | None:
    """The shard holding in flight the batch a pop names (``batch_id``, as the caller chose it
    or as this pool answered it, ``<shard>:<id>``) and its id there: a pop sent again after a
    lost reply replays it there, never pops a second batch from another shard."""
    batch_id = kwargs.get("batch_id")
    shards = pool.shards or []  # only sharded pools hold batches in their shards
    if not isinstance(batch_id, str) or not batch_id:
        return None
    index, sep, inner = batch_id.partition(":")
    if sep and index.isdigit() and int(index) < len(shards):
        candidates = [(int(index), inner)]
    else:
        candidates = [(i, batch_id) for i in range(len(shards))]
    for i, own in candidates:
        if pool.client.hexists(shards[i].keys("inflight_calls"), own):
            return i, own
    return None


class CappedPool(Sharded):
    """A capped Redis pool; see the module docstring for policies and accounting."""

    kind = "pool"
    figure_names = ("depth", ("offered",), ("rejected", "evicted", "lost"))
    parts = PARTS
    dead_script = "pool_dead"
    unstored_counters = ("offered", "accepted", "dead")
    store_chunk = ADD_CHUNK

    def __init__(
        self,
        client: Client,
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
        debounce: float = 0.0,
        debounce_max_wait: float = 0.0,
        register: bool = True,
        shards: int = 1,
    ) -> None:
        validate_pool_options(capacity=capacity, policy=policy, max_drains=max_drains)
        seconds("drain_lease", drain_lease, positive=True)
        seconds("visibility_timeout", visibility_timeout, positive=True)
        one_of("delivery", delivery, DELIVERIES)
        positive_int("max_receives", max_receives)
        seconds("dedupe_window", dedupe_window)
        seconds("processed_guard", processed_guard)
        seconds("debounce", debounce)
        seconds("debounce_max_wait", debounce_max_wait)
        if debounce_max_wait and not debounce:
            raise ConfigurationError("debounce_max_wait needs debounce (seconds)")
        if coalesce and processed_guard:
            raise ConfigurationError(
                "processed_guard is not available on coalescing pools: equal calls merge "
                "into one entry, so an entry has no identity of its own to remember"
            )
        self._setup(client, name, prefix, serializer, register)
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
        self.debounce_ms = int(debounce * 1000)
        self.debounce_max_wait_ms = int(debounce_max_wait * 1000)
        # With shards > 1, each holds its share of the capacity.
        self._build_shards(shards, split_capacity, capacity)

    #: A sharded pool has no one oldest call to count a gathering wait from.

    def __repr__(self) -> str:
        return f"<CappedPool {self.keys.base} capacity={self.capacity} policy={self.policy}>"

    # Producing

    def _script_head(self) -> list[KeyOrArg]:
        return [self.capacity, self.policy, int(self.coalesce), self.drain_lease_ms]

    @sharding.unsharded
    def gather(self, min_calls: int, wait: float, *, check_every: float | None = None) -> Gather:
        """Pop now, or how long to let calls gather (see Gathering above).

        ``check_every`` (default: a quarter of ``wait``) bounds how long before the drain looks
        again, so a batch that reaches ``min_calls`` early does not wait out the whole ``wait``.
        """
        wait_ms = int(wait * 1000)
        if wait_ms <= 0:
            return Gather()
        check_ms = max(int((check_every if check_every is not None else wait / 4) * 1000), 1)
        reply = self._run("pool_gather", [min_calls, wait_ms, check_ms])
        return Gather(int(reply[0]) / 1000.0, bool(reply[1]))

    @sharding.recorded
    def settings(self) -> dict[str, object]:
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
            "debounce": self.debounce_ms / 1000,
            "debounce_max_wait": self.debounce_max_wait_ms / 1000,
        }

    @sharding.spread(pool_shard)
    def store_encoded(
        self,
        encoded: Sequence[bytes],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        delay_ms = int(seconds("delay", delay) * 1000) if delay else 0
        if self.debounce_ms and dedupe_ids is not None and any(dedupe_ids):
            if delay_ms:
                raise ConfigurationError("a debounced call takes no delay: it waits its window")
            return [
                self._debounce(data, key) if key else self.store_encoded([data], delay=0)[0]
                for data, key in zip(encoded, dedupe_ids, strict=True)
            ]
        if (delay_ms == 0 and not self.name_evicted) and (
            dedupe_ids is None or not self.dedupe_window_ms or not any(dedupe_ids)
        ):
            return self._add_plain(encoded)
        args: list[KeyOrArg] = [self.dedupe_window_ms]
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

    def _debounce(self, data: bytes, key: str) -> Receipt:
        """Hold one call under its dedupe id (lua/pool_debounce.lua): the latest payload wins,
        due ``debounce`` after the last call (at most ``debounce_max_wait`` after the first)."""
        args: list[KeyOrArg] = [self.debounce_ms, self.debounce_max_wait_ms, uuid.uuid4().hex]
        reply = self._run("pool_debounce", [*args, repr(random.random()), data, key])
        send, wake_ms, status = reply[0] == 1, int(reply[1]), int(reply[2])
        return _add_result(status, send, wake_ms / 1000.0 if wake_ms >= 0 else None)

    def add(self, payload: object, *, delay: float = 0.0, dedupe_id: str | None = None) -> Receipt:
        """Offer one call's payload; one round trip. Raises SerializationError, storing nothing.

        ``delay`` holds the call in the delayed set for that many seconds before it is offered;
        ``dedupe_id`` refuses the call if the same id was seen within ``dedupe_window``.
        """
        return self.store_encoded([self.encode(payload)], delay=delay, dedupe_ids=[dedupe_id])[0]

    def add_many(self, payloads: Iterable[object], *, delay: float = 0.0) -> list[Receipt]:
        """Offer many payloads, one round trip per ``ADD_CHUNK`` of them.

        Every payload is serialized before anything is stored, so one bad payload stores none.
        At most one result has ``drain_needed`` set.
        """
        encoded = [self.encode(p) for p in payloads]
        return in_chunks(lambda chunk: self.store_encoded(chunk, delay=delay), encoded, ADD_CHUNK)

    def _add_plain(self, encoded: Sequence[bytes]) -> list[Receipt]:
        """Calls with no dedupe id and no delay (a single .delay(), add_many, a buffer's
        flush): pool_add's lean case, two arguments per call, sent as one script call."""
        score = random.random
        if len(encoded) == 1:
            reply = self._run("pool_add", ["plain", repr(score()), encoded[0]])
        else:
            tail: list[KeyOrArg] = ["plain"]
            for data in encoded:
                tail += (repr(score()), data)
            reply = self._run("pool_add", tail)
        statuses = reply[2:]
        results = [_QUIET_RESULTS[status] for status in statuses]
        if reply[0] == 1:
            # Only the first result carries the drain the call asked for.
            results[0] = _add_result(statuses[0], True)
        return results

    # Consuming

    # From the next shard with work; a batch's id names its shard (ack, the heartbeat).
    @sharding.swept(batch_has_work, merge_pop, held_batch)
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
        drain flag was cleared in the same step, so nothing that arrives afterwards is
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
        args: list[KeyOrArg] = [
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
            if reply[0] == AGAIN:
                # Skipped entries only, or (a re-sent pop) the batch is in flight already:
                # pool_pop replays it, or pops on (no UPKEEP: pool_due ran or was not due).
                args[-1] = 0
                reply = self._run("pool_pop", args)
                if reply[0] == MIXED:
                    reply = self._run("pool_pop_mixed", args)
        reply[5] = int(reply[5]) + malformed
        return read_pop(reply, batch_id, self.serializer.loads, self.coalesce, self.keys.base)

    @on_batch
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
        args: list[KeyOrArg] = [
            batch.id,
            int(self.at_least_once),
            self.max_receives,
            self.processed_guard_ms,
            repr(float(seconds)),
            *ack_args(batch, failures or {}, guard, retry_in, dead, again),
        ]
        held, send_drain, *back = self._run("pool_ack", args)
        if back and back[0]:
            # Calls retried now wait in the batch: a second step puts them back.
            send_drain = self._run("pool_ack_back", [batch.id])[1] or send_drain
        batch.drain_needed = bool(send_drain)
        return bool(held)

    @sharding.on_owners
    def renew(self, batch_ids: Sequence[str]) -> list[str]:
        """Push the deadline of batches still in flight to now + ``visibility_timeout`` and renew
        the drain flag, in one round trip (the worker's heartbeat). Returns the ids that were
        no longer in flight: the reaper had taken them back."""
        name, _, args = self.renew_call(batch_ids)
        reply = self._run(name, args)
        return decode_ids(reply)

    def renew_call(self, batch_ids: Sequence[str]) -> tuple[str, list[str], list[KeyOrArg]]:
        """The script, keys and arguments of `renew()` (a heartbeat pipelines them)."""
        return "pool_renew", self._keys, [self.visibility_timeout_ms, *batch_ids]

    def heartbeat_interval(self) -> float:
        """Seconds between renewals while a worker holds batches or the drain flag: a third
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
            drains=pending,
        )

    def debounced(self, limit: int = 100) -> list[DebouncedKey]:
        """The dedupe ids holding a debounced call, the soonest due first (at most ``limit``;
        read-only and bounded: see `debounce.debounced`)."""
        return debounce.debounced(self, _DEBOUNCED, limit)

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
