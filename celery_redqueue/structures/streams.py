"""EventStream: a capped log of events that every consumer group reads at its own position.

Redis Streams hold the log (XADD under an approximate cap, consumer groups, a pending list per
group). Delivery is at least once per group; trimming is counted exactly (``trimmed``, and per
group ``missed`` and ``lost``). docs/guides/stream.md explains it for users.

The module holds the whole stream: what it hands back (events, reads, settlements, a group's
figures), the checks of what it is given (group names, partition keys, seek positions) and
`EventStream` itself.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..errors import ConfigurationError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX
from ..redis.lua import KeyOrArg
from ..redis.serializers import Serializer
from ..redis.server import server_warnings
from ..validation import boolean, positive_int, seconds
from .base import DRAIN_LEASE, MAX_FRONTS, Structure
from .figures import WINDOW, Figures, compute, parse_counters, ring_sums
from .protocols import in_chunks
from .receipts import ReapResult, Receipt, Record
from .wake import WakeSignal, listen_ms, listener_id

if TYPE_CHECKING:
    from ..redis.client import Client
    from .deadletters import DeadLetter

#: The stream's own keys, in the order every stream script receives them (stream_keys.lua).
PARTS = ("events", "stats", "flow", "groups", "dead")
#: Each group's keys, received after PARTS by scripts that act for one group.
GROUP_PARTS = (
    "stats", "flow", "drains", "done", "busy", "held", "ready", "signal", "listening",
)  # fmt: skip

#: Each known group's keys that stream_publish receives.
PUBLISH_GROUP_PARTS = ("stats", "drains", "listening", "signal")
#: Events per publish script call: keeps every call short (O(chunk)).
PUBLISH_CHUNK = 1000
#: Seconds a process trusts its list of the stream's groups before reading it again.
GROUPS_TTL = 5.0


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


class EventStream(Structure):
    """A capped Redis stream with consumer groups (see the stream guide)."""

    kind = "stream"
    parts = PARTS
    dead_script = "stream_dead"

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        maxlen: int | None = None,
        groups: Iterable[str] = (),
        key: Callable[[Any], str] | None = None,
        visibility_timeout: float = 60.0,
        max_receives: int = 5,
        processed_guard: float = 0.0,
        ordered: bool = False,
        drain_lease: float = DRAIN_LEASE,
        prefix: str = DEFAULT_PREFIX,
        serializer: str | Serializer | None = None,
        on_wake: Callable[[list[str]], None] | None = None,
        register: bool = True,
    ) -> None:
        positive_int("maxlen", maxlen, optional=True)
        self.visibility_ms = int(
            seconds("visibility_timeout", visibility_timeout, positive=True) * 1000
        )
        positive_int("max_receives", max_receives)
        self.processed_guard_ms = int(seconds("processed_guard", processed_guard) * 1000)
        self.drain_lease_ms = int(seconds("drain_lease", drain_lease, positive=True) * 1000)
        boolean("ordered", ordered)
        if key is not None and not callable(key):
            raise ConfigurationError(f"key must be a callable on the event, got {key!r}")
        self.declared = [validate_group(g) for g in groups]
        self._setup(client, name, prefix, serializer, register)
        #: stream_publish's keys: the stream's, then each declared group's PUBLISH_GROUP_PARTS.
        self._publish_keys = list(self._keys)
        for group in self.declared:
            self._publish_keys += [self.keys(f"group:{group}:{p}") for p in PUBLISH_GROUP_PARTS]
        #: `_group_keys` per group.
        self._keys_of_group: dict[str, list[str]] = {}
        self.maxlen = maxlen
        self.key = key
        self.max_receives = max_receives
        self.ordered = ordered
        #: Called with the groups whose drain flag a publish (or requeue, or reap) armed: the
        #: Celery layer sends one drain job per group; without it the flags simply expire.
        self.on_wake = on_wake
        self._groups_seen: tuple[float, list[str]] = (-GROUPS_TTL, [])

    def __repr__(self) -> str:
        return f"<EventStream {self.keys.base} maxlen={self.maxlen}>"

    def _script_head(self) -> list[KeyOrArg]:
        return []

    def settings(self) -> dict[str, object]:
        """What another process needs to open this stream (the registry keeps it)."""
        return {
            "maxlen": self.maxlen,
            "visibility_timeout": self.visibility_ms / 1000,
            "max_receives": self.max_receives,
            "drain_lease": self.drain_lease_ms / 1000,
        }

    def _group_keys(self, group: str) -> list[str]:
        """What a script that acts for ``group`` receives: the stream's keys, then the group's.
        Kept per group (the same list each call, so its packed script calls are kept too, see
        `Structure._run`), for at most `MAX_FRONTS` groups."""
        keys = self._keys_of_group.get(group)
        if keys is None:
            keys = self._keys + [self.keys(f"group:{group}:{part}") for part in GROUP_PARTS]
            if len(self._keys_of_group) < MAX_FRONTS:
                self._keys_of_group[group] = keys
        return keys

    def groups(self) -> list[str]:
        """Every group of this stream (created by a publish, read or seek), sorted."""
        with redis_errors(f"reading groups of {self.keys.base}"):
            return sorted(g.decode() for g in self.client.hkeys(self.keys("groups")))

    def _known_groups(self) -> list[str]:
        """Declared groups and those found in Redis (re-read every few seconds)."""
        read_at, found = self._groups_seen
        if time.monotonic() - read_at >= GROUPS_TTL:
            found = self.groups()
            self._groups_seen = (time.monotonic(), found)
        return sorted(set(self.declared) | set(found))

    # Producing

    def publish(self, event: object, *, key: str | None = None) -> Receipt:
        """Append one event for every group; one round trip. The declared groups are created
        if needed (before the event, so they receive it) and woken. Raises SerializationError (or
        ConfigurationError for a bad key), storing nothing."""
        return self.publish_many([event], keys=None if key is None else [key])[0]

    def publish_many(
        self, events: Iterable[object], *, keys: Iterable[str | None] | None = None
    ) -> list[Receipt]:
        """Append many events, one round trip per thousand; every event is checked and
        serialized before any is stored. ``keys`` gives each event's partition key (else the
        stream's ``key`` function decides, else none)."""
        events = list(events)
        given = list(keys) if keys is not None else [None] * len(events)
        if len(given) != len(events):
            raise ConfigurationError(f"keys names {len(given)} keys for {len(events)} events")
        prepared = [
            (self.encode(e), partition_key(e, k, self.key))
            for e, k in zip(events, given, strict=True)
        ]
        return in_chunks(self._append, prepared, PUBLISH_CHUNK)

    def _append(self, prepared: Sequence[tuple[bytes, str]]) -> list[Receipt]:
        # Only declared groups are created and woken here: a group some other app consumes is
        # woken by that app (its publishes and its beat), never given a drain flag nobody serves.
        groups = self.declared
        args: list[KeyOrArg] = [self.maxlen or 0, self.drain_lease_ms, len(groups), *groups]
        for data, key in prepared:
            args += [data, key, ""]
        ids, trimmed, armed = self._run("stream_publish", args, keys=self._publish_keys)
        woken = [g.decode() for g in armed]
        if woken and self.on_wake is not None:
            self.on_wake(woken)
        return [
            Receipt(
                id=raw.decode(),
                trimmed=int(trimmed) if i == 0 else 0,
                woken=tuple(woken) if i == 0 else (),
                drain_needed=bool(woken) and i == 0,
            )
            for i, raw in enumerate(ids)
        ]

    # Consuming

    def read(
        self,
        group: str,
        consumer: str,
        count: int = 10,
        *,
        linger: bool = False,
        listen: float = 0.0,
        listener: str | None = None,
    ) -> StreamRead:
        """Hand up to ``count`` entries of ``group`` to ``consumer``: an entry pending past the
        visibility timeout alone (a read of one: it was handed out before and its batch died or
        failed, so an entry that kills its consumer's process takes no other entry with it);
        else entries whose key came free (ordered), then new ones.

        An empty read releases the group's drain flag in the same step (unless ``linger``, or
        ``read_again``: it skipped what it looked at and more waits), so nothing published
        afterwards is stranded. ``listen``, ``listener``: as `CappedPool.pop`'s, per group.
        """
        validate_group(group)
        positive_int("count", count)
        if not isinstance(consumer, str) or not consumer or consumer.startswith("~"):
            raise ConfigurationError(
                f"consumer must be a name not starting with '~', got {consumer!r}"
            )
        reply = self._run(
            "stream_read",
            [
                group,
                consumer,
                count,
                self.visibility_ms,
                self.max_receives,
                int(self.processed_guard_ms > 0),
                int(self.ordered),
                self.drain_lease_ms,
                int(linger),
                listen_ms(listen),
                listener or listener_id(),
            ],
            keys=self._group_keys(group),
        )
        status = int(reply[0])
        batch = StreamRead(group, consumer, lingering=status == 2, read_again=status == 3)
        for i in range(1, len(reply), 4):
            raw_id, raw, receives, key = reply[i : i + 4]
            entry_id = raw_id.decode()
            try:
                payload = self.serializer.loads(raw)
            except Exception:
                batch.undecodable.append((entry_id, raw))
                continue
            event = StreamEvent(entry_id, payload, int(receives), key.decode() or None, group)
            batch.events.append(event)
        return batch

    def wake_signals(self, group: str) -> list[WakeSignal]:
        """The wake signal of ``group`` (see `wake`)."""
        part = f"group:{validate_group(group)}:"
        return [WakeSignal(self.client, self.keys(part + "signal"), self.keys(part + "listening"))]

    def listen(self, group: str, timeout: float) -> bool:
        """`CappedPool.listen` for ``group`` (armed by an empty ``read(..., listen=)``)."""
        return self.wake_signals(group)[0].listen(timeout)

    def ack(
        self,
        batch: StreamRead,
        *,
        failures: Mapping[str, str] | None = None,
        retry_in: Mapping[str, float] | None = None,
        dead: Iterable[str] = (),
        seconds: float = 0.0,
    ) -> AckResult:
        """Settle a read. ``failures`` maps entry ids to error texts: a failed entry stays
        pending and is handed out again after ``retry_in[id]`` seconds (default: at once),
        or is dead-lettered once it has been delivered ``max_receives`` times, or at once
        when its id is in ``dead``. Entries that could not be decoded are dead-lettered at
        once. ``seconds`` (time the bodies took)
        feeds the figures."""
        failures = failures or {}
        retry_in = retry_in or {}
        dead = set(dead)
        args: list[KeyOrArg] = [
            batch.group,
            self.processed_guard_ms,
            self.max_receives,
            self.visibility_ms,
            self.drain_lease_ms,
            repr(float(seconds)),
        ]
        for event in batch.events:
            err = str(failures.get(event.id, ""))[:4000]
            delay = int(retry_in.get(event.id, 0.0) * 1000)
            args += [event.id, err, delay, int(bool(err) and event.id in dead)]
        for entry_id, _ in batch.undecodable:
            args += [entry_id, "undecodable payload", 0, 1]
        if len(args) == 6:
            return AckResult(0, 0, 0, 0)
        reply = self._run("stream_ack", args, keys=self._group_keys(batch.group))
        counts = [int(x) for x in reply]
        result = AckResult(
            processed=counts[0],
            retried=counts[1],
            dead=counts[2],
            stale=counts[3],
            drain_needed=bool(counts[4]),
        )
        if result.drain_needed and self.on_wake is not None:
            self.on_wake([batch.group])
        return result

    def renew(self, group: str, consumer: str, ids: Iterable[str] = ()) -> int:
        """Heartbeat: renew the group's drain flag and ``consumer``'s hold on ``ids`` (their
        visibility timeout restarts). Returns how many entries were renewed."""
        return int(
            self._run(
                "stream_renew",
                [group, consumer, self.drain_lease_ms, *ids],
                keys=self._group_keys(validate_group(group)),
            )
        )

    def release_drain(self, group: str) -> None:  # type: ignore[override]  # per group
        """Release the group's drain flag (a drain job could not be sent: the next publish or
        the reaper arms it again at once)."""
        with redis_errors(f"releasing the drain flag of {self.keys.base}"):
            self.client.delete(self.keys(f"group:{validate_group(group)}:drains"))

    def seek(self, group: str, position: str | float | datetime) -> str:
        """Move ``group``'s read position; the next read starts at ``position``: ``"start"``
        (the oldest entry kept: replay), ``"end"`` (only what is published next), an entry id
        (that entry and after) or a time (a datetime, or seconds since the epoch: entries
        published at or after it; the epoch or any time before the first entry is the same as
        ``"start"``). Pending entries stay pending. Returns the last-delivered
        id now set for the group."""
        validate_group(group)
        kind, target = seek_target(position)
        last_id, _ = self._run("stream_seek", [group, kind, target], keys=self._group_keys(group))
        return str(last_id.decode())

    def requeue_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Append dead letters to the stream again, each addressed to its own group only (a
        new entry id, at the end of the log); wakes those groups. Returns how many."""
        count = super().requeue_dead(letters, limit)
        if count:
            self.reap()
        return count

    def _run(self, name: str, args: Sequence[KeyOrArg], keys: Sequence[str] | None = None) -> Any:
        if name == self.dead_script:
            # The dead-letter tools pass (action, limit, *entries); the cap comes first.
            args = [self.maxlen or 0, *args]
        return super()._run(name, args, keys)

    def reap(
        self, groups: Iterable[str] | None = None, *, forget_consumers_after: float = 3600.0
    ) -> ReapResult:
        """What beat's reaper does: for each group (default: every group) with unread, freed or
        claimable entries and no drain holding its drain flag, arm the flag and wake it
        (``on_wake``). The drain claims the entries. Without ``on_wake`` no flag is armed
        (nobody would send the drain job): the groups that need one are only reported.
        Consumers idle that many seconds with nothing pending are forgotten (each worker
        process is one)."""
        woken, due, forgotten = [], [], 0
        forget_ms = int(seconds("forget_consumers_after", forget_consumers_after) * 1000)
        for group in self._known_groups() if groups is None else groups:
            armed, claimable, unread, gone = self._run(
                "stream_wake",
                [
                    group,
                    self.visibility_ms,
                    self.drain_lease_ms,
                    int(self.on_wake is not None),
                    forget_ms,
                ],
                keys=self._group_keys(validate_group(group)),
            )
            forgotten += int(gone)
            if int(claimable) or int(unread):
                due.append(group)
            if int(armed):
                woken.append(group)
        if woken and self.on_wake is not None:
            self.on_wake(woken)
        return ReapResult(
            groups=tuple(woken), due=tuple(due), forgotten=forgotten, drain_needed=bool(woken)
        )

    # Reading

    def group_figures(self, group: str) -> GroupFigures:
        """One group's figures, read in one bounded script."""
        reply = self._run("stream_figures", [group], keys=self._group_keys(validate_group(group)))
        return GroupFigures.from_reply(group, reply)

    def stats(self) -> dict[str, int]:
        """Stream-wide counters: published, requeued, trimmed, purged, length, groups."""
        with redis_errors(f"reading stats of {self.keys.base}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.keys("stats"))
            pipe.xlen(self.keys("events"))
            pipe.hlen(self.keys("groups"))
            raw, length, groups = pipe.execute()
        counters = parse_counters(self.keys("stats"), raw)
        return {
            **{n: counters.get(n, 0) for n in ("published", "requeued", "trimmed", "purged")},
            "length": int(length),
            "groups": int(groups),
        }

    def figures(self, per_group: Sequence[GroupFigures] | None = None) -> Figures:
        """The stream as one structure, for lists of every structure: depth is the sum of the
        groups' lags, in flight their pending entries, shed what the cap trimmed.
        ``per_group``: every group's figures, when the caller has just read them."""
        if per_group is None:
            per_group = [self.group_figures(g) for g in self._known_groups()]
        stats = self.stats()
        with redis_errors(f"reading dead letters of {self.keys.base}"):
            dead = int(self.client.llen(self.keys("dead")))
        ages = [f.oldest_pending_age for f in per_group if f.oldest_pending_age is not None]
        figures = compute(
            depth=sum(f.lag for f in per_group),
            in_flight=sum(f.pending for f in per_group),
            dead=dead,
            delayed=0,
            offered=stats["published"],
            processed=sum(f.processed for f in per_group),
            shed=stats["trimmed"],
            sums={
                "in": max((f.rate_in for f in per_group), default=0.0) * 60,
                "out": sum(f.rate_out for f in per_group) * 60,
            },
            oldest_ms=None,
            now_ms=0.0,
            counters=stats,
            warnings=server_warnings(self.client),  # its entries are lost the same ways
        )
        return replace(figures, oldest_age=max(ages, default=None))

    def clear(self) -> None:
        """Delete the stream, its groups and everything kept about them (its own keys only)."""
        keys = list(self._keys)
        for group in set(self.groups()) | set(self.declared):
            keys += self._group_keys(group)[len(PARTS) :]
        with redis_errors(f"clearing {self.keys.base}"):
            self.client.delete(*keys)
        self._groups_seen = (-GROUPS_TTL, [])
