"""Wake signals: a consumer with nothing to do waits for the next call instead of polling.

Every pool and bucket (and every group of a stream) has two keys in its hash tag:
``listening``, a zset of the listeners waiting (listener id -> until when), and ``signal``, a
list that holds one token at most. A consumer that finds nothing to hand out lists itself in
that same atomic step (``pop(..., listen=s)``, ``dequeue(listen=s)``, ``read(..., listen=s)``:
arming apart from the empty check would miss a call stored in between), then blocks on the list
for up to that long (`WakeSignal.listen`, or `listen_any` for several structures). A store
pushes a token only while a listener is live and the list is empty: no extra round trip per
call, and nothing grows while nobody listens (both keys also expire). A live listener counts
as a drain: the store sends no drain job. An empty look with ``listen=0`` takes the listener
off, so a drain that ends stops absorbing calls in its last step; one that ends after a batch
instead (it yielded, or spent its time budget) takes itself off with `unlist`.

A token is a hint, never work: a lost one (its BLPOP reply lost, Redis restarted) leaves the
waiter to its timeout, a stale one costs one look. docs/consumer.md shows the consumer using it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..redis.blocking import block_pop
from ..redis.call import is_cluster
from ..redis.lua import script

if TYPE_CHECKING:
    from ..redis.client import Client

#: Milliseconds a listener stays listed beyond the wait it was armed for (the round trip between the
#: arming step and the blocking read).
MARGIN_MS = 100

#: Seconds per blocking read when signals of several cluster slots are waited on in turn.
CLUSTER_SLICE = 0.05


def listener_id() -> str:
    """This thread's listener id (host, process, thread): one thread waits in one place."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def listen_ms(seconds: float) -> int:
    """How long a listener stays listed for a wait of ``seconds`` (0: take it off)."""
    return int(seconds * 1000) + MARGIN_MS if seconds > 0 else 0


@dataclass(frozen=True)
class WakeSignal:
    """The wake signal of one structure (or stream group): its client, its list key and the
    zset of its listeners (empty for a signal nobody is listed on, a waiter's own kick list)."""

    client: Client
    key: str
    listening: str = ""

    def listen(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds (capped below the client's socket timeout) for a
        store to wake this structure; True when woken. Arm first (see the module docstring)."""
        return block_pop(self.client, [self.key], timeout) is not None

    def arm(self, listener: str, seconds: float) -> None:
        """List ``listener`` on this signal for ``seconds`` (0: take it off), apart from any look
        at the structure (``lua/wake_arm.lua``): for a waiter that lives longer than one look
        (the continuous consumer), which looks after arming and re-arms before it runs out."""
        if not self.listening:
            raise ValueError(f"{self.key}: nobody is listed on this signal")
        script("wake_arm")(self.client, [self.listening], [listener, listen_ms(seconds)])


def unlist(signals: Sequence[WakeSignal]) -> None:
    """Take this thread's listener off ``signals``: for a drain that ends after a batch rather
    than on an empty look (which takes it off itself). Left listed, it would count as a drain
    until its listing ran out (its linger and `MARGIN_MS`): the calls stored meanwhile would
    wake nobody and send no drain job."""
    for signal in signals:
        signal.arm(listener_id(), 0)


def listen_any(signals: Sequence[WakeSignal], timeout: float) -> list[WakeSignal]:
    """Wait up to ``timeout`` seconds for any of ``signals``; returns those woken (one, or
    none when the time ran out).

    Signals on one plain client (Redis, Sentinel) share one BLPOP. On Redis Cluster a BLPOP
    takes keys of one slot only, so signals of several slots are waited on in turn, a short
    slice (`CLUSTER_SLICE`) each; signals of several clients likewise.
    """
    groups: dict[tuple[int, str], list[WakeSignal]] = {}
    for signal in signals:
        slot = signal.key if is_cluster(signal.client) else ""
        if slot:
            slot = signal.key[signal.key.index("{") : signal.key.index("}") + 1]
        groups.setdefault((id(signal.client), slot), []).append(signal)
    if not groups:
        return []
    if len(groups) == 1:
        return _pop_one(next(iter(groups.values())), timeout)
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        for group in groups.values():
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            woken = _pop_one(group, min(left, CLUSTER_SLICE))
            if woken:
                return woken
        # Reads that failed at once (Redis unreachable) must not spin: one slice per round.
        time.sleep(
            max(min(CLUSTER_SLICE - (time.monotonic() - started), deadline - time.monotonic()), 0)
        )


def _pop_one(group: list[WakeSignal], timeout: float) -> list[WakeSignal]:
    key = block_pop(group[0].client, [s.key for s in group], timeout)
    return [s for s in group if s.key == key]
