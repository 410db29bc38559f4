"""What a producer learns about a call it stored: shared by pools and buckets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

_R = TypeVar("_R", bound="Receipt")


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """The part of a receipt every structure gives."""

    #: This call armed the structure's drain flag: the caller should send a drain job.
    drain_needed: bool = False
    #: Refused because its dedupe id was seen within the dedupe window.
    duplicate: bool = False
    #: Held in the delayed set until due (``delay=``); it enters the structure then.
    delayed: bool = False
    #: Seconds until this delayed call is due, when the caller should schedule a drain job for
    #: then (it is earlier than any drain already scheduled); else None.
    wake_in: float | None = None
    #: A drain job was sent to the broker for this call (now, or for when it is due). False
    #: with ``drain_needed`` means the send failed (see ``drain_error``): the call is stored,
    #: the drain flag was released, and the next call (or beat) sends the job.
    drain_sent: bool = False
    #: Why the drain job this call needed could not be sent (the broker's error), else None.
    drain_error: str | None = None
    #: The call's id, given by whoever named the call (a task names every call it stores; a
    #: structure's own ``add``/``enqueue`` leaves it empty). With per-call results on, the
    #: result backend keeps the body's outcome under it.
    id: str = ""
    #: Reads the call's outcome by id (set by the task that stored it): attributes this
    #: receipt lacks (``get()``, ``state``, ``backend``...) are read from what it returns.
    outcome: Callable[[str], Any] | None = field(default=None, compare=False, repr=False)

    @property
    def task_id(self) -> str:
        """The call's id under Celery's name for it, read by tools written for an AsyncResult
        (Flower's apply endpoints answer with it)."""
        return self.id

    def named(self: _R, call_id: str, outcome: Callable[[str], Any] | None) -> _R:
        """A copy of this receipt carrying the call's id (structures hand out shared receipts
        for the common outcomes, so each call needs its own copy to carry an id)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, id=call_id, outcome=outcome)
        return copy

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: the AsyncResult side of a receipt.
        outcome = self.__dict__.get("outcome")
        if outcome is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(outcome(self.id), name)
