"""What EventStream hands back (receipts, reads, settlements, figures) and the checks of what
it is given (group names, partition keys, seek positions)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from ..errors import ConfigurationError
from .figures import WINDOW, ring_sums
from .receipts import Record


@dataclass(frozen=True)
class StreamEvent:
    """One entry handed to a consumer of a group."""

    id: str
    payload: object
    #: Times this entry has been handed to the group, this time included.
    receives: int
    #: Its partition key, if published with one.
    key: str | None
    group: str


@dataclass
class StreamRead:
    """Entries handed out in one read; settle them with ``stream.ack(read)``."""

    group: str
    consumer: str
    events: list[StreamEvent] = field(default_factory=list)
    #: Entries whose payload could not be decoded: (id, raw); ``ack`` dead-letters them.
    undecodable: list[tuple[str, bytes]] = field(default_factory=list)
    #: Nothing to hand out, and the drain flag was kept because the read asked to linger.
    lingering: bool = False
    #: Nothing handed out only because everything looked at was skipped; more waits: read
    #: again at once.
    read_again: bool = False

    @property
    def ids(self) -> list[str]:
        """Every entry id handed out, decodable or not (what a heartbeat renews)."""
        return [e.id for e in self.events] + [i for i, _ in self.undecodable]

    def __len__(self) -> int:
        return len(self.events) + len(self.undecodable)

    def __bool__(self) -> bool:
        return len(self) > 0


@dataclass(frozen=True)
class AckResult:
    """What ``ack`` did: acknowledged, left pending to retry, dead-lettered, and stale (no
    longer pending: claimed and settled elsewhere, or trimmed)."""

    processed: int
    retried: int
    dead: int
    stale: int
    #: Held entries came free and this call armed the group's drain flag.
    drain_needed: bool = False


@dataclass(frozen=True)
class GroupFigures(Record):
    """One group's position and pace."""

    COUNTERS: ClassVar[tuple[str, ...]] = (
        "delivered",
        "redelivered",
        "processed",
        "retried",
        "dead",
        "missed",
        "lost",
        "guard_skipped",
    )

    group: str
    #: The group exists in Redis (created by a publish that knew it, a read or a seek).
    exists: bool
    #: Entries kept in the stream that the group has not read yet.
    lag: int
    #: Entries handed out and not yet acknowledged (parked ordered entries included).
    pending: int
    #: Seconds since the oldest pending entry was published; None when nothing is pending.
    oldest_pending_age: float | None
    #: Events published per second over the last minute (the stream's in-rate).
    rate_in: float
    #: Entries this group finished (acknowledged or dead-lettered) per second, last minute.
    rate_out: float
    #: Average seconds a body took over the last minute; None without data.
    seconds_per_event: float | None
    #: New entries read (requeued letters of other groups and guard skips included).
    delivered: int
    #: Entries handed out again after their visibility timeout or a failure.
    redelivered: int
    #: Entries acknowledged.
    processed: int
    #: Failures left pending to be retried.
    retried: int
    #: Entries this group dead-lettered (ever; the list is shared by the stream's groups).
    dead: int
    #: Entries the cap trimmed before this group read them.
    missed: int
    #: Entries trimmed while pending for this group, so they could not be delivered again.
    lost: int
    #: Entries skipped because the processed-guard had them as completed.
    guard_skipped: int

    @classmethod
    def from_reply(cls, group: str, reply: list[Any]) -> GroupFigures:
        """Build the figures from stream_figures.lua's reply."""
        stats, gstats = (
            {reply[j][i].decode(): reply[j][i + 1] for i in range(0, len(reply[j]), 2)}
            for j in range(2)
        )
        now = float(reply[8])
        flow, gflow = (
            ring_sums({reply[j][i]: reply[j][i + 1] for i in range(0, len(reply[j]), 2)}, now)
            for j in (2, 3)
        )
        seq = int(stats.get("seq", 0))
        last_seq = int(gstats.get("last_seq", 0))
        # Entries before the oldest kept one cannot be read any more: they are not lag.
        first_seq = int(reply[6]) if reply[6] else seq + 1
        oldest = reply[5].decode() if reply[5] else ""
        done = gflow.get("done", 0.0)
        return cls(
            group=group,
            exists=bool(int(reply[9])),
            lag=seq - max(last_seq, first_seq - 1),
            pending=int(reply[4]),
            # An entry id starts with the time (ms) it was published.
            oldest_pending_age=(
                max(now - int(oldest.split("-")[0]), 0.0) / 1000 if oldest else None
            ),
            rate_in=flow.get("in", 0.0) / WINDOW,
            rate_out=gflow.get("out", 0.0) / WINDOW,
            seconds_per_event=gflow.get("busy", 0.0) / done if done else None,
            **{name: int(gstats.get(name, 0)) for name in cls.COUNTERS},
        )


_E = TypeVar("_E")

GROUP_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")
ENTRY_ID = re.compile(r"^\d+-\d+$")


def validate_group(group: object, what: str = "group") -> str:
    """A group name: letters, digits and ``_ . : @ -`` (it is part of key names)."""
    if not isinstance(group, str) or not GROUP_NAME.match(group):
        raise ConfigurationError(f"{what} must be 1-200 letters, digits or '_.:@-', got {group!r}")
    return group


def partition_key(event: _E, given: str | None, key_function: Callable[[_E], object] | None) -> str:
    """The partition key stored with an event ('' for none): ``given``, else the stream's key
    function's, checked at the call site."""
    key: object = given
    if key is None and key_function is not None:
        try:
            key = key_function(event)
        except Exception as exc:
            raise ConfigurationError(f"stream key function failed on {event!r}: {exc!r}") from exc
    if key is None:
        return ""
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)  # an order number is a fine partition key
    if not isinstance(key, str) or not key or "\n" in key:
        raise ConfigurationError(
            f"a partition key must be a non-empty string without newlines, got {key!r}"
        )
    return key


def seek_target(position: object) -> tuple[str, str]:
    """What stream_seek.lua takes for a position: ``("start"|"end", "")`` or ``("id", id)``.
    A time becomes the id ``"<ms>-0"`` (the first entry published at or after it); a naive
    datetime is local time, as ``datetime.timestamp`` reads it. The epoch, and any time or id
    before the first entry (a datetime before 1970, a negative number), mean ``"start"``:
    Redis has no id before ``0-0`` to read after."""
    if position in ("start", "end"):
        return str(position), ""
    millis: int | None = None
    if isinstance(position, str) and ENTRY_ID.match(position):
        return ("start", "") if position == "0-0" else ("id", position)
    if isinstance(position, datetime):
        millis = int(position.timestamp() * 1000)
    elif (
        isinstance(position, int | float)
        and not isinstance(position, bool)
        and math.isfinite(position)
    ):
        millis = int(position * 1000)
    if millis is not None:
        return ("start", "") if millis <= 0 else ("id", f"{millis}-0")
    raise ConfigurationError(
        "seek position must be 'start', 'end', an entry id like '1700000000000-0', a "
        f"datetime or seconds since the epoch, got {position!r}"
    )
