"""How the continuous consumer waits for work on the structures it serves.

One function, `wait_for_work`: until the structures' wake signals are there to block on,
it looks at each idle structure's depth (one cheap read: the counters hash, or a stream group's
figures) every `POLL` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import RedQueueError

logger = logging.getLogger(__name__)

#: Seconds between looks at idle structures.
POLL = 0.05
#: Longest one wait lasts before the consumer's loop runs its other duties (the watchdog).
LONGEST_WAIT = 1.0


def has_work(task: Any) -> bool:
    """The task's structure has calls waiting (its group has entries to read, for a stream)."""
    structure = task.structure
    if getattr(type(task), "redqueue_kind", "") == "stream":
        figures = structure.group_figures(task.group)
        return bool(figures.lag)
    return bool(structure.stats().depth)


def wait_for_work(
    tasks: Sequence[Any], *stop: threading.Event, timeout: float = LONGEST_WAIT
) -> list[Any]:
    """The tasks among ``tasks`` whose structures have work, waiting up to ``timeout`` seconds
    for one to have some; returns early (maybe empty) when any of the ``stop`` events is set."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for task in tasks:
            try:
                if has_work(task):
                    found.append(task)
            except RedQueueError as exc:
                logger.debug("redqueue consumer: looking at %s failed: %s", task.name, exc)
        if found or any(event.is_set() for event in stop):
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            return []
        if stop:
            stop[-1].wait(min(POLL, left))
        else:
            time.sleep(min(POLL, left))
