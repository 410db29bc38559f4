"""How the continuous consumer waits for work on the structures it serves.

One function, `wait_for_work`: a blocking read on the structures' wake signals (one BLPOP over
all of them on one client: `celery_redqueue.structures.wake.listen_any`), armed by the empty
look that ended each structure's last drain. A structure without wake signals is looked at
instead (its depth, every `POLL` seconds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from ..errors import RedQueueError
from ..redis.call import is_cluster
from ..redis.keys import StructureKeys
from ..structures.wake import WakeSignal, listen_any

if TYPE_CHECKING:
    from ..redis.client import Client
    from ..structures.bucket import LeakyBucket
    from ..structures.pool import CappedPool
    from ..structures.streams import EventStream
    from .base import RedQueueTask
    from .stream import StreamTask


logger = logging.getLogger(__name__)

#: Seconds between looks at structures that have no wake signal.
POLL = 0.05


def signals_of(task: RedQueueTask) -> list[WakeSignal] | None:
    """The wake signals of the task's structure (a stream: of its group); None without any."""
    structure = task.structure
    get = getattr(structure, "wake_signals", None)
    if get is None:
        return None
    if getattr(type(task), "redqueue_kind", "") == "stream":
        return list(get(cast("StreamTask", task).group))
    return list(get())


def has_work(task: RedQueueTask) -> bool:
    """The task's structure has calls waiting (its group has entries to read, for a stream)."""
    structure = task.structure
    if getattr(type(task), "redqueue_kind", "") == "stream":
        # A stream task's structure is its EventStream (`StreamTask.structure`).
        return bool(
            cast("EventStream", structure).group_figures(cast("StreamTask", task).group).lag
        )
    # Every other kind is a pool or a bucket (`PoolTask.structure`, `BucketTask.structure`).
    return bool(cast("CappedPool | LeakyBucket", structure).stats().depth)


def kick_signal(tasks: Sequence[RedQueueTask], prefix: str, listener: str) -> WakeSignal | None:
    """A waiter's own list for `wait_for_work`'s ``kick``, on the one client of the tasks'
    signals (None when they are on several clients or a cluster, where it would need a
    blocking read of its own: the waiter then relies on its timeout)."""
    clients: dict[int, Client] = {}  # by identity: one client for all, or no kick
    for task in tasks:
        try:
            clients.update((id(s.client), s.client) for s in signals_of(task) or ())
        except RedQueueError:
            continue
    if len(clients) != 1:
        return None
    client = next(iter(clients.values()))
    if is_cluster(client):
        return None
    return WakeSignal(client, StructureKeys(prefix, "consumer", listener)("kick"))


def wait_for_work(
    tasks: Sequence[RedQueueTask],
    stop: threading.Event,
    timeout: float,
    kick: WakeSignal | None = None,
) -> list[RedQueueTask]:
    """The tasks among ``tasks`` whose structures have (or were just woken for) work, waiting
    up to ``timeout`` seconds for one; returns early, maybe empty, once ``stop`` is set, or
    once ``kick`` (a `WakeSignal` of the waiter's own, read beside the structures') is pushed
    to: the waiter then looks again at what to wait on."""
    by_key: dict[str, tuple[WakeSignal, RedQueueTask]] = {}
    looked: list[RedQueueTask] = []
    for task in tasks:
        try:
            found = signals_of(task)
        except RedQueueError as exc:
            logger.debug("redqueue consumer: no wake signal for %s: %s", task.name, exc)
            found = None
        if found is None:
            looked.append(task)
        else:
            by_key.update((signal.key, (signal, task)) for signal in found)
    deadline = time.monotonic() + timeout
    while True:
        ready = []
        for task in looked:
            try:
                if has_work(task):
                    ready.append(task)
            except RedQueueError as exc:
                logger.debug("redqueue consumer: looking at %s failed: %s", task.name, exc)
        if by_key:
            # One blocking read on every signal; short while structures without one are looked at.
            wait = deadline - time.monotonic()
            wait = min(wait, POLL) if looked else wait
            signals = [signal for signal, _ in by_key.values()]
            woken = listen_any(signals + ([kick] if kick else []), max(wait, 0.01))  # 0 blocks
            if kick is not None and any(signal.key == kick.key for signal in woken):
                return []
            ready += [by_key[signal.key][1] for signal in woken]
        if ready or stop.is_set():
            return list({task.name: task for task in ready}.values())
        left = deadline - time.monotonic()
        if left <= 0:
            return []
        if not by_key:
            stop.wait(min(POLL, left))
