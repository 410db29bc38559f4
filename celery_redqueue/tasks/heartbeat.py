"""The worker's heartbeat: while bodies run, renew what this process holds (why, and what a
failed renewal does: docs/failure-modes.md, "Drain lease and heartbeat").

One daemon thread per process renews everything the process holds: per structure, one script
call that pushes every held id's deadline and renews the drain flag, every third of the
structure's shortest timeout (so two renewals can fail before anything expires); the calls due
together on one client go in one pipelined round trip. A second thread watches a structure
whose drain failed (`Heartbeat.watch()`): a thread of its own because a check against a Redis
that does not answer blocks for its timeouts, and renewals must not wait behind it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import redis

from ..structures.base import renew_pipelined
from ..structures.protocols import Drained, Renewable

logger = logging.getLogger(__name__)


@dataclass
class _Held:
    """What this process holds of one structure."""

    structure: Renewable
    interval: float
    next_at: float
    ids: Counter[str] = field(default_factory=Counter)
    #: Held ids whose body ended and whose settle call (ack, commit) may be under way.
    settling: set[str] = field(default_factory=set)
    drains: int = 0


#: Seconds between the checks of a watched structure.
WATCH_INTERVAL = 1.0


@dataclass
class _Watch:
    """A structure whose drain failed: ``check`` runs until ``window`` seconds after the first
    check that reached Redis (``until``)."""

    check: Callable[[], object]
    window: float
    next_at: float
    until: float | None = None


def _shards(structure: Drained, item_id: str | None) -> list[tuple[Renewable, str | None]]:
    """What holding ``item_id`` of ``structure`` holds: the structure itself, or, for a
    sharded one, each shard it concerns, renewed as a structure of its own."""
    shards_of = getattr(structure, "heartbeat_shards", None)
    if shards_of is None or not getattr(structure, "shards", None):
        # An unsharded pool or bucket holds itself (read here: the drain asks on every batch).
        return [(cast(Renewable, structure), item_id)]
    return list(shards_of(item_id))


def _running(
    thread: threading.Thread | None, target: Callable[[], None], name: str
) -> threading.Thread:
    """``thread`` if it is alive, else a daemon thread started on ``target``."""
    if thread is None or not thread.is_alive():
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
    return thread


class Heartbeat:
    """Renews held reservations, batches and drain flags from one background thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._watches: dict[int, _Watch] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        #: Renewal rounds run and renewals that failed (for tests and logs).
        self.rounds = 0
        self.failures = 0

    @contextmanager
    def holding(self, structure: Drained, item_id: str | None = None) -> Iterator[None]:
        """Renew ``item_id`` (or, with None, the structure's drain flag) while inside."""
        self.hold(structure, item_id)
        try:
            yield
        finally:
            self.drop(structure, item_id)

    def hold(self, structure: Drained, item_id: str | None = None) -> None:
        with self._lock:
            for shard, shard_id in _shards(structure, item_id):
                held = self._held.get(id(shard))
                if held is None:
                    interval = shard.heartbeat_interval()
                    held = _Held(shard, interval, time.monotonic() + interval)
                    self._held[id(shard)] = held
                if shard_id is None:
                    held.drains += 1
                else:
                    held.ids[shard_id] += 1
            self._thread = _running(self._thread, self._run, "redqueue-heartbeat")

    def watch(self, structure: Drained, check: Callable[[], object], window: float) -> None:
        """After a drain of ``structure`` failed, run ``check`` (the task's reap: it takes back
        expired work and sends the drain that due work under no live drain flag needs) every
        `WATCH_INTERVAL` seconds, until ``window`` seconds after the first check that
        succeeded: long enough for the dead drain's flag and its in-flight work to expire.
        A check that fails (Redis still down) is retried; watching again restarts the window."""
        with self._lock:
            self._watches[id(structure)] = _Watch(check, window, time.monotonic() + WATCH_INTERVAL)
            self._watcher = _running(self._watcher, self._watch, "redqueue-watch")

    def drop(self, structure: Drained, item_id: str | None = None) -> None:
        with self._lock:
            for shard, shard_id in _shards(structure, item_id):
                held = self._held.get(id(shard))
                if held is None:
                    continue
                if shard_id is None:
                    held.drains -= 1
                else:
                    held.ids[shard_id] -= 1
                    if held.ids[shard_id] <= 0:
                        del held.ids[shard_id]
                        held.settling.discard(shard_id)
                if held.drains <= 0 and not held.ids:
                    del self._held[id(shard)]

    def settling(self, structure: Drained, item_id: str) -> None:
        """``item_id``'s body has ended and its settle call is about to be sent: a renewal that
        finds it gone from now on is that settle, not the reaper, so it says nothing (a settle
        that comes too late reports itself: ``ack``/``commit`` return False)."""
        with self._lock:
            for shard, shard_id in _shards(structure, item_id):
                held = self._held.get(id(shard))
                if held is not None and shard_id is not None and shard_id in held.ids:
                    held.settling.add(shard_id)

    def _due(self) -> tuple[list[tuple[Renewable, list[str]]], float]:
        """What is due for renewal now, and the seconds until the next renewal.

        When one structure is due, those due within half their interval come along, so that
        the renewals of a process share round trips instead of spreading out."""
        now = time.monotonic()
        due: list[tuple[Renewable, list[str]]] = []
        sleep = 1.0
        with self._lock:
            if any(held.next_at <= now for held in self._held.values()):
                for held in self._held.values():
                    if held.next_at <= now + held.interval / 2:
                        due.append((held.structure, sorted(held.ids)))
                        held.next_at = now + held.interval
            for held in self._held.values():
                sleep = min(sleep, max(held.next_at - now, 0.0))
        return due, sleep

    def _run(self) -> None:
        while True:
            due, sleep = self._due()
            if due:
                self.renew(due)
            self._wake.wait(max(sleep, 0.01))

    def _watch(self) -> None:
        while True:
            sleep = self.check_watches()
            with self._lock:
                if not self._watches:  # watch() starts another thread when one is added
                    self._watcher = None
                    return
            time.sleep(max(sleep, 0.01))

    def check_watches(self) -> float:
        """Run the watches that are due; returns the seconds until the next one is."""
        now = time.monotonic()
        with self._lock:
            ready = [(key, w) for key, w in self._watches.items() if w.next_at <= now]
        for key, watch in ready:
            try:
                watch.check()
            except Exception as exc:
                logger.debug("redqueue: a watched structure's check failed (%s); retrying", exc)
            else:
                if watch.until is None:
                    watch.until = now + watch.window
            watch.next_at = now + WATCH_INTERVAL
            if watch.until is not None and now >= watch.until:
                with self._lock:
                    if self._watches.get(key) is watch:
                        del self._watches[key]
        with self._lock:
            return min((w.next_at - now for w in self._watches.values()), default=1.0)

    def renew(self, due: list[tuple[Renewable, list[str]]]) -> None:
        """Renew what is due: one round trip for all the structures on one (non-cluster)
        client, a script call each otherwise."""
        by_client: dict[int, list[tuple[Renewable, list[str]]]] = {}
        for structure, ids in due:
            by_client.setdefault(id(structure.client), []).append((structure, ids))
        for group in by_client.values():
            if len(group) > 1 and isinstance(group[0][0].client, redis.Redis):
                self._renew_pipelined(group)
            else:
                for structure, ids in group:
                    self._renew(structure, ids)

    def _renew_pipelined(self, group: list[tuple[Renewable, list[str]]]) -> None:
        for (structure, ids), missing in zip(group, renew_pipelined(group), strict=True):
            if missing is None:  # an error (such as a restarted server without the script)
                self._renew(structure, ids)
            else:
                self._renewed(structure, missing)

    def _renew(self, structure: Renewable, ids: list[str]) -> None:
        try:
            missing = structure.renew(ids)
        except Exception as exc:
            self.failures += 1
            logger.warning(
                "redqueue: renewing %d held item(s) of %s failed (%s); they expire unless the "
                "next renewal succeeds",
                len(ids),
                structure.keys.base,
                exc,
            )
            return
        self._renewed(structure, missing)

    def _renewed(self, structure: Renewable, missing: list[str]) -> None:
        self.rounds += 1
        with self._lock:
            # The renewal sent the ids held when it was due; one settled since (committed,
            # then dropped, or its commit under way) is gone for a good reason.
            held = self._held.get(id(structure))
            taken = [
                item_id
                for item_id in missing
                if held is not None and item_id in held.ids and item_id not in held.settling
            ]
        for item_id in taken:
            logger.warning(
                "redqueue: %s: %s was taken back before its body finished; it may run again",
                structure.keys.base,
                item_id,
            )


_HEARTBEAT: tuple[int, Heartbeat] | None = None
_HEARTBEAT_LOCK = threading.Lock()


def heartbeat() -> Heartbeat:
    """This process's heartbeat (a prefork child gets its own, with its own thread)."""
    global _HEARTBEAT
    with _HEARTBEAT_LOCK:
        if _HEARTBEAT is None or _HEARTBEAT[0] != os.getpid():
            _HEARTBEAT = (os.getpid(), Heartbeat())
        return _HEARTBEAT[1]
