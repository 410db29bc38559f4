"""EventStream: a capped log of events that every consumer group reads at its own position.

Redis Streams hold the log (XADD under an approximate cap, consumer groups, a pending list per
group). Delivery is at least once per group; trimming is counted exactly (``trimmed``, and per
group ``missed`` and ``lost``). docs/guides/stream.md explains it for users.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX
from ..redis.lua import KeyOrArg
from ..redis.serializers import Serializer
from ..validation import boolean, positive_int, seconds
from .base import DRAIN_LEASE, Structure
from .figures import Figures, compute, parse_counters
from .protocols import in_chunks
from .receipts import ReapResult, Receipt
from .stream_types import (
    AckResult,
    GroupFigures,
    StreamEvent,
    StreamRead,
    partition_key,
    seek_target,
    validate_group,
)
from .wake import WakeSignal, listen_ms, listener_id

#: The stream's own keys, in the order every stream script receives them (stream_keys.lua).
PARTS = ("events", "stats", "flow", "groups", "dead")
#: Each group's keys, received after PARTS by scripts that act for one group.
GROUP_PARTS = (
    "stats", "flow", "drain", "done", "busy", "held", "ready", "signal", "listening",
)  # fmt: skip

if TYPE_CHECKING:
    from ..redis.client import Client
    from .deadletters import DeadLetter

#: Each known group's keys that stream_publish receives.
PUBLISH_GROUP_PARTS = ("stats", "drain", "listening", "signal")
#: Events per publish script call: keeps every call short (O(chunk)).
PUBLISH_CHUNK = 1000
#: Seconds a process trusts its list of the stream's groups before reading it again.
GROUPS_TTL = 5.0


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
        #: stream_publish's keys per set of declared groups (their stats and drain keys too).
        self._publish_keys: dict[tuple[str, ...], list[str]] = {}
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
        return self._keys + [self.keys(f"group:{group}:{part}") for part in GROUP_PARTS]

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
        groups = tuple(self.declared)
        keys = self._publish_keys.get(groups)
        if keys is None:
            keys = list(self._keys)
            for group in groups:
                keys += [self.keys(f"group:{group}:{part}") for part in PUBLISH_GROUP_PARTS]
            self._publish_keys[groups] = keys
        args: list[KeyOrArg] = [self.maxlen or 0, self.drain_lease_ms, len(groups), *groups]
        for data, key in prepared:
            args += [data, key, ""]
        ids, trimmed, armed = self._run("stream_publish", args, keys=keys)
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
            self.client.delete(self.keys(f"group:{validate_group(group)}:drain"))

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
