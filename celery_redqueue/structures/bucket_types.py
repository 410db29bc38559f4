"""What a LeakyBucket hands back (results, reservations, figures) and how its options are read
(rates, keys, option checks shared with BucketTask). Re-exported by `bucket`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, ReservationError
from ..validation import one_of, positive_int, seconds
from .receipts import QueueCounters, Receipt

OVERFLOWS = ("reject", "drop_oldest")

#: A call ready for a bucket's scripts: ``(key, data)``, or ``(key, data, cost)``.
EncodedCall = tuple[str, bytes] | tuple[str, bytes, float]

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


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key or "\0" in key:
        raise ConfigurationError(f"bucket key must be a non-empty string without NUL, got {key!r}")
    return key


@dataclass(frozen=True)
class Reservation:
    """A released item, held for its consumer until commit, release or its deadline."""

    id: str
    key: str
    payload: Any
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

    @classmethod
    def from_reply(cls, fields: Sequence[Any], payload: Any, bucket: str) -> Reservation:
        """From bucket_dequeue's fields key .. cost (the payload already decoded)."""
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


def _check_burst(burst: Any, name: str = "burst") -> None:
    if (
        isinstance(burst, bool)
        or not isinstance(burst, int | float)
        or not burst >= 0
        or not math.isfinite(burst)
    ):
        raise ConfigurationError(f"{name} must be a finite number >= 0, got {burst!r}")


def validate_bucket_options(
    *,
    rate: Any,
    burst: Any,
    visibility_timeout: Any,
    max_receives: Any,
    max_depth: Any,
    overflow: Any,
    max_drains: Any = 1,
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
        kept=status in (1, 2),
        evicted_oldest=status == 2,
        drain_needed=drain_needed,
        duplicate=status == 4,
        delayed=status == 5,
        wake_in=wake_in,
    )


#: The result of each status when the item asks for no drain job: results are frozen, so the
#: producer path hands out these instead of building one per item.
_QUIET_RESULTS = tuple(_enqueue_result(status) for status in range(6))
