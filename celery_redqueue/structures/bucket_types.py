"""What a LeakyBucket hands back (results, reservations, figures) and how its options are read
(rates, keys, limits for metered APIs, option checks shared with BucketTask). Values only: the
operations are all in `bucket`, which re-exports these."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from ..errors import ConfigurationError, InvalidArgumentError, ReservationError
from ..validation import one_of, positive_int, seconds
from .receipts import QueueCounters, Receipt


class LimitOptions(TypedDict):
    """The metered options as `LeakyBucket` and `Limits.build` take them, and as a bucket
    records them in its settings (`BucketTask` reads them with `tasks.metered.limit_options`)."""

    concurrency: int | None
    cost_rate: str | float | None
    cost_burst: float
    total_rate: str | float | None
    total_burst: float
    margin: float
    priority_bound: float | None


OVERFLOWS = ("reject", "drop_oldest")

#: A call ready for a bucket's scripts: ``(key, data)``, ``(key, data, cost)``, or
#: ``(key, data, cost or None, priority tier)`` (a bucket with priority tiers).
EncodedCall = tuple[str, bytes] | tuple[str, bytes, float] | tuple[str, bytes, float | None, int]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RESERVATION_ID = re.compile(r"^\d+\.\d+$")
_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:/\s*([smhd]))?\s*$")


def parse_rate(rate: str | float | int) -> float:
    """Return the interval in milliseconds of a Celery-style rate: ``"10/s"``, ``"100/m"``,
    ``"5/h"``, ``"0.5/s"``; a bare number is per second."""
    if isinstance(rate, bool):
        raise ConfigurationError(f"bad rate {rate!r}")
    if isinstance(rate, int | float):
        per_second = float(rate)
    else:
        match = _RATE.match(rate) if isinstance(rate, str) else None
        if not match:
            raise ConfigurationError(
                f"bad rate {rate!r}: use a number per unit like '10/s', '100/m', '5/h', '0.5/s'"
            )
        per_second = float(match.group(1)) / _UNITS[match.group(2) or "s"]
    # An infinite rate is an interval of 0 ms, and a rate so small that its interval overflows
    # is an infinite one: either stored makes every later release of the key fail.
    if not (per_second > 0 and math.isfinite(per_second) and math.isfinite(1000.0 / per_second)):
        raise ConfigurationError(f"bad rate {rate!r}: it must be a finite number greater than zero")
    return 1000.0 / per_second


def rate_period(rate: str | float | int) -> float:
    """Seconds of the window a rate is stated over: ``"10/s"`` 1, ``"100/m"`` 60; a bare number
    is per second. (The rate itself is checked by `parse_rate`.)"""
    match = _RATE.match(rate) if isinstance(rate, str) else None
    return _UNITS[match.group(2) or "s"] if match else 1.0


def spaced_interval(rate: str | float | int, margin: float) -> float:
    """The interval (ms) of ``rate`` spaced for a margin of ``margin`` seconds: the rate's count
    over its period plus the margin. Releases on that schedule arrive within the rate in every
    sliding window of its period at the upstream, however their delays on the way differ by up
    to the margin (with no burst): n arrivals in a window of period P left within P + margin."""
    period = rate_period(rate)
    return parse_rate(rate) * (period + margin) / period


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key or "\0" in key:
        raise ConfigurationError(f"bucket key must be a non-empty string without NUL, got {key!r}")
    return key


@dataclass(frozen=True)
class Reservation:
    """A released item, held for its consumer until commit, release or its deadline."""

    id: str
    key: str
    payload: object
    #: How many times this item has been handed out, this time included.
    receives: int
    #: Server time (seconds since the epoch) after which the reaper may take it back.
    deadline: float
    #: Server time (seconds) at which it was released.
    released_at: float
    #: The structure it belongs to; committing it on another bucket is an error.
    bucket: str = ""
    #: The bucket is busy: one more drain job should be sent to share the work.
    fan_out: bool = False
    #: The units it was charged (a bucket with a cost rate), None when it has no cost.
    cost: float | None = None
    #: The calls it stands for: a debounced call (``debounce``) counts the calls it replaced.
    count: int = 1

    @classmethod
    def from_reply(
        cls, fields: Sequence[Any], payload: object, bucket: str, count: int = 1
    ) -> Reservation:
        """From bucket_dequeue's fields key .. cost (the payload already decoded)."""
        # ``fields`` is a slice of the script's reply: bytes and integers by position.
        key, res_id, _, receives, deadline, now, fan_out, cost = fields
        return cls(
            id=res_id.decode(),
            key=key.decode(),
            payload=payload,
            receives=int(receives),
            deadline=float(deadline) / 1000.0,
            released_at=float(now) / 1000.0,
            bucket=bucket,
            fan_out=bool(fan_out),
            cost=float(cost) if cost else None,
            count=count,
        )

    @staticmethod
    def id_of(reservation: Reservation | str, bucket: str) -> str:
        """The id of a reservation of ``bucket`` (a Reservation or its id); ReservationError
        for anything else."""
        if isinstance(reservation, Reservation):
            if reservation.bucket and reservation.bucket != bucket:
                raise ReservationError(
                    f"reservation {reservation.id} belongs to {reservation.bucket}, not {bucket}"
                )
            return reservation.id
        if isinstance(reservation, str) and _RESERVATION_ID.match(reservation):
            return reservation
        raise ReservationError(f"not a reservation of this bucket: {reservation!r}")


@dataclass(frozen=True)
class Dequeued:
    """The answer of `LeakyBucket.poll()`: a reservation, or how long until one can go."""

    reservation: Reservation | None = None
    #: Seconds until the next key becomes eligible (items are queued); None when empty.
    wait: float | None = None
    #: With ``wait``: no drain job is scheduled for then yet; the caller should send one with
    #: that countdown (the poll released the drain flag, so items due now send their own).
    schedule: bool = False
    #: Items that could not be read or decoded, dead-lettered by this poll.
    malformed: int = 0

    @property
    def empty(self) -> bool:
        return self.reservation is None and self.wait is None


@dataclass(frozen=True, kw_only=True)
class BucketStats(QueueCounters):
    """Counters of the whole bucket, read in one MULTI/EXEC; the counters every queue kind
    keeps are `QueueCounters`'."""

    enqueued: int
    rejected: int
    evicted: int
    receives: int
    keys_ready: int
    requeued: int
    reaped: int
    #: Calls a body put back with KeyBackoff (their key paused; no receive counted).
    backoffs: int
    #: Calls that replaced a held debounced call of their dedupe id (``debounce``).
    debounced: int = 0


@dataclass(frozen=True)
class KeyStats:
    key: str
    depth: int
    in_flight: int
    processed: int
    dead: int
    #: Server time (seconds) from which the key may release its next item; None if not queued.
    next_eligible: float | None
    #: Interval between releases (seconds) and burst allowance in force for the key.
    interval: float
    burst: float
    #: Server time (seconds) until which the key is paused (``inf``: until resumed); None: not.
    paused_until: float | None = None
    #: Times a body backed the key off (KeyBackoff), since the bucket began.
    backoffs: int = 0
    #: Seconds its oldest waiting call has waited; None when nothing waits.
    oldest_age: float | None = None
    #: Its releases over about the last minute, and their share of the bucket's (0..1).
    releases_last_minute: float = 0.0
    release_share: float = 0.0
    #: Milliseconds per unit of cost and the unit burst in force (None: calls have no cost).
    cost_interval: float | None = None
    cost_burst: float = 0.0

    @property
    def drain_eta(self) -> float:
        """Seconds the key needs to release what it holds, at its rate (however many workers)."""
        return self.depth * self.interval


def _check_burst(burst: object, name: str = "burst") -> None:
    if (
        isinstance(burst, bool)
        or not isinstance(burst, int | float)
        or not burst >= 0
        or not math.isfinite(burst)
    ):
        raise ConfigurationError(f"{name} must be a finite number >= 0, got {burst!r}")


def validate_bucket_options(
    *,
    rate: str | float,
    burst: object,
    visibility_timeout: object,
    max_receives: object,
    max_depth: object,
    overflow: object,
    max_drains: object = 1,
    names: Mapping[str, str] | None = None,
) -> None:
    """Shared by LeakyBucket and BucketTask; ``names`` maps each parameter to the caller's name
    for it (BucketTask says ``bucket_rate`` where LeakyBucket says ``default_rate``)."""
    name = (names or {}).get
    try:
        parse_rate(rate)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name('rate', 'default_rate')}: {exc}") from None
    _check_burst(burst, name("burst", "default_burst"))
    seconds(name("visibility_timeout", "visibility_timeout"), visibility_timeout, positive=True)
    positive_int(name("max_receives", "max_receives"), max_receives)
    positive_int(name("max_depth", "max_depth"), max_depth, optional=True)
    one_of(name("overflow", "overflow"), overflow, OVERFLOWS)
    positive_int(name("max_drains", "max_drains"), max_drains)


def _enqueue_result(
    status: int, drain_needed: bool = False, wake_in: float | None = None
) -> Receipt:
    return Receipt(
        kept=status in (1, 2, 6),
        evicted_oldest=status == 2,
        drain_needed=drain_needed,
        duplicate=status == 4,
        delayed=status == 5,
        merged=status == 6,  # into the held call of its dedupe id (debounce): kept
        wake_in=wake_in,
    )


#: The result of each status when the item asks for no drain job: results are frozen, so the
#: producer path hands out these instead of building one per item.
_QUIET_RESULTS = tuple(_enqueue_result(status) for status in range(7))


_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)")


def rate_budget(rate: str | float, option: str = "rate") -> tuple[float, float]:
    """``(interval ms per unit, units per period)`` of a rate: ``"90000/m"`` is 90,000 units a
    minute, so one call may cost at most 90,000 (plus the burst)."""
    try:
        interval = parse_rate(rate)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{option}: {exc}") from None
    if isinstance(rate, str):
        match = _COUNT.match(rate)
        assert match is not None  # parse_rate accepted it
        return interval, float(match.group(1))
    return interval, float(rate)


@dataclass(frozen=True)
class Limits:
    """The limits a bucket passes to its scripts (ARGV[3], ``lua/bucket_keys.lua``)."""

    #: Most calls of one key in flight at once (0: no limit; 1: an ordered bucket).
    concurrency: int = 0
    #: Milliseconds per unit of cost (0: calls have no cost), burst in units, largest cost.
    cost_interval_ms: float = 0.0
    cost_burst: float = 0.0
    cost_max: float = 0.0
    #: Milliseconds between releases over all keys (0: no total rate), and its burst.
    total_interval_ms: float = 0.0
    total_burst: float = 0.0
    #: Seconds added to every rate's period (bucket_margin): the jitter between release and
    #: arrival at the upstream that the schedules absorb. The intervals above include it.
    margin: float = 0.0
    #: Milliseconds a call of a lower priority tier waits at most beside higher ones before it
    #: goes first (0: no priority tiers; lua/bucket_tiers.lua).
    priority_bound_ms: float = 0.0

    @classmethod
    def build(
        cls,
        *,
        ordered: bool,
        concurrency: int | None,
        cost_rate: str | float | None,
        cost_burst: float,
        total_rate: str | float | None,
        total_burst: float,
        margin: float = 0.0,
        priority_bound: float | None = None,
        names: Callable[[str, str], str] = lambda name, default: default,
    ) -> Limits:
        """Check the options (``names`` gives the caller's name of each) and build them."""
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigurationError(
                f"{names('concurrency', 'concurrency')} must be an integer >= 1 or None, "
                f"got {concurrency!r}"
            )
        if ordered and concurrency not in (None, 1):
            raise ConfigurationError(
                f"{names('ordered', 'ordered')} is {names('concurrency', 'concurrency')}=1 with "
                f"order; it cannot be combined with {concurrency}"
            )
        _check_burst(cost_burst, names("cost_burst", "cost_burst"))
        _check_burst(total_burst, names("total_burst", "total_burst"))
        margin = seconds(names("margin", "margin"), margin)
        if priority_bound is not None:
            seconds(names("priority_bound", "priority_bound"), priority_bound, positive=True)
        cost_interval = cost_max = total_interval = 0.0
        if cost_rate is not None:
            cost_interval, per_period = rate_budget(cost_rate, names("cost_rate", "cost_rate"))
            cost_max = per_period + float(cost_burst)
            cost_interval = spaced_interval(cost_rate, margin)
        if total_rate is not None:
            rate_budget(total_rate, names("total_rate", "total_rate"))
            total_interval = spaced_interval(total_rate, margin)
        return cls(
            concurrency=1 if ordered else concurrency or 0,
            cost_interval_ms=cost_interval,
            cost_burst=float(cost_burst),
            cost_max=cost_max,
            total_interval_ms=total_interval,
            total_burst=float(total_burst),
            margin=margin,
            priority_bound_ms=0.0 if priority_bound is None else float(priority_bound) * 1000,
        )

    def spec(self) -> str:
        """ARGV[3]: the concurrency alone when nothing else is set (what an ordered flag was)."""
        if not (self.cost_interval_ms or self.total_interval_ms or self.priority_bound_ms):
            return str(self.concurrency)
        parts = (
            self.cost_interval_ms,
            self.cost_burst,
            self.cost_max,
            self.total_interval_ms,
            self.total_burst,
            self.priority_bound_ms,
        )
        return " ".join([str(self.concurrency), *(repr(float(p)) for p in parts)])

    def share(self, shards: int) -> Limits:
        """One shard's limits when a bucket is spread over ``shards``: the total rate and its
        burst are split evenly (each shard meters its part alone, with no extra round trip)."""
        if not self.total_interval_ms or shards <= 1:
            return self
        return Limits(
            self.concurrency,
            self.cost_interval_ms,
            self.cost_burst,
            self.cost_max,
            self.total_interval_ms * shards,
            self.total_burst / shards,
            self.margin,
            self.priority_bound_ms,
        )

    def check_cost(self, cost: object, where: str = "bucket", *, reported: bool = False) -> float:
        """A call's cost, checked: a number >= 0 that one period's budget can cover (a reported
        cost is what happened: any number >= 0)."""
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not cost >= 0:
            raise InvalidArgumentError(f"{where}: a cost must be a number >= 0, got {cost!r}")
        if not math.isfinite(cost):
            raise InvalidArgumentError(f"{where}: a cost must be finite, got {cost!r}")
        if self.cost_max and cost > self.cost_max and not reported:
            raise InvalidArgumentError(
                f"{where}: a call costing {cost:g} can never be released: the cost rate allows "
                f"{self.cost_max:g} units in one period (burst included)"
            )
        return float(cost)


#: The bucket's release counters the scripts keep (bucket_reserve.lua counts them,
#: bucket_upkeep.lua rolls the minute): this minute's releases are the receives since
#: ``releases_base``.
_MINUTE_FIELDS = ("releases_minute", "receives", "releases_base", "releases_prev")


def _last_minute(
    now: float,
    current: list[tuple[str, float]],
    previous: list[tuple[str, float]],
    totals: Sequence[bytes | int | None],
) -> dict[str, tuple[float, float]]:
    """Releases over about the last minute per key, and their share of the bucket's: this
    minute's count plus the previous minute's weighted by the part of it still inside the last
    60 s. The scripts roll the counters only on a release, so the stored "current" minute may be
    the previous one (or older: then nothing counts)."""
    minute, receives, base, total_prev = (float(t or 0) for t in totals)
    total_now = receives - base
    this_minute = now // 60
    if totals[0] is None or minute < this_minute - 1:
        return {}
    if minute < this_minute:  # nothing released yet this minute
        current, previous, total_now, total_prev = [], current, 0.0, total_now
    weight = 1.0 - (now % 60.0) / 60.0
    counts: dict[str, float] = {}
    for name, n in current:
        counts[name] = counts.get(name, 0.0) + n
    for name, n in previous:
        counts[name] = counts.get(name, 0.0) + n * weight
    total = total_now + total_prev * weight
    return {k: (round(n, 3), round(n / total, 4) if total else 0.0) for k, n in counts.items()}


@dataclass(frozen=True)
class KeyLoad:
    """One row of the noisy-neighbour figures: a key, its releases over about the last minute
    and their share of the bucket's, and the age of its oldest waiting call."""

    key: str
    releases: float
    share: float
    oldest_age: float | None = None


def _cost_arg(call: EncodedCall) -> str:
    """The cost a script receives for a call: '' when it has none."""
    return repr(call[2]) if len(call) > 2 and call[2] is not None else ""


def check_priority(priority: object, where: str = "bucket") -> int:
    """A call's priority tier, checked: an integer 0-9 (InvalidArgumentError otherwise)."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise InvalidArgumentError(f"{where}: a priority is an integer 0-9, got {priority!r}")
    return priority


def tier_queues(key: str, tiered: bool) -> list[str]:
    """The fields of b.heads / b.tails that hold ``key``'s queues: the key's own, and on a
    bucket with priority tiers those of tiers 1-9 too ("key NUL tier", lua/bucket_queue.lua);
    its depth is the sum of their tails less the sum of their heads (absent fields are 0)."""
    return [key, *(f"{key}\0{tier}" for tier in range(1, 10))] if tiered else [key]


def _tier_arg(call: EncodedCall) -> int:
    """The priority tier a script receives for a call: 0 when it has none."""
    return call[3] if len(call) > 3 else 0
