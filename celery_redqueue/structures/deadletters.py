"""Dead letters: what a structure gave up on, with the payload, receives and last error.

Both pools and buckets keep them in a Redis list, one entry per item: JSON metadata, a newline,
then the payload exactly as stored (so any serializer round-trips).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..redis.serializers import Serializer

#: Dead letters acted on per script call when acting on "all" or "the oldest N".
CHUNK = 1000


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered item. Pass it back to ``requeue_dead``/``purge_dead`` to act on it."""

    payload: object
    #: How many times the item had been handed out.
    receives: int
    #: The text of its last failure (an exception, or why its reservation ran out).
    error: str
    #: Server time (seconds since the epoch) when it was dead-lettered.
    at: float
    #: Calls it stands for (a coalesced pool entry may merge several).
    count: int = 1
    #: The bucket key it was queued under (buckets only).
    key: str | None = None
    #: The item's id (buckets only).
    id: int | None = None
    #: The stored entry, used to find this exact letter again.
    raw: bytes = field(default=b"", repr=False)


#: The error shown for an entry that is not ``<JSON metadata>\n<payload>``.
UNREADABLE = "unreadable dead-letter entry"


#: A debounced bucket call's payload starts "NUL debounced:<count>:<hex dedupe id> NUL"
#: (lua/bucket_debounce.lua): no serializer's output starts with a NUL byte followed by more.
_DEBOUNCED = re.compile(rb"\A\0debounced:(\d+):[0-9a-f]*\0")


def split_debounced(payload: bytes) -> tuple[int, bytes]:
    """The calls a stored payload stands for and the serialized call: a debounced bucket
    call's payload carries its count (``count=`` of the body); any other stands for one."""
    if payload[:1] == b"\0" and (found := _DEBOUNCED.match(payload)):
        return int(found.group(1)), payload[found.end() :]
    return 1, payload


def readable(raw: bytes) -> bool:
    """The entry has the dead-letter format: a JSON object, a newline, the payload."""
    info_text, newline, _ = raw.partition(b"\n")
    try:
        return bool(newline) and isinstance(json.loads(info_text), dict)
    except ValueError:
        return False


def parse_dead_letter(raw: bytes, serializer: Serializer) -> DeadLetter:
    info_text, _, payload = raw.partition(b"\n")
    info = json.loads(info_text)
    merged, payload = split_debounced(payload)
    try:
        value = serializer.loads(payload)
    except Exception:  # keep undecodable letters listable: the raw bytes are the evidence
        value = payload
    return DeadLetter(
        payload=value,
        receives=int(info.get("receives", 0)),
        error=str(info.get("error", "")),
        at=float(info.get("at", 0)) / 1000.0,
        count=int(info.get("count", merged)),
        key=info.get("key"),
        id=info.get("id"),
        raw=raw,
    )
