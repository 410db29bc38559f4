"""What a pool or a bucket does over its shards (see `sharding`): building them, the shards the
heartbeat holds, wake signals, dead letters, figures and clearing.
`Sharded` is the base of `CappedPool` and `LeakyBucket` (a `Structure` with shards, and the wake
signal both kinds have); on a structure with one shard each of its methods is the plain one,
and one with several is an instance of `sharding.sharded_class` of its class."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .base import Structure
from .deadletters import DeadLetter
from .figures import Figures, structure_figures
from .sharding import on_every, on_owner, shard_names, sharded_class, split_id, validate_shards
from .wake import WakeSignal, listen_any

if TYPE_CHECKING:
    from typing_extensions import Self


_T = TypeVar("_T")


def joined(answers: Sequence[list[_T]]) -> list[_T]:
    return [x for answer in answers for x in answer]


def nothing(answers: Sequence[object]) -> None:
    return None


class Sharded(Structure):
    """What a pool or a bucket does over its shards (`shards` None: it is its own only shard):
    building them, the shards the heartbeat holds, wake signals, dead letters, figures and
    clearing. A base of both kinds."""

    #: The plain structures of this logical one (None: one shard, itself).
    shards: list[Self] | None = None
    #: The counter names meaning depth, offered and shed in the kind's stats hash.
    figure_names: tuple[str, tuple[str, ...], tuple[str, ...]]
    #: The shard a sweep asks first: the one after the last that gave work (round robin).
    next_shard = 0

    def _build_shards(
        self, count: int, adjust: Callable[[Self, Self, int], None] | None, capacity: object = None
    ) -> None:
        """Make ``count`` shards (none for one; at most ``capacity``): copies of this structure
        under their own names, never registered themselves (the registry lists this logical
        structure); ``adjust(self, shard, i)`` sets what differs per shard. Called last by
        __init__."""
        if validate_shards("shards", count, capacity) == 1:
            self.shards = None
            return
        shards = []
        for name in shard_names(self.kind, self.name, count):
            shard = copy.copy(self)  # before self.shards is set: a shard has none
            shard._setup(self.client, name, self.keys.prefix, self.serializer, register=False)
            shards.append(shard)
        self.shards = shards
        for i, shard in enumerate(shards):
            if adjust is not None:
                adjust(self, shard, i)
        self.next_shard = random.randrange(count)
        self.__class__ = sharded_class(type(self))  # its verbs route over the shards

    # What every pool and bucket offers over its shards

    def heartbeat_shards(self, item_id: str | None) -> list[tuple[Self, str | None]]:
        """What the heartbeat holds for ``item_id`` (None: the drain flag): the drain flag of
        every shard (a drain sweeps them all), or the one shard an id belongs to."""
        if not self.shards:
            return [(self, item_id)]
        if item_id is None:
            return [(shard, None) for shard in self.shards]
        i, inner = split_id(item_id, len(self.shards))
        return [(self.shards[i], inner)]

    @on_every(joined)
    def wake_signals(self) -> list[WakeSignal]:
        """The signals a store pushes to: one per shard (an empty sweep with ``listen=`` armed
        them all)."""
        return [WakeSignal(self.client, self.keys("signal"), self.keys("listening"))]

    def listen(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a store to wake a consumer that an empty pop or
        poll armed (``listen=``), on every shard's signal at once; True when woken (a hint)."""
        if not self.shards:
            return self.wake_signals()[0].listen(timeout)
        return bool(listen_any(self.wake_signals(), timeout))

    @on_every(nothing)
    def release_drain(self, *, flag: bool = True, wake: bool = False) -> None:
        """Clear the drain flag (and/or the scheduled wake-up) of every shard when the drain job
        it announced could not be sent (releasing a flag a running job holds costs one job)."""
        super().release_drain(flag=flag, wake=wake)

    def dead_page(self, start: int, count: int) -> tuple[int, list[bytes]]:
        """Dead letters ``start`` .. ``start + count - 1`` (of all shards, merged by when they
        died) and their total, in one round trip (reads ``start + count`` per shard)."""
        first = 0 if self.shards else start  # one list is read from start itself
        pipe = self.client.pipeline(transaction=False)
        shards: Sequence[Sharded] = self.shards or [self]
        for shard in shards:
            pipe.llen(shard.keys("dead"))
            pipe.lrange(shard.keys("dead"), first, start + count - 1)
        replies = pipe.execute()
        raws = [raw for page in replies[1::2] for raw in page]
        if self.shards:
            raws.sort(key=_died_at)
        return sum(int(n) for n in replies[0::2]), raws[start - first : start - first + count]

    def dead_letters(self, start: int = 0, stop: int = 99) -> list[DeadLetter]:
        """Dead letters from the oldest (of every shard, merged): payload, receives, last error
        (and key, count)."""
        if not self.shards:
            return super().dead_letters(start, stop)
        if start < 0 or stop < 0:  # LRANGE's indexes from the end: of all shards' letters
            total = sum(self.client.llen(shard.keys("dead")) for shard in self.shards)
            start, stop = (i + total if i < 0 else i for i in (start, stop))
            start = max(start, 0)
        if stop < start:
            return []
        _, raws = self.dead_page(start, stop - start + 1)
        return [self._parse_letter(raw) for raw in raws]

    def _act_on_dead(self, action: str, letters: Iterable[DeadLetter] | None, limit: int) -> int:
        if not self.shards:
            return super()._act_on_dead(action, letters, limit)
        if letters is not None:
            # Each letter to one shard listing a copy not yet claimed: two shards may hold the
            # same bytes, and a letter named once is acted on once.
            copies: dict[tuple[int, bytes], int] = {}
            mine: list[list[DeadLetter]] = [[] for _ in self.shards]
            for letter in letters:
                for i, shard in enumerate(self.shards):
                    if (i, letter.raw) not in copies:
                        found = self.client.lpos(shard.keys("dead"), letter.raw, count=0)
                        copies[i, letter.raw] = len(found or [])
                    if copies[i, letter.raw] > 0:
                        copies[i, letter.raw] -= 1
                        mine[i].append(letter)
                        break
            return sum(
                self.shards[i]._act_on_dead(action, ls, limit) for i, ls in enumerate(mine) if ls
            )
        total = 0
        for shard in self.shards:
            if limit == 0:
                break
            done = int(shard._act_on_dead(action, None, limit))
            total += done
            limit = limit - done if limit > 0 else limit
        return total

    @on_owner(lambda self, payload: (self.shards[0], payload))
    def bury_unstored(self, payload: bytes, error: str) -> None:
        """Dead-letter a call that never entered the structure, with ``error`` as its reason
        (in the first shard, which the merged figures include); counted so the identities
        hold."""
        super().bury_unstored(payload, error)

    def figures(self) -> Figures:
        """Backpressure figures in one bounded read per shard: depth, in flight, dead, delayed,
        rates in and out over the last minute, oldest waiting call, time to drain, workers
        needed (counters, rates and history summed over the shards)."""
        depth, offered, shed = self.figure_names
        shards: Sequence[Sharded] = self.shards or [self]
        keys = [shard.keys for shard in shards]
        return structure_figures(self.client, keys, depth=depth, offered=offered, shed=shed)

    @on_every(nothing)
    def clear(self) -> None:
        """Delete everything of this structure (of every shard; their own keys only)."""
        super().clear()


def _died_at(raw: bytes) -> float:
    try:
        return float(json.loads(raw.partition(b"\n")[0]).get("at", 0))
    except (ValueError, AttributeError):
        return 0.0
