"""What a producer learns about a call it stored ([`Receipt`][celery_redqueue.Receipt], one class
for pool add, bucket enqueue and stream publish) and what a reaper pass did
([`ReapResult`][celery_redqueue.ReapResult], one class for every kind). A field a kind never sets
keeps its default."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

_R = TypeVar("_R", bound="Receipt")


class Record:
    """A dataclass of figures that reads as a plain dict (CLI JSON, dashboard, metrics)."""

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True, kw_only=True)
class QueueCounters(Record):
    """The counters pools and buckets both keep, declared once so they share one name each."""

    #: Calls waiting to be handed out.
    depth: int
    #: Handed out and not yet settled.
    in_flight: int
    #: Calls whose body completed.
    processed: int
    #: In the dead-letter list.
    dead: int
    #: Held until due (countdown/eta).
    delayed: int
    #: Refused by their dedupe id.
    duplicates: int
    #: Dead letters purged.
    purged: int
    #: Handed out again (after a failure or a reap).
    redelivered: int
    #: Handed back for another try after their body raised (a Celery retry, or a failure an
    #: at-least-once pool redelivers), counted when they go back; not counted as failed.
    retried: int
    #: Redelivered calls skipped because the processed guard had them as completed.
    guard_skipped: int
    #: Settled (ack, commit) after the reaper had taken them back: not counted twice, though
    #: the call may run again.
    late: int


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """One stored call. Truthy when the call was kept (or is held until due)."""

    #: The call is in the structure (a pool kept it, a bucket key had room, a stream appended
    #: it). False: refused by the policy, a full key or its dedupe id.
    kept: bool = True
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
    #: Pools (``sample``, ``newest``): an older entry was pushed out to make room.
    evicted: bool = False
    #: Pools opened with ``name_evicted=True``: the decoded payload of the call pushed out
    #: (so that its waiter can be told; per-call results).
    evicted_calls: tuple[object, ...] = ()
    #: Coalescing pools: the call merged into an equal entry.
    merged: bool = False
    #: Buckets: the key was full (``max_depth``) and its oldest item was evicted to make room.
    evicted_oldest: bool = False
    #: Streams: entries the cap removed while appending (on the first receipt of a call).
    trimmed: int = 0
    #: Streams: groups whose drain flag this call armed (on the first receipt of a call).
    woken: tuple[str, ...] = ()
    #: The call's id, given by whoever named the call (a task names every call it stores; a
    #: structure's own ``add``/``enqueue`` leaves it empty; a stream gives the entry id Redis
    #: chose, "<ms>-<n>", a position for ``seek``). With per-call results on, the result
    #: backend keeps the body's outcome under it.
    id: str = ""
    #: Reads the call's outcome by id (set by the task that stored it): attributes this
    #: receipt lacks (``get()``, ``state``, ``backend``...) are read from what it returns.
    outcome: Callable[[str], object] | None = field(default=None, compare=False, repr=False)

    def __bool__(self) -> bool:
        return self.kept or self.delayed

    @property
    def task_id(self) -> str:
        """The call's id under Celery's name for it, read by tools written for an AsyncResult
        (Flower's apply endpoints answer with it)."""
        return self.id

    def named(self: _R, call_id: str, outcome: Callable[[str], object] | None) -> _R:
        """A copy of this receipt carrying the call's id (structures hand out shared receipts
        for the common outcomes, so each call needs its own copy to carry an id)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, id=call_id, outcome=outcome)
        return copy

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: the AsyncResult side of a receipt, whose
        # attributes (``get()``, ``state``) are whatever the outcome object has: untyped.
        outcome = self.__dict__.get("outcome")
        if outcome is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(outcome(self.id), name)


@dataclass(frozen=True, kw_only=True)
class ReapResult:
    """What one reaper pass over a structure did."""

    #: Expired holds (batches, reservations) put back to be handed out again.
    returned: int = 0
    #: Entries past ``max_receives`` moved to the dead letters.
    dead_lettered: int = 0
    #: Pools, at most once: calls of expired batches counted as ``lost``.
    lost: int = 0
    #: Pools, when asked (``reap(lost_calls=True)``): the decoded payloads of the calls counted
    #: lost, and of those evicted (at least once: a returned call with no room left, or one it
    #: pushed out), so that their waiters can be told (per-call results).
    lost_calls: tuple[object, ...] = ()
    #: Work waits and no drain job holds the structure: the caller should send one.
    drain_needed: bool = False
    #: Streams: groups whose drain flag the reaper armed (their drain claims what is due).
    groups: tuple[str, ...] = ()
    #: Streams: groups with unread or claimable entries (armed or not).
    due: tuple[str, ...] = ()
    #: Streams: idle consumers with nothing pending that were forgotten.
    forgotten: int = 0

    @property
    def woken(self) -> int:
        """Streams: how many groups' drain flags the reaper armed."""
        return len(self.groups)
