"""What a producer learns about a call it stored: shared by pools and buckets."""

from __future__ import annotations

from dataclasses import dataclass


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
