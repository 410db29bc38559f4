"""What a producer learns about a call it stored (:class:`Receipt`, one class for pool add,
bucket enqueue and stream publish) and what a reaper pass did (:class:`ReapResult`, one class
for every kind). A field a kind never sets keeps its default."""

from __future__ import annotations

from dataclasses import dataclass


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
    #: Coalescing pools: the call merged into an equal entry.
    merged: bool = False
    #: Buckets: the key was full (``max_depth``) and its oldest item was dropped to make room.
    dropped_oldest: bool = False
    #: Streams: the entry id Redis gave the event ("<ms>-<n>"), a position for ``seek``.
    id: str = ""
    #: Streams: entries the cap removed while appending (on the first receipt of a call).
    trimmed: int = 0
    #: Streams: groups whose drain lease this call armed (on the first receipt of a call).
    woken: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.kept or self.delayed


@dataclass(frozen=True, kw_only=True)
class ReapResult:
    """What one reaper pass over a structure did."""

    #: Expired holds (batches, reservations) put back to be handed out again.
    returned: int = 0
    #: Entries past ``max_receives`` moved to the dead letters.
    dead_lettered: int = 0
    #: Pools, at most once: calls of expired batches counted as ``lost``.
    lost: int = 0
    #: Work waits and no drain job holds the structure: the caller should send one.
    drain_needed: bool = False
    #: Streams: groups whose drain lease the reaper armed (their drain claims what is due).
    groups: tuple[str, ...] = ()
    #: Streams: groups with unread or claimable entries (armed or not).
    due: tuple[str, ...] = ()
    #: Streams: idle consumers with nothing pending that were forgotten.
    forgotten: int = 0

    @property
    def woken(self) -> int:
        """Streams: how many groups' drain lease the reaper armed."""
        return len(self.groups)
