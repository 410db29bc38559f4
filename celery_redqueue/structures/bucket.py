"""LeakyBucket: per-key FIFO queues released no faster than each key's rate, fairly.

Many producers enqueue work for many keys (a domain, a customer, an API account); consumers
dequeue from whichever key has been eligible longest. Each key has a rate (``"10/s"``) stored in
Redis and seen by every process, and an optional burst allowance. A key's next release time
follows GCRA: it advances by one interval from the key's own theoretical schedule, so any number
of consumers together never start more than ``rate * t + burst`` items of one key in any window
of length ``t``. With a burst allowance of at least 1 a backlogged key runs at its full rate
even when consumers come late (they catch up within the allowance); with burst 0 the rate is
exact and a late consumer's lost time is not made up. All time is the Redis server's.

A dequeued item is *reserved* until committed. If its consumer dies, the reaper puts it back at
the head of its key's queue once the reservation times out; past ``max_receives`` receives it goes
to the dead-letter list instead. A worker renews what it holds (`LeakyBucket.renew()`) while
the body runs, so the timeout bounds recovery after a crash, not the length of a body. The
drain flag is held on a short lease (``drain_lease``) that a running drain renews. An item that
cannot be parsed or decoded is dead-lettered with the reason; the rest carries on.
``shards=N`` spreads the keys over N hash tags (cluster nodes): see `sharding`.

Layout (all under one hash tag): per-key FIFOs live in one hash (``key NUL position``) with head
and tail positions per key, so every script touches only the fixed keys it is given and works on
Redis Cluster, and every operation is O(log K) in the number of keys.

Example:

    bucket = LeakyBucket(redis.Redis(), "crawl", default_rate="2/s")
    bucket.set_rate("example.com", "10/s")
    bucket.enqueue("example.com", {"url": "https://example.com/"})
    reservation = bucket.dequeue()
    if reservation:
        fetch(reservation.payload["url"])
        bucket.commit(reservation)
"""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, InvalidArgumentError
from ..redis.client import redis_errors, server_time
from ..redis.keys import DEFAULT_PREFIX
from ..redis.lua import EMPTY, LATER, UPKEEP, KeyOrArg, read_atomic
from ..redis.serializers import Serializer
from ..validation import seconds
from . import debounce, sharding
from .base import DRAIN_LEASE, decode_ids
from .bucket_types import (
    _MINUTE_FIELDS,
    _QUIET_RESULTS,
    OVERFLOWS,
    BucketStats,
    Dequeued,
    EncodedCall,
    KeyLoad,
    KeyStats,
    LimitOptions,
    Limits,
    Reservation,
    _check_burst,
    _check_key,
    _cost_arg,
    _enqueue_result,
    _last_minute,
    _tier_arg,
    check_priority,
    parse_rate,
    rate_budget,
    spaced_interval,
    tier_queues,
    validate_bucket_options,
)
from .deadletters import split_debounced
from .debounce import DebouncedKey
from .figures import parse_counters, unfold
from .protocols import in_chunks
from .receipts import ReapResult, Receipt
from .sharded import Sharded
from .wake import listen_ms, listener_id

__all__ = [
    "ENQUEUE_CHUNK",
    "OVERFLOWS",
    "BucketStats",
    "Dequeued",
    "KeyLoad",
    "KeyStats",
    "LeakyBucket",
    "Limits",
    "ReapResult",
    "Receipt",
    "Reservation",
    "parse_rate",
    "validate_bucket_options",
]

#: The keys every bucket script receives, in this order (lua/bucket_keys.lua names them).
# fmt: off
PARTS = (
    "ready", "tat", "rates", "items", "heads", "tails", "inflight", "res_keys", "res_items",
    "stats", "keystats", "dead", "drains", "wake", "ages", "scheduled", "dedupe", "done",
    "flow", "paused", "releases", "releases_prev", "calls",
    "calls_at", "signal", "listening", "debounce", "urgent",
)

if TYPE_CHECKING:
    from ..redis.client import Client
# fmt: on
#: A held debounced member of ``scheduled``: "id[/cost] key NUL NUL debounced:<count>:<hex
#: dedupe id> NUL payload" (lua/bucket_debounce.lua).
_DEBOUNCED = re.compile(rb"\A[^ ]* [^\0]*\0\0debounced:(\d+):([0-9a-f]*)\0")
#: Items one enqueue_many round trip carries.
ENQUEUE_CHUNK = 1000
#: Undecodable items one poll dead-letters before it gives up for this call.
MAX_UNDECODABLE_PER_POLL = 100

logger = logging.getLogger(__name__)


#: Seconds ahead of its slot a drain may reserve a key (``dequeue(ahead=True)``): more than a
#: wake-up's round trip, and short, because a drain waiting out the lead in the worker is not
#: woken for another key meanwhile (as if it ran a body that long).
AHEAD = 0.02


class LeakyBucket(Sharded):
    """A per-key leaky bucket; see the module docstring."""

    kind = "bucket"
    figure_names = (
        "depth",
        ("enqueued", "rejected", "duplicates"),
        ("rejected", "evicted", "duplicates"),
    )
    parts = PARTS
    dead_script = "bucket_dead"
    unstored_counters = ("enqueued", "dead")
    keyed_letters = True
    store_chunk = ENQUEUE_CHUNK
    #: Called when an action here (resume, set_concurrency) needs a drain job; the task glue
    #: sets it.
    drain_sender: Callable[[], object] | None = None

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        default_rate: str | float = "1/s",
        default_burst: float = 0,
        ordered: bool = False,
        visibility_timeout: float = 60.0,
        max_receives: int = 5,
        max_depth: int | None = None,
        overflow: str = "reject",
        prefix: str = DEFAULT_PREFIX,
        serializer: str | Serializer | None = None,
        drain_lease: float = DRAIN_LEASE,
        max_drains: int = 1,
        dedupe_window: float = 0.0,
        processed_guard: float = 0.0,
        register: bool = True,
        concurrency: int | None = None,
        cost_rate: str | float | None = None,
        cost_burst: float = 0,
        total_rate: str | float | None = None,
        total_burst: float = 0,
        margin: float = 0.0,
        debounce: float = 0.0,
        debounce_max_wait: float = 0.0,
        priority_bound: float | None = None,
        shards: int = 1,
    ) -> None:
        seconds("drain_lease", drain_lease, positive=True)
        seconds("dedupe_window", dedupe_window)
        seconds("debounce", debounce)
        seconds("debounce_max_wait", debounce_max_wait)
        if debounce_max_wait and not debounce:
            raise ConfigurationError("debounce_max_wait needs debounce (seconds)")
        seconds("processed_guard", processed_guard)
        validate_bucket_options(
            rate=default_rate,
            burst=default_burst,
            visibility_timeout=visibility_timeout,
            max_receives=max_receives,
            max_depth=max_depth,
            overflow=overflow,
            max_drains=max_drains,
        )
        # Concurrency, costs and the total rate (Limits, bucket_types.py); each shard meters
        # its share of the total in its own scripts, so a release costs no extra round trip.
        limit_options: LimitOptions = {
            "concurrency": concurrency,
            "cost_rate": cost_rate,
            "cost_burst": cost_burst,
            "total_rate": total_rate,
            "total_burst": total_burst,
            "margin": margin,
            "priority_bound": priority_bound,
        }
        self.limits = Limits.build(ordered=ordered, **limit_options).share(shards)
        self._limit_options = limit_options  # for settings()
        self._setup(client, name, prefix, serializer, register)
        self._default_rate = 1000.0 / parse_rate(default_rate)  # per second, for settings()
        self.default_interval_ms = spaced_interval(default_rate, self.limits.margin)
        self.default_burst = float(default_burst)
        self.ordered = self.limits.concurrency == 1
        self.visibility_timeout_ms = int(visibility_timeout * 1000)
        self.max_receives = max_receives
        self.max_depth = max_depth or 0
        self.overflow = overflow
        self.drain_lease_ms = max(int(drain_lease * 1000), 1)
        self.max_drains = max_drains
        self.dedupe_window_ms = int(dedupe_window * 1000)
        self.processed_guard_ms = int(processed_guard * 1000)
        self.debounce_ms = int(debounce * 1000)
        self.debounce_max_wait_ms = int(debounce_max_wait * 1000)
        self._build_shards(shards, None)

    @sharding.recorded
    def settings(self) -> dict[str, object]:
        """What another process needs to open this bucket (the registry keeps it)."""
        return {
            "default_rate": self._default_rate,
            "default_burst": self.default_burst,
            "ordered": self.ordered,
            "visibility_timeout": self.visibility_timeout_ms / 1000,
            "max_receives": self.max_receives,
            "max_depth": self.max_depth or None,
            "overflow": self.overflow,
            "max_drains": self.max_drains,
            "drain_lease": self.drain_lease_ms / 1000,
            "debounce": self.debounce_ms / 1000,
            "debounce_max_wait": self.debounce_max_wait_ms / 1000,
            **self._limit_options,
        }

    def __repr__(self) -> str:
        return f"<LeakyBucket {self.keys.base} ordered={self.ordered}>"

    def _script_head(self) -> list[KeyOrArg]:
        return [
            repr(self.default_interval_ms),
            repr(self.default_burst),
            self.limits.spec(),
            self.max_depth,
            self.overflow,
            self.drain_lease_ms,
            self.max_receives,
        ]

    # Rates

    @sharding.on_key
    def set_rate(self, key: str, rate: str | float, burst: float | None = None) -> None:
        """Set a key's rate (and burst) for every process; takes effect at its next release."""
        interval = spaced_interval(rate, self.limits.margin)
        burst = self.default_burst if burst is None else burst
        _check_burst(burst)
        with redis_errors("setting a rate"):
            self.client.hset(self.keys("rates"), _check_key(key), f"{interval!r} {float(burst)!r}")

    @sharding.on_key
    def clear_rate(self, key: str) -> None:
        """Make a key use the default rate again."""
        with redis_errors("clearing a rate"):
            self.client.hdel(self.keys("rates"), _check_key(key))

    # Producing

    # Producing

    def encoded_call(
        self, key: str, payload: object, cost: float | None = None, priority: int | None = None
    ) -> EncodedCall:
        """A call checked and encoded for ``store_encoded``: ``(key, data)``, ``(key, data,
        cost)`` on a bucket with a cost rate, ``(key, data, cost, tier)`` with a priority
        (InvalidArgumentError for a cost no period can allow, a cost on a bucket without a cost
        rate, a priority outside 0-9 or on a bucket without priority tiers)."""
        if cost is not None and not self.limits.cost_interval_ms:
            raise InvalidArgumentError("a call's cost needs a bucket with a cost_rate")
        checked = None if cost is None else self.limits.check_cost(cost)
        if priority is not None:
            if not self.limits.priority_bound_ms:
                raise InvalidArgumentError(
                    "a call's priority needs a bucket with priority tiers (priority_bound, "
                    "bucket_priority_bound on a task)"
                )
            return (_check_key(key), self.encode(payload), checked, check_priority(priority))
        if checked is None:
            return (_check_key(key), self.encode(payload))
        return (_check_key(key), self.encode(payload), checked)

    def enqueue(
        self,
        key: str,
        payload: object,
        *,
        delay: float = 0.0,
        dedupe_id: str | None = None,
        cost: float | None = None,
        priority: int | None = None,
    ) -> Receipt:
        """Append ``payload`` to ``key``'s queue; one round trip.

        ``delay`` holds the item for that many seconds before it joins its key's queue (its
        reservation clock starts only when it is released); ``dedupe_id`` refuses the item if
        the same id was seen within ``dedupe_window``; ``cost``: its units, on a bucket with a
        ``cost_rate`` (1 when not given); ``priority``: its tier, 0-9, higher first, on a
        bucket with ``priority_bound`` (0 when not given).
        """
        encoded = [self.encoded_call(key, payload, cost, priority)]
        return self.store_encoded(encoded, delay=delay, dedupe_ids=[dedupe_id])[0]

    def enqueue_many(
        self, items: Iterable[tuple[str, object] | tuple[str, object, float]], *, delay: float = 0.0
    ) -> list[Receipt]:
        """Append many ``(key, payload)`` pairs (or ``(key, payload, cost)``); every one is
        checked before any is stored."""
        encoded = [self.encoded_call(*item) for item in items]
        store = self.store_encoded
        return in_chunks(lambda chunk: store(chunk, delay=delay), encoded, self.store_chunk)

    @sharding.spread(sharding.call_shard)
    def store_encoded(
        self,
        encoded: Sequence[EncodedCall],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        delay_ms = int(seconds("delay", delay) * 1000)
        if self.debounce_ms and dedupe_ids is not None and any(dedupe_ids):
            if delay_ms:
                raise ConfigurationError("a debounced call takes no delay: it waits its window")
            return [
                self._debounce(call, dedupe_id) if dedupe_id else self.store_encoded([call])[0]
                for call, dedupe_id in zip(encoded, dedupe_ids, strict=True)
            ]
        # One item, no dedupe id, no delay: the plain call, its fewer arguments (bucket_enqueue).
        if (
            len(encoded) == 1
            and delay_ms == 0
            and (dedupe_ids is None or not dedupe_ids[0] or not self.dedupe_window_ms)
            and len(encoded[0]) < 4  # a priority tier takes the general form
        ):
            return [self._enqueue_plain(encoded[0])]
        args: list[KeyOrArg] = [self.dedupe_window_ms]
        ids = dedupe_ids if dedupe_ids is not None else [None] * len(encoded)
        for call, dedupe_id in zip(encoded, ids, strict=True):
            args += (call[0], call[1], dedupe_id or "", delay_ms, _cost_arg(call), _tier_arg(call))
        reply = self._run("bucket_enqueue", args)
        send, wake_ms = reply[0] == 1, int(reply[1])
        statuses = reply[2:]
        results = [_QUIET_RESULTS[status] for status in statuses]
        if send or wake_ms >= 0:
            # Only the first result carries the drain the call asked for.
            results[0] = _enqueue_result(
                statuses[0], send, wake_ms / 1000.0 if wake_ms >= 0 else None
            )
        return results

    def _debounce(self, call: EncodedCall, dedupe_id: str) -> Receipt:
        """Hold one call under its dedupe id (lua/bucket_debounce.lua): the latest payload
        wins, due ``debounce`` after the last call (at most ``debounce_max_wait`` after the
        first); safe to re-send (its call id)."""
        args: list[KeyOrArg] = [
            self.debounce_ms,
            self.debounce_max_wait_ms,
            uuid.uuid4().hex,
            call[0],
            call[1],
        ]
        tail: list[KeyOrArg] = [dedupe_id, _cost_arg(call), _tier_arg(call)]
        send, wake_ms, status, _ = self._run("bucket_debounce", [*args, *tail])
        return _enqueue_result(int(status), send == 1, wake_ms / 1000.0 if wake_ms >= 0 else None)

    def _enqueue_plain(self, call: EncodedCall) -> Receipt:
        """One item, no dedupe id, no delay: the key, payload and cost only (bucket_enqueue
        stores it on its plain path, or as its general path's one item)."""
        args: list[KeyOrArg] = (
            [call[0], call[1], _cost_arg(call)] if len(call) > 2 else [call[0], call[1]]
        )
        send, wake_ms, status = self._run("bucket_enqueue", args)
        if send == 1 or wake_ms >= 0:
            return _enqueue_result(status, send == 1, wake_ms / 1000.0 if wake_ms >= 0 else None)
        return _QUIET_RESULTS[int(status)]

    # Consuming

    # Metered APIs: costs, weights, concurrency, pauses, noisy-neighbour figures

    @sharding.on_key
    def set_cost_rate(self, key: str, rate: str | float, burst: float | None = None) -> None:
        """Give a key a cost budget of its own (``"40000/m"``), seen by every process; the
        bucket needs a ``cost_rate`` of its own for costs to be metered at all."""
        if not self.limits.cost_interval_ms:
            raise ConfigurationError("set_cost_rate needs a bucket with a cost_rate")
        _, per_period = rate_budget(rate)
        interval = spaced_interval(rate, self.limits.margin)
        burst = self.limits.cost_burst if burst is None else burst
        _check_burst(burst)
        spec = f"{interval!r} {float(burst)!r} {per_period + float(burst)!r}"
        with redis_errors("setting a cost rate"):
            self.client.hset(self.keys("rates"), f"{_check_key(key)}\0cost", spec)

    @sharding.on_key
    def set_weight(self, key: str, weight: float | None) -> None:
        """Give ``key`` a share of releases under contention (a total rate, or fewer drain jobs
        than busy keys) in proportion to ``weight``: a number >= 1, where every other key has 1
        (None: 1 again). Deficit round robin: the key releases ``weight`` calls a turn where a
        key of weight 1 releases one, each still within its own limits; a fraction carries over
        to its next turn. Takes effect at its next release, for every process."""
        if weight is not None and (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not 1 <= weight < math.inf
        ):
            raise ConfigurationError(f"a weight is a finite number >= 1 (or None), got {weight!r}")
        key = _check_key(key)
        with redis_errors("setting a weight"):
            if weight is None:
                self.client.hdel(self.keys("rates"), f"{key}\0weight")
            else:
                self.client.hset(self.keys("rates"), f"{key}\0weight", repr(float(weight)))

    @sharding.on_key
    def set_concurrency(self, key: str, limit: int | None) -> bool:
        """Set how many calls of ``key`` may be in flight at once across all workers, at runtime
        (None: the bucket's own ``concurrency`` again), as BullMQ Pro's setGroupConcurrency.
        Raised, the key's waiting calls may go at once (a drain job is sent through
        `drain_sender`); lowered, calls in flight finish and the key releases none until it is
        under the limit. Returns whether the limit changed."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ConfigurationError(f"a concurrency is an integer >= 1 (or None), got {limit!r}")
        if self.limits.concurrency == 1 and self.ordered:
            raise ConfigurationError(
                "set_concurrency on an ordered bucket: its keys release one call at a time to "
                "keep their order"
            )
        drains = self.max_drains
        if limit is not None and limit > drains:
            raise ConfigurationError(
                f"set_concurrency({key!r}, {limit}): the bucket runs at most {drains} drain "
                f"jobs at once (bucket_drain_concurrency), each one body at a time, so the key "
                f"could never have {limit} in flight; raise bucket_drain_concurrency first"
            )
        args = [_check_key(key), "" if limit is None else str(limit)]
        changed, send = self._run("bucket_set_concurrency", args)
        if send and self.drain_sender is not None:
            self.drain_sender()
        return bool(changed)

    @sharding.on_key
    def pause(self, key: str, seconds: float | None = None) -> bool:
        """Release nothing of ``key`` for ``seconds`` (None: until `resume()`), in every
        process; the key keeps accepting calls. A pause never shortens a longer one. Returns
        whether the pause changed."""
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0
        ):
            raise ConfigurationError(f"a pause lasts > 0 seconds (or None), got {seconds!r}")
        ms = "" if seconds is None else repr(float(seconds) * 1000.0)
        changed, _ = self._run("bucket_pause", ["pause", _check_key(key), ms])
        return bool(changed)

    @sharding.on_key
    def resume(self, key: str) -> bool:
        """End a key's pause (by hand or a backoff); False when it was not paused. Sends a drain
        job through `drain_sender` when the key has work and none is running."""
        changed, send = self._run("bucket_pause", ["resume", _check_key(key), ""])
        if send and self.drain_sender is not None:
            self.drain_sender()
        return bool(changed)

    def debounced(self, limit: int = 100) -> list[DebouncedKey]:
        """The dedupe ids holding a debounced call (``debounce``), the soonest due first (at
        most ``limit``; read-only and bounded: see `debounce.debounced`)."""
        return debounce.debounced(self, _DEBOUNCED, limit)

    @sharding.ranked(lambda row: (row[1], row[0]))
    def paused(self, limit: int = 100) -> list[tuple[str, float]]:
        """Keys paused now and until when (server seconds; ``inf``: until resumed), soonest
        first, at most ``limit``."""
        now = self._server_now()
        with redis_errors(f"reading pauses of {self.keys.base}"):
            rows = self.client.zrangebyscore(
                self.keys("paused"), now * 1000.0, "+inf", start=0, num=limit, withscores=True
            )
        return [(name.decode(), float(score) / 1000.0) for name, score in rows]

    @sharding.on_every(sum)
    def paused_count(self) -> int:
        """How many keys are paused now (one number for metrics, whatever the keys)."""
        now = self._server_now()
        with redis_errors(f"reading pauses of {self.keys.base}"):
            return int(self.client.zcount(self.keys("paused"), now * 1000.0, "+inf"))

    @sharding.ranked(lambda row: (-row.releases, row.key))  # a share is of its shard's releases
    def busiest(self, top: int = 10) -> list[KeyLoad]:
        """The keys with the most releases over about the last minute (this minute's count and
        the previous minute's, weighted by how much of it is still inside the last 60 s)."""
        now = self._server_now()
        with redis_errors(f"reading releases of {self.keys.base}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zrevrange(self.keys("releases"), 0, top - 1, withscores=True)
            pipe.zrevrange(self.keys("releases_prev"), 0, top - 1, withscores=True)
            pipe.hmget(self.keys("stats"), _MINUTE_FIELDS)
            current, previous, totals = pipe.execute()
        loads = _last_minute(
            now,
            [(n.decode(), float(v)) for n, v in current],
            [(n.decode(), float(v)) for n, v in previous],
            totals,
        )
        rows = sorted(loads.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
        return [KeyLoad(k, n, share) for k, (n, share) in rows]

    @sharding.on_key
    def key_stats(self, key: str) -> KeyStats:
        """One key's figures in one read-only script (consistent, and works at maxmemory): its
        queue, rate and in-flight calls, its pause and backoffs, its cost budget, its oldest
        waiting call and its share of the last minute's releases."""
        _check_key(key)
        now = self._server_now()
        fields = [f"{key}\0{c}" for c in ("in_flight", "processed", "dead", "backoffs")]
        queues = tier_queues(key, bool(self.limits.priority_bound_ms))
        with redis_errors(f"reading stats of {self.keys.base}"):
            heads, tails, counters, ready, rates, paused, age, cur, prev, totals = read_atomic(
                self.client,
                [
                    ("HMGET", self.keys("heads"), queues),
                    ("HMGET", self.keys("tails"), queues),
                    ("HMGET", self.keys("keystats"), fields),
                    ("ZSCORE", self.keys("ready"), (key,)),
                    ("HMGET", self.keys("rates"), (key, f"{key}\0cost")),
                    ("ZSCORE", self.keys("paused"), (key,)),
                    ("ZSCORE", self.keys("ages"), (key,)),
                    ("ZSCORE", self.keys("releases"), (key,)),
                    ("ZSCORE", self.keys("releases_prev"), (key,)),
                    ("HMGET", self.keys("stats"), _MINUTE_FIELDS),
                ],
            )
        in_flight, processed, dead, backoffs = (int(c or 0) for c in counters)
        rate, cost_rate = rates
        if rate:
            interval_ms, burst = (float(x) for x in rate.split())
        else:
            interval_ms, burst = self.default_interval_ms, self.default_burst
        cost_interval, cost_burst = self.limits.cost_interval_ms, self.limits.cost_burst
        if cost_rate and cost_interval:
            cost_interval, cost_burst = (float(x) for x in cost_rate.split()[:2])
        till = None if paused is None else float(paused) / 1000.0
        releases, share = _last_minute(
            now, [(key, float(cur or 0))], [(key, float(prev or 0))], totals
        ).get(key, (0.0, 0.0))
        depth = sum(int(t or 0) for t in tails) - sum(int(h or 0) for h in heads)
        return KeyStats(
            key=key,
            depth=depth,
            in_flight=in_flight,
            processed=processed,
            dead=dead,
            next_eligible=None if ready is None else float(ready) / 1000.0,
            interval=interval_ms / 1000.0,
            burst=burst,
            paused_until=till if till is not None and till > now else None,
            backoffs=backoffs,
            oldest_age=round(now - float(age) / 1000.0, 3) if age and depth > 0 else None,
            releases_last_minute=releases,
            release_share=share,
            cost_interval=cost_interval or None,
            cost_burst=cost_burst,
        )

    @sharding.ranked(lambda row: (-(row.oldest_age or 0), row.key))
    def longest_waiting(self, top: int = 10) -> list[KeyLoad]:
        """The keys whose oldest waiting call has waited longest (the ages index: bounded)."""
        now = self._server_now()
        with redis_errors(f"reading ages of {self.keys.base}"):
            rows = self.client.zrange(self.keys("ages"), 0, top - 1, withscores=True)
        return [KeyLoad(n.decode(), 0.0, 0.0, round(now - s / 1000.0, 3)) for n, s in rows]

    def _server_now(self) -> float:
        """The Redis server's clock (seconds): every figure is measured against it."""
        with redis_errors("reading the server clock"):
            return server_time(self.client)

    @sharding.swept(sharding.has_reservation, sharding.merge_dequeue)
    def dequeue(
        self,
        *,
        listen: float = 0.0,
        listener: str | None = None,
        linger: bool = False,
        ahead: bool = False,
    ) -> Dequeued:
        """Reserve the head item of the key eligible longest, or say how long until one is.
        ``listen`` (s): a poll that releases nothing lists ``listener`` (default: this thread)
        on the wake signal that long when something is due within it (or, with ``linger``, when
        nothing is), else takes it off; see `listen` and `wake`.

        ``ahead``: a key due within `AHEAD` (and ``listen``) is reserved at once, released at
        its slot (its schedules advance from the slot, as if a poll had come exactly then), and
        this call sleeps until the slot before returning it; a later one's wait is told
        `AHEAD` short, so a caller that waits it out polls again within reach. Without, the
        caller waits for the key and polls again, and the wake-up's delay is lost to a key
        with no burst.

        An item whose payload cannot be decoded is dead-lettered at once with the reason
        ("undecodable payload: ..."), logged and counted, and the poll carries on with the next.
        """
        malformed = 0
        for _ in range(MAX_UNDECODABLE_PER_POLL):
            # The poll id: a re-send of this call (its reply lost) gets the same reservation.
            reply = self._run(
                "bucket_dequeue",
                [
                    self.visibility_timeout_ms,
                    self.max_drains,
                    int(self.processed_guard_ms > 0),
                    uuid.uuid4().hex,
                    listen_ms(listen),
                    listener or listener_id(),
                    int(linger),
                    int(min(listen, AHEAD) * 1000) if ahead else 0,
                ],
            )
            if reply[0] == UPKEEP:  # due delayed items, a head to skip or bury, a new minute
                head = [reply[1], int(self.processed_guard_ms > 0)] if len(reply) > 1 else []
                malformed += int(self._run("bucket_upkeep", head))
                continue
            if reply[0] == EMPTY:
                return Dequeued(malformed=malformed)
            if reply[0] == LATER:
                wait = float(reply[1]) / 1000.0
                return Dequeued(wait=wait, schedule=bool(reply[2]), malformed=malformed)
            res_id, (count, payload) = reply[2], split_debounced(reply[3])
            try:
                decoded = self.serializer.loads(payload)
            except Exception as exc:
                reason = f"undecodable payload: {type(exc).__name__}: {exc}"
                logger.warning(
                    "%s: item %s dead-lettered: %s", self.keys.base, res_id.decode(), reason
                )
                self.dead_letter(res_id.decode(), reason)
                malformed += 1
                continue
            reservation = Reservation.from_reply(reply[1:9], decoded, self.keys.base, count)
            lead = float(reply[9]) / 1000.0
            if lead > 0:  # released ahead, at its slot: the body may start then, not sooner
                time.sleep(lead)
            return Dequeued(reservation, malformed=malformed)
        return Dequeued(wait=0.0, malformed=malformed)

    def _settle(
        self,
        reservation: Reservation | str,
        action: str,
        detail: str | int,
        seconds: float = 0.0,
        cost: float | None = None,
    ) -> bool:
        res_id = Reservation.id_of(reservation, self.keys.base)
        actual = (
            ""
            if cost is None
            else repr(self.limits.check_cost(cost, "reported cost", reported=True))
        )
        args = [res_id, action, detail, self.processed_guard_ms, repr(float(seconds)), actual]
        held, _send_drain = self._run("bucket_settle", args)
        return bool(held)

    @sharding.on_reservation
    def commit(
        self, reservation: Reservation | str, *, seconds: float = 0.0, cost: float | None = None
    ) -> bool:
        """Finish an item. False when it is no longer held (the reaper took it back); with the
        processed-guard on, its id is recorded either way, so a returned copy is skipped. True
        when it was settled already by this reservation (a second commit within a minute, such
        as a re-send after a lost reply: "already done", not counted as late).
        ``seconds`` (the time the body took) feeds the workers-needed figure; ``cost``, the
        call's actual cost when known only now, corrects its key's budget."""
        return self._settle(reservation, "commit", "", seconds, cost)

    @sharding.on_reservation
    def backoff(
        self, reservation: Reservation | str, seconds: float, *, cost: float | None = None
    ) -> bool:
        """Put an item back at the head of its key and pause the key for ``seconds`` in every
        process (an upstream's 429 with Retry-After). Its receive is not counted, so backing
        off never dead-letters it; its charged cost is refunded unless ``cost`` says what the
        upstream counted. False when the reservation is no longer held."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise ConfigurationError(f"backoff lasts >= 0 seconds, got {seconds!r}")
        return self._settle(reservation, "backoff", int(seconds * 1000), cost=cost)

    @sharding.on_reservation
    def retry_later(self, reservation: Reservation | str, delay: float = 0.0) -> bool:
        """Put an item back at the head of its key's queue; the key waits ``delay`` seconds.

        Returns False when the reservation is no longer held. Use it after an HTTP 429, or to
        retry later: the item keeps its place in its key's order.
        """
        return self._settle(reservation, "retry", int(seconds("retry_later delay", delay) * 1000))

    @sharding.on_reservation
    def dead_letter(self, reservation: Reservation | str, error: str) -> bool:
        """Move a held item to the dead-letter list with the text of its last error."""
        return self._settle(reservation, "dead", str(error)[:4000])

    @sharding.on_owners
    def renew(self, reservation_ids: Sequence[str]) -> list[str]:
        """Push the deadline of reservations still held to now + ``visibility_timeout`` and
        renew the drain flag, in one round trip (the worker's heartbeat). Returns the ids that
        were no longer held: the reaper had taken them back."""
        name, _, args = self.renew_call(reservation_ids)
        reply = self._run(name, args)
        return decode_ids(reply)

    def renew_call(self, reservation_ids: Sequence[str]) -> tuple[str, list[str], list[KeyOrArg]]:
        """The script, keys and arguments of `renew()` (a heartbeat pipelines them)."""
        return "bucket_renew", self._keys, [self.visibility_timeout_ms, *reservation_ids]

    def heartbeat_interval(self) -> float:
        """Seconds between renewals while a worker holds reservations or the drain flag: a
        third of the shorter of the two, so two renewals can fail before anything expires."""
        return min(self.visibility_timeout_ms, self.drain_lease_ms) / 3000.0

    @sharding.on_every(sharding.sum_results(ReapResult), register=True)
    def reap(self, limit: int = 1000) -> ReapResult:
        """Return expired reservations to their keys (or dead-letter them past max_receives)."""
        returned, dead, send = self._run("bucket_reap", [limit])
        return ReapResult(returned=int(returned), dead_lettered=int(dead), drain_needed=bool(send))

    # Reading

    @sharding.on_every(sharding.sum_results(BucketStats))
    def stats(self) -> BucketStats:
        """One consistent snapshot of the counters (one read-only script: works at maxmemory)."""
        from ..redis.lua import pairs, read_atomic

        with redis_errors(f"reading stats of {self.keys.base}"):
            flat, ready = read_atomic(
                self.client,
                [("HGETALL", self.keys("stats"), ()), ("ZCARD", self.keys("ready"), ())],
            )
        counters = unfold(parse_counters(self.keys("stats"), pairs(flat)))
        fields = ("enqueued", "rejected", "evicted", "depth", "in_flight", "processed", "dead")
        extra: tuple[str, ...] = ("receives", "redelivered", "delayed", "duplicates", "purged")
        extra += ("requeued", "late", "backoffs", "retried", "debounced")
        return BucketStats(
            **{f: counters.get(f, 0) for f in fields + extra},
            keys_ready=int(ready),
            reaped=counters.get("reaped", 0),
            guard_skipped=counters.get("guard_skipped", 0),
        )
