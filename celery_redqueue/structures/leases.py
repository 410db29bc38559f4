"""LeasedResources: N named resources, each leased to one holder at a time for a limited time.

A crashed holder's lease runs out and the next ``acquire`` (or ``reclaim``) returns it to the
free set: no keyspace notifications, no scan, no daemon. Each operation is one bounded Lua
script on the server's clock; docs/guides/leases.md explains the structure and its keys.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import redis

from ..errors import NoFreeResourceError, RedQueueError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX, StructureKeys
from ..redis.lua import KeyOrArg, script
from ..validation import positive_int
from . import catalog
from .figures import parse_counters
from .lease_keeper import LeaseKeeper, LostCallback
from .lease_types import Lease as Lease
from .lease_types import LeaseStats as LeaseStats
from .lease_types import (
    _names,
    _seconds,
    _socket_timeout,
    _text,
    _ttl_ms,
    check_owned,
    renewed,
)

#: The keys every lease script receives, in this order (see lua/lease_keys.lua).
# fmt: off
PARTS = (
    "resources", "free", "leased", "tokens", "stats", "notify", "fences", "uses", "calls",
    "calls_at",
)

if TYPE_CHECKING:
    from ..redis.client import Client
# fmt: on

logger = logging.getLogger(__name__)

#: Most expired leases one call returns to the free set (keeps every script call short).
RECLAIM_BATCH = 100
#: Resources per script call when adding or removing many.
CHANGE_CHUNK = 1000
#: Longest a waiting ``acquire`` blocks on Redis before it tries again anyway, seconds. Wakes
#: normally come from releases and lease expiries; this only bounds the cost of a missed one.
WAIT_SLICE = 2.0


class LeasedResources(catalog.Registered):
    """Named resources, each leased to one holder at a time (see the leases guide).

    Args:
        client: a ``redis.Redis`` (or ``RedisCluster``) client.
        name: the structure's name.
        resources: names to make sure it has. They are added on the first operation
            (no I/O happens here), and adding is idempotent, so every process may declare the
            same list. Declaring never removes: use `remove_resources()` for that (and drop
            the name from the declaration, or the next new process adds it again).
        prefix: namespace of the keys.
    """

    kind = "lease"

    def __init__(
        self,
        client: Client,
        name: str,
        resources: Iterable[str] = (),
        *,
        prefix: str = DEFAULT_PREFIX,
        register: bool = True,
    ) -> None:
        self.client = client
        self.name = name
        self.keys = StructureKeys(prefix, self.kind, name)
        self._keys = [self.keys(part) for part in PARTS]
        self._undeclared: list[str] = []
        self._declare_lock = threading.Lock()
        self._registered = not register
        self.declare(resources)

    def _run(self, name: str, args: Sequence[KeyOrArg]) -> Any:
        """Run a lease script; every one receives all of the structure's keys (lease_keys.lua).

        The first call of a process lists the structure in the registry, so operator tools find it.
        The kind is not in the catalog: the reaper and drains have nothing to do with leases
        (expired ones come back on their own), so they skip it; the ops tools open it by name.
        """
        self.register_once()
        return script(name)(self.client, self._keys, args)

    def settings(self) -> dict[str, object]:
        """It is reopened by name alone: its resources are in Redis."""
        return {}

    def __repr__(self) -> str:
        return f"<LeasedResources {self.keys.base}>"

    # Resources

    def declare(self, resources: Iterable[str]) -> None:
        """Remember names to add on the next operation (no I/O now); see the class docs."""
        names = _names(resources)
        with self._declare_lock:
            self._undeclared.extend(names)

    def _apply_declared(self) -> None:
        if not self._undeclared:
            return
        with self._declare_lock:
            names, self._undeclared = self._undeclared, []
        try:
            self._change("lease_add", names)
        except BaseException:
            with self._declare_lock:
                self._undeclared[:0] = names
            raise

    def add_resources(self, *resources: str) -> int:
        """Add resources now; returns how many were new. Waiting clients are woken."""
        self._apply_declared()
        return self._change("lease_add", _names(resources))

    def _change(self, script_name: str, names: list[str]) -> int:
        """Run ``script_name`` over ``names`` in chunks (each call short); the summed replies."""
        return sum(
            int(self._run(script_name, names[start : start + CHANGE_CHUNK]))
            for start in range(0, len(names), CHANGE_CHUNK)
        )

    def remove_resources(self, *resources: str) -> int:
        """Remove resources; returns how many it had.

        A removed resource that is leased stays with its holder until released or expired, and
        then leaves instead of becoming free.
        """
        self._apply_declared()
        return self._change("lease_remove", _names(resources))

    def resources(self) -> set[str]:
        """Every resource name (O(N): for inspection, not for hot paths)."""
        self._apply_declared()
        with redis_errors(f"reading {self.keys.base}"):
            return {_text(m) for m in self.client.smembers(self.keys("resources"))}

    def __len__(self) -> int:
        """How many resources it has, free or leased."""
        self._apply_declared()
        with redis_errors(f"reading {self.keys.base}"):
            return int(self.client.scard(self.keys("resources")))

    # Leasing

    def acquire(self, ttl: float, *, wait: float | None = None) -> Lease | None:
        """Lease the least recently used free resource for ``ttl`` seconds.

        Expired leases are reclaimed first, in the same atomic step. Returns None when nothing
        is free. With ``wait``, blocks up to that many seconds for a resource: the client sleeps
        in a blocking Redis call that a release (or new resource) wakes, or until the earliest
        lease expires, and tries again; it never polls in a loop.
        """
        ttl_ms = _ttl_ms(ttl)
        deadline = None
        if wait is not None:
            deadline = time.monotonic() + _seconds(wait, "wait", allow_zero=True)
        self._apply_declared()
        while True:
            lease, until_expiry = self._try_acquire(ttl_ms)
            if lease is not None or deadline is None:
                return lease
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            pause = min(remaining, WAIT_SLICE)
            if until_expiry is not None:
                # Wake right after the earliest lease runs out: it can then be reclaimed.
                pause = min(pause, until_expiry + 0.005)
            self._wait_for_release(max(pause, 0.01))

    def _try_acquire(self, ttl_ms: int) -> tuple[Lease | None, float | None]:
        token = uuid.uuid4().hex
        sent = time.monotonic()
        reply = self._run("lease_acquire", [ttl_ms, token, RECLAIM_BATCH])
        if int(reply[0]) == 1:
            lease = Lease(
                self.keys.base,
                _text(reply[1]),
                token,
                int(reply[2]) / 1000,
                fence=int(reply[3]),
                local_deadline=sent + ttl_ms / 1000,
            )
            return lease, None
        until_expiry_ms = int(reply[1])
        return None, (until_expiry_ms / 1000 if until_expiry_ms >= 0 else None)

    def _wait_for_release(self, timeout: float) -> None:
        # A blocking call must give up before the client's socket timeout would (redis-py < 8
        # applies that timeout to the block too): otherwise every wait ends in a timeout, which
        # also drops the connection.
        socket_timeout = _socket_timeout(self.client)
        if socket_timeout:
            timeout = min(timeout, max(socket_timeout - 1.0, socket_timeout / 2))
        try:
            with redis_errors(f"waiting for a resource of {self.keys.base}"):
                self.client.blpop([self.keys("notify")], timeout=timeout)
        except RedQueueError as exc:
            # A client whose socket timeout is shorter than the pause times out here: that is
            # only the end of this pause. Anything else is a real outage.
            if not isinstance(exc.__cause__, redis.exceptions.TimeoutError):
                raise

    def release(self, lease: Lease) -> bool:
        """Give the resource back. False (and nothing changed) when ``lease`` is no longer held;
        True when it was released already by this lease (a second release within a minute,
        such as a re-send after a lost reply: "already done").

        A lease is no longer held once it ran out, even if nobody took the resource since: its
        resource is then reclaimed (returned to the free set) by this call.
        """
        self._check(lease)
        released = self._run("lease_release", [lease.resource, lease.token])
        return bool(released)  # 2: released by an earlier send of this same call

    def renew(self, lease: Lease, ttl: float) -> Lease | None:
        """Extend a held lease to ``ttl`` seconds from now; returns the updated lease.

        None when ``lease`` is no longer held (it ran out or was released): the holder must stop
        using the resource.
        """
        self._check(lease)
        return renewed(self._run, "lease_renew", lease, ttl)

    def _check(self, lease: object) -> None:
        check_owned(lease, self.keys.base, "lease")

    @contextmanager
    def lease(
        self,
        ttl: float,
        *,
        wait: float | None = None,
        keep_alive: bool = False,
        on_lost: LostCallback | None = None,
    ) -> Iterator[str]:
        """Hold a resource for the ``with`` block; yields its name and releases it afterwards.

        Raises NoFreeResourceError when none is free (within ``wait`` seconds, if given). With
        ``keep_alive=True`` a background thread renews the lease every ``ttl / 3`` seconds
        while the block runs, so ``ttl`` only bounds how long a crashed holder keeps it.
        ``on_lost(lease, reason)`` is called once if the lease is lost (see
        [`LeaseKeeper`][celery_redqueue.LeaseKeeper]), at the latest when the release at the end
        finds it gone.

        Example:

            with phones.lease(ttl=10, wait=30) as device:
                flash_firmware(device)
        """
        lease = self.acquire(ttl, wait=wait)
        if lease is None:
            raise NoFreeResourceError(f"no free resource in {self.keys.base}")
        # Without keep_alive the keeper is not started: it only reports a loss at release.
        keeper = LeaseKeeper(self, lease, ttl, on_lost=on_lost)
        if keep_alive:
            keeper.start()
        try:
            yield lease.resource
        finally:
            try:
                keeper.release()
            except RedQueueError:
                # Do not hide the block's own outcome: the lease runs out by itself anyway.
                logger.exception("%s: releasing %r failed", self.keys.base, lease.resource)

    # Maintenance and figures

    def reclaim(self, limit: int = 1000) -> int:
        """Return up to ``limit`` expired leases to the free set now; returns how many.

        Never required (every acquire reclaims first); useful to keep ``stats()`` current.
        """
        positive_int("limit", limit)
        total = 0
        while total < limit:
            batch = min(RECLAIM_BATCH, limit - total)
            count = int(self._run("lease_reclaim", [batch]))
            total += count
            if count < batch:
                break
        return total

    def stats(self) -> LeaseStats:
        """One consistent snapshot of its figures."""
        self._apply_declared()
        reply = self._run("lease_stats", [])
        counters = parse_counters(
            self.keys("stats"), {reply[i]: reply[i + 1] for i in range(4, len(reply), 2)}
        )
        return LeaseStats(
            resources=int(reply[0]),
            free=int(reply[1]),
            leased=int(reply[2]),
            expired=int(reply[3]),
            acquired=counters.get("acquired", 0),
            released=counters.get("released", 0),
            reclaimed=counters.get("reclaimed", 0),
            renewed=counters.get("renewed", 0),
            missed=counters.get("missed", 0),
        )

    def clear(self) -> None:
        """Delete everything: resources, leases and counters (this structure's keys only)."""
        with self._declare_lock:
            self._undeclared.clear()
        with redis_errors(f"clearing {self.keys.base}"):
            self.client.delete(*self._keys)
