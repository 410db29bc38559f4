"""Dead letters: what a structure gave up on, with the payload, receives and last error.

Both pools and buckets keep them in a Redis list, one entry per item: JSON metadata, a newline,
then the payload exactly as stored (so any serializer round-trips).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..redis.client import redis_errors
from ..redis.lua import script
from ..redis.serializers import Serializer

#: Dead letters acted on per script call when acting on "all" or "the oldest N".
CHUNK = 1000


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered item. Pass it back to ``requeue_dead``/``purge_dead`` to act on it."""

    payload: Any
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
    try:
        value = serializer.loads(payload)
    except Exception:  # keep undecodable letters listable: the raw bytes are the evidence
        value = payload
    return DeadLetter(
        payload=value,
        receives=int(info.get("receives", 0)),
        error=str(info.get("error", "")),
        at=float(info.get("at", 0)) / 1000.0,
        count=int(info.get("count", 1)),
        key=info.get("key"),
        id=info.get("id"),
        raw=raw,
    )


class DeadLetterTools:
    """List, requeue and purge, shared by pools and buckets.

    The structure provides ``client``, ``keys``, ``serializer``, ``_run(script, args)`` and the
    name of its dead-letter script, which takes ``action, limit, *entries`` and returns
    ``{count, send_drain}``.
    """

    client: Any
    keys: Any
    serializer: Serializer
    dead_script: str
    #: Counters a call dead-lettered before it was stored adds one to (see bury_unstored).
    unstored_counters: tuple[str, ...] = ("dead",)
    #: Dead letters of this kind carry their key (buckets).
    keyed_letters = False

    def _run(self, name: str, args: list[Any]) -> Any:
        raise NotImplementedError

    def dead_letters(self, start: int = 0, stop: int = 99) -> list[DeadLetter]:
        """Dead letters from the oldest: payload, receives, last error (and key, count)."""
        with redis_errors("reading dead letters"):
            raw = self.client.lrange(self.keys("dead"), start, stop)
        return [self._parse_letter(entry) for entry in raw]

    def _parse_letter(self, raw: bytes) -> DeadLetter:
        if not readable(raw):  # still listed, with its bytes: it can be looked at and purged
            return DeadLetter(raw, 0, UNREADABLE, 0.0, raw=raw)
        return parse_dead_letter(raw, self.serializer)

    def _act_on_dead(self, action: str, letters: Iterable[DeadLetter] | None, limit: int) -> int:
        if letters is not None:
            raws = [letter.raw for letter in letters]
            return int(self._run(self.dead_script, [action, 0, *raws])[0]) if raws else 0
        # The oldest ``limit``: read a window, name its letters to the script. A letter that
        # cannot be requeued stays where it is, so the next window starts after it: a run of
        # them at the head never stops the letters behind it being requeued.
        total = offset = 0
        while limit != 0:
            chunk = CHUNK if limit < 0 else min(limit, CHUNK)
            with redis_errors("reading dead letters"):
                window = self.client.lrange(self.keys("dead"), offset, offset + chunk - 1)
            if not window:
                break
            named = [raw for raw in window if action == "purge" or readable(raw)]
            count = int(self._run(self.dead_script, [action, 0, *named])[0]) if named else 0
            total += count
            # Letters the script refused (or that went meanwhile) are stepped over too.
            offset += len(window) - (len(named) if count else 0)
            limit = limit - len(named) if limit > 0 else limit
        return total

    def bury_unstored(self, payload: bytes, error: str) -> None:
        """Dead-letter a call that never entered the structure (a by-name message that could
        not be stored as a call), with ``error`` as its reason; counted so that the structure's
        identities still hold."""
        with redis_errors(f"dead-lettering a call in {self.keys.base}"):
            script("dead_letter_unstored")(
                self.client,
                [self.keys("dead"), self.keys("stats")],
                [payload, error, "1" if self.keyed_letters else "0", *self.unstored_counters],
            )

    def requeue_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Put dead letters back in the queue with their receives reset: the ``letters`` given,
        or the oldest ``limit`` (-1: all). Returns how many calls or items went back."""
        return self._act_on_dead("requeue", letters, limit)

    def purge_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Delete dead letters (counted as ``purged``): the ``letters`` given, or the oldest
        ``limit`` (-1: all). Returns how many."""
        return self._act_on_dead("purge", letters, limit)
