"""UniqueLocks: at most one holder per key, each lock a lease that dies with its holder.

A lock is taken for a task id (``acquire``), renewed while its body runs (a
[`LeaseKeeper`][celery_redqueue.LeaseKeeper] calls ``renew``), and released by the token that
took it only (``release``): a holder that lost its lock (it stalled past the lease, someone else
took the key) can neither renew nor release the new holder's. A holder that dies simply stops
renewing: its key is free once the lease runs out, without any sweeper. Each operation is one
bounded Lua script on the server's clock, safe to send twice after a lost reply. The Celery
glue is `celery_redqueue.tasks.unique`; docs/unique.md explains both.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX, StructureKeys, registry_key
from ..redis.lua import KeyOrArg, script
from . import catalog
from .figures import parse_counters
from .lease_types import Lease, _text, _ttl_ms, check_owned, renewed
from .receipts import Record

if TYPE_CHECKING:
    from ..redis.client import Client

#: The keys every unique script receives, in this order (see lua/unique_keys.lua).
PARTS = ("held", "expiry", "stats", "calls", "calls_at")

#: The phases of a lock: taken at the call site for a call that waits in the queue, or by the
#: worker that runs the body.
QUEUED, RUNNING = "queued", "running"


@dataclass(frozen=True)
class Refused:
    """An acquire found the key held: by the task ``holder``, until ``expires_at``."""

    #: The lock key.
    key: str
    #: Task id of the holder.
    holder: str
    #: When the holder's lease runs out unless renewed, Unix seconds (server clock).
    expires_at: float


@dataclass(frozen=True)
class HeldKey:
    """One held key as operators see it (`UniqueLocks.held()`)."""

    #: The lock key.
    key: str
    #: Task id of the holder.
    task_id: str
    #: Who took it: ``host:pid`` of the caller (queued) or of the worker process (running).
    who: str
    #: ``queued`` (the call waits in the queue) or ``running`` (its body runs).
    phase: str
    #: When the task took the key, Unix seconds (server clock).
    since: float
    #: When the lease runs out unless renewed, Unix seconds; in the past: its holder died or
    #: stalled, and the next acquire of the key takes it.
    until: float
    #: Fencing token of the lease.
    fence: int


@dataclass(frozen=True)
class UniqueStats(Record):
    """A lock table's figures."""

    #: Keys held now (leases not run out yet, and run-out ones not forgotten yet).
    held: int
    #: Locks granted (a worker taking over its own call's queued lock counts again).
    acquired: int
    #: Acquires refused because another task held the key: duplicates refused.
    refused: int
    #: Locks released by their holder in time.
    released: int
    #: Lease renewals.
    renewed: int
    #: Leases that ran out before their holder released them (a dead or stalled holder),
    #: forgotten when the key was taken again.
    expired: int
    #: Releases that came too late: the lease had run out.
    lost: int
    #: Locks handed back to the next message of the same task (a retry in ``until_done``).
    handed_back: int


class UniqueLocks(catalog.Registered):
    """A table of unique locks: one holder per key at a time (see docs/unique.md).

    Args:
        client: a ``redis.Redis`` (or ``RedisCluster``) client.
        name: the table's name (the Celery glue uses the task name).
        prefix: namespace of the keys.

    Example:

        locks = UniqueLocks(client, "reports")
        lease = locks.acquire("nightly", task_id="run-1", ttl=30)
        if isinstance(lease, Lease):
            try:
                build_report()
            finally:
                locks.release(lease)
    """

    #: Listed in the registry (so operators' tools find the table) but not in the catalog:
    #: the reaper and drains have nothing to do here (run-out locks are taken back by the
    #: next acquire of their key).
    kind = "unique"

    def __init__(
        self, client: Client, name: str, *, prefix: str = DEFAULT_PREFIX, register: bool = True
    ) -> None:
        self.client = client
        self.name = name
        self.keys = StructureKeys(prefix, self.kind, name)
        self._keys = [self.keys(part) for part in PARTS]
        self._registered = not register

    def settings(self) -> dict[str, object]:
        """A lock table is reopened by name alone."""
        return {}

    def __repr__(self) -> str:
        return f"<UniqueLocks {self.keys.base}>"

    def _run(self, name: str, args: Sequence[KeyOrArg]) -> Any:
        self.register_once()
        return script(name)(self.client, self._keys, args)

    def acquire(
        self,
        key: str,
        *,
        task_id: str,
        ttl: float,
        token: str | None = None,
        who: str = "",
        phase: str = RUNNING,
        claim: bool = False,
    ) -> Lease | Refused:
        """Take ``key`` for ``task_id`` for ``ttl`` seconds, or say who holds it.

        ``token`` names this attempt (a random one by default); sending the same acquire again
        (same token) returns the same lease, never a second one. With ``claim``, a running
        task takes over the queued lock its own call took at the call site (same ``task_id``),
        keeping its ``since``; a running lock is never taken over, even by the same task id
        (a message redelivered while its first delivery still runs is refused).
        """
        _check_key(key)
        if phase not in (QUEUED, RUNNING):
            raise ConfigurationError(f"phase must be {QUEUED!r} or {RUNNING!r}, got {phase!r}")
        ttl_ms = _ttl_ms(ttl)
        token = token or _new_token()
        sent = time.monotonic()
        reply = self._run(
            "unique_acquire", [key, token, task_id, who, phase, ttl_ms, "1" if claim else "0"]
        )
        if int(reply[0]) == 1:
            return Lease(
                self.keys.base,
                key,
                token,
                int(reply[2]) / 1000,
                fence=int(reply[1]),
                local_deadline=sent + ttl_ms / 1000,
            )
        return Refused(key, _text(reply[1]), int(reply[2]) / 1000)

    def renew(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a held lock to ``ttl`` seconds from now; None when it is no longer held
        (the holder must stop: another task may have the key)."""
        self._check(lease)
        return renewed(self._run, "unique_renew", lease, ttl)

    def release(self, lease: Lease, *, hand_back: tuple[str, float] | None = None) -> bool:
        """Release the lock. False (nothing changed) when ``lease`` no longer holds it: a
        process that lost its lock never releases the next holder's. True also for a re-send
        of a release that was applied (its reply was lost).

        ``hand_back=(task_id, seconds)`` keeps the key for the next message of ``task_id`` (a
        retry) instead: a queued lock of that task for that long.
        """
        self._check(lease)
        args: list[KeyOrArg] = [lease.resource, lease.token]
        if hand_back is not None:
            args += [_ttl_ms(hand_back[1]), hand_back[0]]
        return bool(int(self._run("unique_release", args)))

    def release_queued(self, key: str, task_id: str) -> bool:
        """Release the queued lock ``task_id``'s call took at the call site (its token is the
        task id). False when that task does not hold ``key`` (run out, or never taken)."""
        _check_key(key)
        return bool(int(self._run("unique_release", [key, task_id])))

    def _check(self, lease: object) -> None:
        check_owned(lease, self.keys.base, "lock")

    def holder(self, key: str) -> HeldKey | None:
        """Who holds ``key`` now (None: nobody, or a lease that ran out)."""
        _check_key(key)
        with redis_errors(f"reading {self.keys.base}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self.keys("held"), key)
            pipe.zscore(self.keys("expiry"), key)
            raw, until = pipe.execute()
        if raw is None or until is None:
            return None
        held = _held(key, raw, until)
        return held if held.until > time.time() else None

    def held(self, limit: int = 1000) -> list[HeldKey]:
        """Up to ``limit`` held keys, soonest to run out first (run-out ones included: their
        ``until`` is in the past)."""
        return list(self._iter_held(limit))

    def _iter_held(self, limit: int) -> Iterator[HeldKey]:
        with redis_errors(f"reading {self.keys.base}"):
            ranked = self.client.zrange(self.keys("expiry"), 0, limit - 1, withscores=True)
            if not ranked:
                return
            raws = self.client.hmget(self.keys("held"), [key for key, _ in ranked])
        for (key, until), raw in zip(ranked, raws, strict=True):
            if raw is not None:
                yield _held(_text(key), raw, until)

    def stats(self) -> UniqueStats:
        with redis_errors(f"reading {self.keys.base}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(self.keys("expiry"))
            pipe.hgetall(self.keys("stats"))
            held, raw = pipe.execute()
        counters = parse_counters(self.keys("stats"), raw)
        names = ("acquired", "refused", "released", "renewed", "expired", "lost", "handed_back")
        return UniqueStats(held=int(held), **{name: counters.get(name, 0) for name in names})

    def clear(self) -> None:
        """Delete the table: locks, counters and its registry entry (this table's keys only);
        the next use registers it again."""
        with redis_errors(f"clearing {self.keys.base}"):
            self.client.delete(*self._keys, self.keys("meta"))
            self.client.srem(registry_key(self.keys.prefix), f"{self.kind}:{self.name}")
        self._registered = False


def _new_token() -> str:
    return uuid.uuid4().hex


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"a unique key must be a non-empty string, got {key!r}")


def _held(key: str, raw: bytes | str, until: float) -> HeldKey:
    entry = json.loads(raw)
    return HeldKey(
        key=key,
        task_id=str(entry["task"]),
        who=str(entry.get("who", "")),
        phase=str(entry.get("phase", "")),
        since=float(entry.get("since", 0)) / 1000,
        until=float(until) / 1000,
        fence=int(entry.get("fence", 0)),
    )
