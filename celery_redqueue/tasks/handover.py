"""Drain jobs a drain asks for, kept in the worker instead of sent to the broker.

A drain run by the continuous consumer (`consumer`) hands its follow-up work (the hand-over
at the end of its time budget, a fan-out, the wake-up for delayed calls or the next eligible
key) back to the consumer, which runs it in the worker's own execution pool: the broker
carries nothing. `base.RedQueueTask.send_drain` asks `handed_over` first. A leaf module (it
imports nothing of the package), so the task base and the consumer can both use it.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Handover:
    """What the drains of one task asked for while captured."""

    #: Drain jobs asked for now (a hand-over or a fan-out).
    now: int = 0
    #: Seconds until the soonest drain job asked for later (None: none).
    later: float | None = None

    def wanted(self) -> bool:
        return bool(self.now) or self.later is not None


_CAPTURED: contextvars.ContextVar[tuple[str, Handover] | None] = contextvars.ContextVar(
    "redqueue_handover", default=None
)


@contextmanager
def capturing(task_name: str) -> Iterator[Handover]:
    """Inside, drain jobs of ``task_name`` are recorded in the yielded `Handover`
    instead of sent (drain jobs of other tasks, e.g. a body calling another task, are sent)."""
    handover = Handover()
    token = _CAPTURED.set((task_name, handover))
    try:
        yield handover
    finally:
        _CAPTURED.reset(token)


def handed_over(task_name: str, countdown: float | None) -> bool:
    """Record a drain job of ``task_name`` (now, or in ``countdown`` seconds) if a capture for
    it is open; returns whether it was (the caller then sends nothing)."""
    captured = _CAPTURED.get()
    if captured is None or captured[0] != task_name:
        return False
    handover = captured[1]
    if countdown is None or countdown <= 0:
        handover.now += 1
    else:
        wait = float(countdown)
        if math.isfinite(wait):
            handover.later = wait if handover.later is None else min(handover.later, wait)
    return True


def due_in(task_name: str, seconds: float) -> None:
    """A drain of ``task_name`` found work due in ``seconds`` (a delayed call, a bucket key not
    eligible yet) that a drain job is already scheduled for (by the store, or an earlier
    drain): a consumer running the drain still wants to know, so that it looks then itself
    instead of relying on that job. Outside a capture: nothing to do."""
    if seconds > 0:
        handed_over(task_name, seconds)
