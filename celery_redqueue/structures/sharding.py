"""The machinery of sharded structures (`sharded`): shard names, ids, the round-robin
sweep, heartbeat parts, dead letters and figures over the shards, and the three ways a method of
the logical structure runs on its shards, each written once: `on_owner` (the one shard that
holds a key, a batch or a reservation), `on_every` (every shard, the results merged), `swept`
(shards in turn until one has work) and `spread` (stored calls, each on its shard). A sharded
kind declares each of its methods as one of them over the plain kind's own method, so a method
is written once, in the plain kind."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from redis.crc import key_slot

from ..errors import ConfigurationError
from ..redis.keys import DEFAULT_PREFIX, StructureKeys, validate_name
from ..redis.serializers import Serializer
from ..redis.server import server_warnings
from ..validation import positive_int
from . import catalog
from .deadletters import DeadLetter, parse_dead_letter
from .figures import Figures, compute, read_flow, ring_history, ring_sums
from .receipts import Receipt
from .wake import WakeSignal, listen_any

SLOTS = 16384
_R = TypeVar("_R", bound=Receipt)
_T = TypeVar("_T")
_A = TypeVar("_A")
_P = ParamSpec("_P")

#: Seconds within which two shards' wake-ups count as one (see ``_earliest``).
SAME_WAKE = 0.01


def validate_shards(option: str, shards: Any, capacity: Any = None) -> int:
    """``shards`` is a positive integer, and no more than ``capacity`` (a pool's shard holds at
    least one entry)."""
    positive_int(option, shards)
    if capacity is not None and isinstance(capacity, int) and shards > capacity:
        raise ConfigurationError(
            f"{option}={shards} is more than the capacity {capacity}: each shard holds at least "
            "one entry"
        )
    return int(shards)


def shard_names(kind: str, name: str, shards: int) -> list[str]:
    """The shards' names: ``<name>#<i>.<j>``, ``j`` the smallest whose hash tag falls in the
    ``i``-th N-th of the cluster's slot space (deterministic: every process finds the same)."""
    validate_name(name)
    names = []
    for i in range(shards):
        low, high = i * SLOTS // shards, (i + 1) * SLOTS // shards
        j = 0
        while not low <= key_slot(f"{kind}:{name}#{i}.{j}".encode()) < high:
            j += 1
        names.append(f"{name}#{i}.{j}")
    return names


def stable_hash(data: bytes) -> int:
    """The same number in every process (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def split_id(item_id: str, shards: int) -> tuple[int, str]:
    index, sep, inner = item_id.partition(":")
    if not sep or not index.isdigit() or int(index) >= shards:
        raise ConfigurationError(f"not an id of this sharded structure: {item_id!r}")
    return int(index), inner


def sum_results(cls: type[_T], parts: Sequence[Any], **fixed: Any) -> _T:
    """A result dataclass whose integer fields are the sums over ``parts``, booleans any(),
    tuples joined."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        got = [getattr(p, f.name) for p in parts]
        if isinstance(got[0], bool):
            values[f.name] = any(got)
        elif isinstance(got[0], tuple):
            values[f.name] = tuple(x for part in got for x in part)
        else:
            values[f.name] = sum(got)
    values.update(fixed)
    return cls(**values)


def on_owner(
    method: Callable[Concatenate[Any, _A, _P], _T],
    owner: Callable[[Any, _A], tuple[Any, _A]],
) -> Callable[Concatenate[Any, _A, _P], _T]:
    """``method`` of the plain kind, run on the shard ``owner`` finds for its first argument
    (a key, a batch, a reservation), which it passes as that shard knows it."""

    @functools.wraps(method)
    def routed(self: Any, first: _A, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        shard, own = owner(self, first)
        return method(shard, own, *args, **kwargs)

    return routed


def by_key(self: Any, key: str) -> tuple[Any, str]:
    """The owner of a bucket key: its shard (`on_owner`)."""
    return self.shard(key), key


def on_every(
    method: Callable[Concatenate[Any, _P], _T],
    merge: Callable[[Sequence[_T]], _T],
    *,
    register: bool = False,
) -> Callable[Concatenate[Any, _P], _T]:
    """``method`` of the plain kind, run on every shard; ``merge`` makes one answer of theirs.
    ``register``: the call registers the logical structure first (as a plain kind's script
    call registers it)."""

    @functools.wraps(method)
    def routed(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if register:
            self.register_once()
        return merge([method(shard, *args, **kwargs) for shard in self.shards])

    return routed


def swept(
    method: Callable[Concatenate[Any, _P], _T],
    has_work: Callable[[_T], Any],
    merge: Callable[[Any, int | None, _T | None, list[tuple[int, _T]]], _T],
) -> Callable[Concatenate[Any, _P], _T]:
    """``method`` of the plain kind (a pop, a dequeue), asked of the shards in turn until one
    has work (`Sharded._sweep`); ``merge(self, index, answer, empties)`` makes the answer."""

    @functools.wraps(method)
    def routed(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        i, answer, empties = self._sweep(lambda shard: method(shard, *args, **kwargs), has_work)
        return merge(self, i, answer, empties)

    return routed


def spread(method: Callable[..., list[_R]]) -> Callable[..., list[_R]]:
    """``method`` of the plain kind storing a list of calls (``store_encoded``), each call on
    the shard ``_shard_of_call`` picks (its ``dedupe_ids`` go along): one round trip per shard
    touched, and the receipts ask for at most one drain job, as one structure's would."""

    @functools.wraps(method)
    def routed(self: Any, encoded: Sequence[Any], **options: Any) -> list[_R]:
        ids = list(options.pop("dedupe_ids", None) or [None] * len(encoded))
        by_shard: dict[int, list[int]] = {}
        for n, call in enumerate(encoded):
            by_shard.setdefault(self._shard_of_call(call, ids[n]), []).append(n)
        self.register_once()
        results: list[Any] = [None] * len(encoded)
        groups: dict[int, list[_R]] = {}
        for i, positions in by_shard.items():
            calls, call_ids = [encoded[n] for n in positions], [ids[n] for n in positions]
            got = groups[i] = method(self.shards[i], calls, dedupe_ids=call_ids, **options)
            for n, result in zip(positions, got, strict=True):
                results[n] = result
        return self._pass_receipts(results, groups)  # type: ignore[no-any-return]

    return routed


class Sharded(catalog.Registered):
    """What sharded pools and buckets share: the shards, registration, the sweep, heartbeat
    parts, dead letters and figures over the shards."""

    kind: str
    shards: list[Any]
    #: Counter names meaning depth, offered and dropped in the kind's stats hash.
    _figure_names: tuple[str, tuple[str, ...], tuple[str, ...]]

    #: Settings every shard shares, copied from the first onto the logical structure.
    _shared: tuple[str, ...] = ()

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        shards: int,
        prefix: str = DEFAULT_PREFIX,
        serializer: str | Serializer | None = None,
        listed: bool = False,
        **options: Any,
    ) -> None:
        validate_shards("shards", shards)
        # The shards are made with listed=True: the registry lists the logical structure.
        options.update(prefix=prefix, serializer=serializer, listed=True)
        names = shard_names(self.kind, name, shards)
        self.shards = [
            self._make_shard(client, shard, i, shards, options) for i, shard in enumerate(names)
        ]
        self.client = client
        self.name = name
        self.keys = StructureKeys(prefix, self.kind, name)
        self._registered = listed
        self._cursor = random.randrange(shards)
        for attr in self._shared:
            setattr(self, attr, getattr(self.shards[0], attr))

    def _make_shard(
        self, client: Any, name: str, index: int, of: int, options: dict[str, Any]
    ) -> Any:
        """Shard ``index`` of ``of``, named ``name`` (each kind's)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.keys.base} shards={len(self.shards)}>"

    @property
    def serializer(self) -> Serializer:
        serializer: Serializer = self.shards[0].serializer
        return serializer

    @serializer.setter
    def serializer(self, value: Serializer) -> None:
        for shard in self.shards:
            shard.serializer = value

    def wake_signals(self) -> list[WakeSignal]:
        """Every shard's wake signal (an empty sweep with ``listen=`` armed them all)."""
        return [signal for shard in self.shards for signal in shard.wake_signals()]

    def listen(self, timeout: float) -> bool:
        """Wait on every shard's wake signal at once (see `wake.listen_any`)."""
        return bool(listen_any(self.wake_signals(), timeout))

    def settings(self) -> dict[str, Any]:
        """What another process needs to open this structure (the registry keeps it)."""
        return dict(self.shards[0].settings(), shards=len(self.shards))

    def encode(self, payload: Any) -> bytes:
        """Serialize one payload as it will be stored (raises SerializationError)."""
        data: bytes = self.shards[0].encode(payload)
        return data

    def _merge_receipts(self, groups: Mapping[int, list[_R]]) -> None:
        """Calls stored on several shards ask for at most one drain job now and one at the
        earliest wake-up, as one structure's would: one drain job sweeps every shard. Shards
        whose later wake-up claim is not passed on release it (the earliest job re-plans them)."""
        wakes = [(r.wake_in, i) for i, rs in groups.items() for r in rs if r.wake_in is not None]
        for _, i in sorted(wakes)[1:]:
            self.shards[i].release_drain(flag=False, wake=True)

    def _pass_receipts(self, results: list[_R], groups: Mapping[int, list[_R]]) -> list[_R]:
        if len(groups) == 1:
            return results
        self._merge_receipts(groups)
        drain = any(r.drain_needed for r in results)
        wakes = [r.wake_in for r in results if r.wake_in is not None]
        cleared = [dataclasses.replace(r, drain_needed=False, wake_in=None) for r in results]
        if cleared:
            cleared[0] = dataclasses.replace(
                cleared[0], drain_needed=drain, wake_in=min(wakes) if wakes else None
            )
        return cleared

    def _shard_of_call(self, call: Any, dedupe_id: str | None) -> int:
        """The shard one stored call goes to (each kind's; see `spread`)."""
        raise NotImplementedError

    def _sweep(self, take: Callable[[Any], Any], has_work: Callable[[Any], bool]) -> Any:
        """Ask shards in turn, from the one after the last that gave work, until one has work;
        returns (shard index, its answer, the empty answers of the shards asked before)."""
        self.register_once()
        start = self._cursor
        empties: list[tuple[int, Any]] = []
        for step in range(len(self.shards)):
            i = (start + step) % len(self.shards)
            answer = take(self.shards[i])
            if has_work(answer):
                self._cursor = (i + 1) % len(self.shards)
                self._release_claims(empties, keep=None)
                return i, answer, empties
            empties.append((i, answer))
        self._cursor = (start + 1) % len(self.shards)
        return None, None, empties

    def _release_claims(self, empties: list[tuple[int, Any]], keep: int | None) -> None:
        """A shard whose empty answer claimed a scheduled drain job (``schedule``) that the
        caller is not told to send gets its claim released, so the next sweep plans it again."""
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

    def heartbeat_parts(self, item_id: str | None) -> list[tuple[Any, str | None]]:
        """What the heartbeat holds for ``item_id`` (None: the drain lease): the drain lease of
        every shard (a drain sweeps them all), or the one shard an id belongs to."""
        if item_id is None:
            return [(shard, None) for shard in self.shards]
        i, inner = split_id(item_id, len(self.shards))
        return [(self.shards[i], inner)]

    def renew(self, item_ids: Sequence[str]) -> list[str]:
        """Renew held ids and every shard's drain lease; returns the ids no longer held."""
        by_shard: dict[int, list[str]] = {i: [] for i in range(len(self.shards))}
        for item_id in item_ids:
            i, inner = split_id(item_id, len(self.shards))
            by_shard[i].append(inner)
        return [f"{i}:{m}" for i, ids in by_shard.items() for m in self.shards[i].renew(ids)]

    def release_drain(self, *, flag: bool = True, wake: bool = False) -> None:
        """Release every shard's drain flag (and/or wake-up): a send that failed announced a job
        for the structure; releasing a flag a running job holds only costs one extra job."""
        for shard in self.shards:
            shard.release_drain(flag=flag, wake=wake)

    # Dead letters

    def dead_page(self, start: int, count: int) -> tuple[int, list[bytes]]:
        """Dead letters ``start`` .. ``start + count - 1`` of all shards merged by when they
        died, and their total (bounded: reads ``start + count`` per shard)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.shards:
            pipe.llen(shard.keys("dead"))
            pipe.lrange(shard.keys("dead"), 0, start + count - 1)
        replies = pipe.execute()
        total = sum(int(n) for n in replies[0::2])
        raws = [raw for page in replies[1::2] for raw in page]
        return total, sorted(raws, key=_died_at)[start : start + count]

    def bury_unstored(self, payload: bytes, error: str) -> None:
        """Dead-letter a call that never entered the structure (see
        ``CappedPool.bury_unstored``): in the first shard, which the merged figures include."""
        self.shards[0].bury_unstored(payload, error)

    def dead_letters(self, start: int = 0, stop: int = 99) -> list[DeadLetter]:
        """Dead letters of every shard, from the oldest (see ``CappedPool.dead_letters``)."""
        _, raws = self.dead_page(start, stop - start + 1)
        return [parse_dead_letter(raw, self.serializer) for raw in raws]

    def _act_on_dead(self, act: str, letters: Iterable[DeadLetter] | None, limit: int) -> int:
        if letters is not None:
            letters = list(letters)  # each shard acts on the ones it holds
            return sum(int(getattr(shard, act)(letters)) for shard in self.shards)
        total = 0
        for shard in self.shards:
            if limit == 0:
                break
            done = int(getattr(shard, act)(None, limit))
            total += done
            limit = limit - done if limit > 0 else limit
        return total

    def requeue_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Put dead letters back on their shards (see ``CappedPool.requeue_dead``)."""
        return self._act_on_dead("requeue_dead", letters, limit)

    def purge_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Delete dead letters of every shard (see ``CappedPool.purge_dead``)."""
        return self._act_on_dead("purge_dead", letters, limit)

    # Reading

    def figures(self) -> Figures:
        """The figures of the logical structure: counters, rates and history summed over the
        shards, the oldest waiting call of any shard (one figures script per shard)."""
        depth, offered, dropped = self._figure_names
        counters: dict[str, int] = {}
        sums: dict[str, float] = {}
        oldest: list[float] = []
        histories = []
        now = 0.0
        for shard in self.shards:
            got, flow, first, at = read_flow(
                shard.client, shard.keys("stats"), shard.keys("flow"), shard.keys("ages"), depth
            )
            for name, value in got.items():
                counters[name] = counters.get(name, 0) + value
            for kind, amount in ring_sums(flow, at).items():
                sums[kind] = sums.get(kind, 0.0) + amount
            oldest += [first] if first is not None else []
            histories.append(ring_history(flow, at))
            now = max(now, at)
        return compute(
            depth=counters.get(depth, 0),
            in_flight=counters.get("in_flight", 0),
            dead=counters.get("dead", 0),
            delayed=counters.get("delayed", 0),
            offered=sum(counters.get(n, 0) for n in offered),
            processed=counters.get("processed", 0),
            dropped=sum(counters.get(n, 0) for n in dropped),
            sums=sums,
            oldest_ms=min(oldest) if oldest else None,
            now_ms=now,
            counters=counters,
            history=_sum_histories(histories),
            warnings=server_warnings(self.client),
        )

    def clear(self) -> None:
        """Delete everything of every shard (their own keys only)."""
        for shard in self.shards:
            shard.clear()


def _died_at(raw: bytes) -> float:
    try:
        return float(json.loads(raw.partition(b"\n")[0]).get("at", 0))
    except (ValueError, AttributeError):
        return 0.0


def _sum_histories(histories: list[Any]) -> Any:
    first = histories[0]

    def add(name: str) -> list[Any]:
        series = [getattr(h, name) for h in histories]
        return [sum(values) for values in zip(*series, strict=True)]

    depths = [
        None if all(v is None for v in values) else sum(v or 0 for v in values)
        for values in zip(*(h.minutes_depth for h in histories), strict=True)
    ]
    return dataclasses.replace(
        first,
        seconds_in=add("seconds_in"),
        seconds_out=add("seconds_out"),
        minutes_in=add("minutes_in"),
        minutes_out=add("minutes_out"),
        minutes_depth=depths,
    )
