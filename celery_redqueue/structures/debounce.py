"""Reading what a debouncing pool or bucket holds: the dedupe ids waiting, since when, due when.

A held debounced call is an ordinary member of the structure's delayed set (``scheduled``) that
names its count and its dedupe id (hex) in a form of its kind (lua/pool_debounce.lua,
lua/bucket_debounce.lua); the ``debounce`` hash maps the id to "first call ms, space, member".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..redis.client import redis_errors

if TYPE_CHECKING:
    from .sharded import Sharded

__all__ = ["DebouncedKey", "debounced"]


@dataclass(frozen=True)
class DebouncedKey:
    """One dedupe id holding a debounced call (``debounce``): since when (its first call),
    when the held call is due, and how many calls it merges so far (times: server clock, s)."""

    key: str
    #: When the id's first call of this window came (None: its record is gone).
    since: float | None
    due: float
    calls: int


def debounced(structure: Sharded, member: re.Pattern[bytes], limit: int) -> list[DebouncedKey]:
    """The dedupe ids holding a debounced call of ``structure`` (each shard's), the soonest due
    first, at most ``limit``. ``member`` matches a held member of its kind, its groups the
    count and the hex dedupe id. Read-only and bounded: the next ``4 * limit`` delayed calls of
    each shard are read, so other delayed calls due sooner can hide some."""
    rows: list[DebouncedKey] = []
    for shard in structure.shards or [structure]:
        rows += _read(shard, member, limit)
    rows.sort(key=lambda row: (row.due, row.key))
    return rows[:limit]


def _read(shard: Sharded, member: re.Pattern[bytes], limit: int) -> list[DebouncedKey]:
    with redis_errors(f"reading debounced keys of {shard.keys.base}"):
        ranked = shard.client.zrange(shard.keys("scheduled"), 0, 4 * limit - 1, withscores=True)
        held = []
        for entry, due in ranked:
            found = member.match(entry)
            if found:
                held.append(
                    (bytes.fromhex(found.group(2).decode()), entry, due, int(found.group(1)))
                )
            if len(held) == limit:
                break
        if not held:
            return []
        records = shard.client.hmget(shard.keys("debounce"), [key for key, *_ in held])
    rows = []
    for (key, entry, due, calls), record in zip(held, records, strict=True):
        since, _, kept = (record or b"").partition(b" ")
        first = int(since) / 1000.0 if kept == entry and since.isdigit() else None
        rows.append(DebouncedKey(key.decode("utf-8", "replace"), first, due / 1000.0, calls))
    return rows
