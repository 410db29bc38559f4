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
