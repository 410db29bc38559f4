"""What a pool or a bucket does over its shards (see `sharding`): building them, the sweep and
receipts the verbs use, the heartbeat's parts, wake signals, dead letters, figures and clearing.
`Sharded` is a base of `CappedPool` and `LeakyBucket`, before their other bases; on a structure
with one shard each of its methods is the plain one."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .deadletters import DeadLetter
from .figures import Figures, structure_figures
from .receipts import Receipt
from .sharding import SAME_WAKE, on_every, on_owner, shard_names, split_id, validate_shards
from .wake import WakeSignal, listen_any


def joined(parts: Sequence[list[Any]]) -> list[Any]:
    return [x for part in parts for x in part]


def nothing(parts: Sequence[Any]) -> None:
    return None


class Sharded:
    """What a pool or a bucket does over its shards (`shards` None: it is its own only part):
    building them, the sweep, receipts, heartbeat parts, wake signals, dead letters, figures
    and clearing. A base of both kinds, before their other bases."""

    kind: ClassVar[str]
    name: str
    client: Any
    keys: Any
    serializer: Any
    #: The plain structures of this logical one (None: one shard, itself).
    shards: list[Any] | None = None
    #: The counter names meaning depth, offered and dropped in the kind's stats hash.
    figure_names: tuple[str, tuple[str, ...], tuple[str, ...]]
    _cursor = 0

    if TYPE_CHECKING:  # of the structure (declared only: this base comes first in its MRO)

        def register_once(self) -> None: ...
        def _parse_letter(self, raw: bytes) -> DeadLetter: ...

    def _build_shards(
        self, count: int, adjust: Callable[[Any, Any, int], None] | None, capacity: Any = None
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
            shard: Any = copy.copy(self)  # before self.shards is set: a shard has none
            shard._setup(self.client, name, self.keys.prefix, self.serializer, listed=True)
            shards.append(shard)
        self.shards = shards
        for i, shard in enumerate(shards):
            if adjust is not None:
                adjust(self, shard, i)
        self._cursor = random.randrange(count)

    # Routing helpers of the verbs

    def _pass_receipts(self, results: list[Receipt], groups: Mapping[int, list[Receipt]]) -> Any:
        """Calls stored on several shards ask for at most one drain job now and one at the
        earliest wake-up, as one structure's would: one drain job sweeps every shard. Shards
        whose later wake-up claim is not passed on release it (the earliest job re-plans them)."""
        if len(groups) == 1:
            return results
        assert self.shards is not None
        wakes = [(r.wake_in, i) for i, rs in groups.items() for r in rs if r.wake_in is not None]
        for _, i in sorted(wakes)[1:]:
            self.shards[i].release_drain(flag=False, wake=True)
        drain = any(r.drain_needed for r in results)
        soonest = [r.wake_in for r in results if r.wake_in is not None]
        cleared = [dataclasses.replace(r, drain_needed=False, wake_in=None) for r in results]
        if cleared:
            cleared[0] = dataclasses.replace(
                cleared[0], drain_needed=drain, wake_in=min(soonest) if soonest else None
            )
        return cleared

    def _sweep(self, take: Callable[[Any], Any], has_work: Callable[[Any], bool]) -> Any:
        """Ask shards in turn, from the one after the last that gave work, until one has work;
        returns (shard index, its answer, the empty answers of the shards asked before)."""
        assert self.shards is not None
        self.register_once()
        start, n = self._cursor, len(self.shards)
        empties: list[tuple[int, Any]] = []
        for step in range(n):
            i = (start + step) % n
            answer = take(self.shards[i])
            if has_work(answer):
                self._cursor = (i + 1) % n
                self._release_claims(empties, keep=None)
                return i, answer, empties
            empties.append((i, answer))
        self._cursor = (start + 1) % n
        return None, None, empties

    def _release_claims(self, empties: list[tuple[int, Any]], keep: int | None) -> None:
        """A shard whose empty answer claimed a scheduled drain job (``schedule``) that the
        caller is not told to send gets its claim released, so the next sweep plans it again."""
        assert self.shards is not None
        for i, answer in empties:
            if answer.schedule and i != keep:
                self.shards[i].release_drain(flag=False, wake=True)

    @staticmethod
    def _earliest(empties: list[tuple[int, Any]]) -> tuple[int, Any] | None:
        waiting = [(a.wait, i, a) for i, a in empties if a.wait is not None]
        if not waiting:
            return None
        # A shard whose drain job is already scheduled (it did not claim a new one) wins over
        # one due within the same few ms: calls added to several shards in one burst fall due
        # a millisecond apart, and a second job for that millisecond would only duplicate it.
        first = min(w[0] for w in waiting)
        scheduled = [w for w in waiting if not w[2].schedule and w[0] <= first + SAME_WAKE]
        _, i, answer = min(scheduled or waiting, key=lambda w: (w[0], w[1]))
        return i, answer

    # What every pool and bucket offers over its shards

    def heartbeat_parts(self, item_id: str | None) -> list[tuple[Any, str | None]]:
        """What the heartbeat holds for ``item_id`` (None: the drain lease): the drain lease of
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
        return super().wake_signals()  # type: ignore[misc,no-any-return]

    def listen(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a store to wake a consumer that an empty pop or
        poll armed (``listen=``), on every shard's signal at once; True when woken (a hint)."""
        if not self.shards:
            return super().listen(timeout)  # type: ignore[misc,no-any-return]
        return bool(listen_any(self.wake_signals(), timeout))

    @on_every(nothing)
    def release_drain(self, *, flag: bool = True, wake: bool = False) -> None:
        """Clear the drain flag (and/or the scheduled wake-up) of every shard when the drain job
        it announced could not be sent (releasing a flag a running job holds costs one job)."""
        super().release_drain(flag=flag, wake=wake)  # type: ignore[misc]

    def dead_page(self, start: int, count: int) -> tuple[int, list[bytes]]:
        """Dead letters ``start`` .. ``start + count - 1`` (of all shards, merged by when they
        died) and their total, in one round trip (reads ``start + count`` per shard)."""
        first = 0 if self.shards else start  # one list is read from start itself
        pipe = self.client.pipeline(transaction=False)
        for part in self.shards or [self]:
            pipe.llen(part.keys("dead"))
            pipe.lrange(part.keys("dead"), first, start + count - 1)
        replies = pipe.execute()
        raws = [raw for page in replies[1::2] for raw in page]
        if self.shards:
            raws.sort(key=_died_at)
        return sum(int(n) for n in replies[0::2]), raws[start - first : start - first + count]

    def dead_letters(self, start: int = 0, stop: int = 99) -> list[DeadLetter]:
        """Dead letters from the oldest (of every shard, merged): payload, receives, last error
        (and key, count)."""
        if not self.shards:
            return super().dead_letters(start, stop)  # type: ignore[misc,no-any-return]
        _, raws = self.dead_page(start, stop - start + 1)
        return [self._parse_letter(raw) for raw in raws]

    def _act_on_dead(self, action: str, letters: Iterable[DeadLetter] | None, limit: int) -> int:
        if not self.shards:
            return super()._act_on_dead(action, letters, limit)  # type: ignore[misc,no-any-return]
        if letters is not None:
            letters = list(letters)  # each shard acts on the ones it holds
            return sum(shard._act_on_dead(action, letters, limit) for shard in self.shards)
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
        super().bury_unstored(payload, error)  # type: ignore[misc]

    def figures(self) -> Figures:
        """Backpressure figures in one bounded read per shard: depth, in flight, dead, delayed,
        rates in and out over the last minute, oldest waiting call, time to drain, workers
        needed (counters, rates and history summed over the shards)."""
        depth, offered, dropped = self.figure_names
        keys = [part.keys for part in self.shards or [self]]
        return structure_figures(self.client, keys, depth=depth, offered=offered, dropped=dropped)

    @on_every(nothing)
    def clear(self) -> None:
        """Delete everything of this structure (of every shard; their own keys only)."""
        super().clear()  # type: ignore[misc]


def _died_at(raw: bytes) -> float:
    try:
        return float(json.loads(raw.partition(b"\n")[0]).get("at", 0))
    except (ValueError, AttributeError):
        return 0.0
