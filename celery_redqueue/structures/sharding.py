"""Sharding: one logical pool or bucket spread over N hash tags (so over the nodes of a Redis
Cluster), for the user whose one hot pool or bucket outgrows a node.

``CappedPool(client, name, capacity, shards=3)`` (or ``LeakyBucket(..., shards=3)``) holds three
plain structures of its own kind in ``.shards``, each complete under its own hash tag,
``<prefix>:{pool:<name>#<i>.<j>}:<part>``, so every script still touches one slot. ``j`` is the
smallest number that puts shard ``i``'s slot in the ``i``-th N-th of the slot space: with N equal
to the number of masters and the slots split evenly (as ``redis-cli --cluster create`` does), the
shards land on distinct masters. With one shard (the default) ``.shards`` is None and the
structure is its own only part.

Each public method of a pool or bucket carries its routing as a decorator, one of the verbs
here, so a method is written once: `on_owner` (the one shard that holds a key, a batch or a
reservation), `on_owners` (held ids, each on its shard), `on_every` (every shard, the answers
merged), `swept` (shards in turn until one has work) and `spread` (stored calls, each on the
shard its kind picks). A verb only marks its method: a structure with one shard runs it as
written, and one with several becomes, at the end of its __init__, an instance of
`sharded_class` of its class, in which every marked method routes. What pools and buckets
share over their shards (wake signals, dead letters, figures, the shards the heartbeat holds) is
`sharded.Sharded`, a base of both.

Pools: each call goes to one shard, chosen with probability proportional to the shard's
capacity (the capacity is split as evenly as it divides): at random; by a hash of the payload
when the pool coalesces (equal payloads must meet on one shard to merge); by a hash of its
dedupe id when it has one (a duplicate must meet its original). Buckets: a key lives on one
shard (a hash of the key), so its rate, burst, order and in-flight limit are exact.

Drains sweep the shards round-robin, starting after the shard that last gave work, so no shard
starves. The drain flag is one per shard: it must live in the slot of the items it guards, or
"clear the flag only if still empty" could not be one atomic step. A running drain holds every
shard's flag (the heartbeat renews each) and an empty sweep clears each shard's flag in that
shard's own pop, so nothing that arrives on any shard is stranded. The registry lists the
logical structure once (``shards`` in its settings), never its shards.

Example:

    pool = CappedPool(cluster_client, "events", capacity=30_000, shards=3)
    pool.add({"user": 7})
    batch = pool.pop(100)          # from the next shard with work
    pool.ack(batch)                # back to the shard it came from
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar, cast

from redis.crc import key_slot

from ..errors import ConfigurationError, ReservationError
from ..redis.keys import validate_name
from ..validation import positive_int
from .bucket_types import Dequeued, EncodedCall, Reservation, _check_key
from .receipts import Receipt

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

    from ..redis.keys import StructureKeys
    from .bucket import LeakyBucket
    from .sharded import Sharded

SLOTS = 16384
_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., object])


class Split(Protocol):
    """A structure with several shards, as a routing sees it (``shards`` is set)."""

    @property
    def shards(self) -> Sequence[Sharded]: ...

    next_shard: int

    def register_once(self) -> None: ...


class SplitBucket(Split, Protocol):
    """A bucket with several shards, as its routings see it."""

    @property
    def shards(self) -> Sequence[LeakyBucket]: ...

    @property
    def keys(self) -> StructureKeys: ...

    drain_sender: Callable[[], object] | None


class Empty(Protocol):
    """An empty answer of a shard a sweep asked (a pool's batch, a bucket's poll)."""

    @property
    def wait(self) -> float | None: ...

    @property
    def schedule(self) -> bool: ...


_E = TypeVar("_E", bound=Empty)
_A = TypeVar("_A")
_O = TypeVar("_O", bound=Split)
_R = TypeVar("_R")

#: Seconds within which two shards' wake-ups count as one (see `earliest`).
SAME_WAKE = 0.01


def validate_shards(option: str, shards: int, capacity: object = None) -> int:
    """``shards`` is a positive integer, and no more than ``capacity``: a pool's capacity splits
    as evenly as it divides (`split_capacity`), so each shard holds at least one entry."""
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


def sum_results(cls: type[_T]) -> Callable[[Sequence[object]], _T]:
    """Merge for `on_every`: a result dataclass whose integer fields are the sums over the
    shards' answers, booleans any(), tuples joined."""

    def merge(answers: Sequence[object]) -> _T:
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            got = [getattr(answer, f.name) for answer in answers]
            if isinstance(got[0], bool):
                values[f.name] = any(got)
            elif isinstance(got[0], tuple):
                values[f.name] = tuple(x for one in got for x in one)
            else:
                values[f.name] = sum(got)
        return cls(**values)

    return merge


def _routing(name: str, route: Callable[..., object]) -> Callable[[_F], _F]:
    """A verb: marks the method with its routing, ``route(method, self, *args, **kwargs)``,
    and returns it unchanged. A structure with one shard runs its methods as written; one with
    several is an instance of `sharded_class` of its class, whose methods route (a test checks
    that every public method of a pool or bucket has a verb)."""

    def verb(method: _F) -> _F:
        method.__sharding__ = name  # type: ignore[attr-defined]
        method.__route__ = route  # type: ignore[attr-defined]
        return method

    return verb


def _routed(method: Callable[..., object]) -> Callable[..., object]:
    route: Callable[..., object] = method.__route__  # type: ignore[attr-defined]

    @functools.wraps(method)
    def routed(self: object, /, *args: object, **kwargs: object) -> object:
        return route(method, self, *args, **kwargs)

    return routed


_SHARDED: dict[type, type] = {}


def sharded_class(cls: type[_T]) -> type[_T]:
    """``cls`` with every verb-marked method routing over ``self.shards`` (built once per
    class): what a structure with several shards becomes at the end of its __init__, so one
    with a single shard pays nothing for sharding."""
    sharded = _SHARDED.get(cls)
    if sharded is None:
        methods: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):  # the nearest definition of a name wins
            for name, value in vars(klass).items():
                methods[name] = value
        routes = {n: _routed(m) for n, m in methods.items() if hasattr(m, "__route__")}
        sharded = _SHARDED[cls] = type(
            cls.__name__, (cls,), {**routes, "__module__": cls.__module__}
        )
    return cast(type[_T], sharded)


def on_owner(owner: Callable[[_O, _A], tuple[object, object]]) -> Callable[[_F], _F]:
    """Run on the shard ``owner(self, first)`` finds for the first argument (a key, a batch, a
    reservation), which it passes as that shard knows it."""

    def route(
        method: Callable[..., object], self: _O, first: _A, *args: object, **kw: object
    ) -> object:
        shard, own = owner(self, first)
        return method(shard, own, *args, **kw)

    return _routing("on_owner", route)


def _on_owners(method: Callable[..., list[str]], self: Split, item_ids: Sequence[str]) -> list[str]:
    by_shard: dict[int, list[str]] = {i: [] for i in range(len(self.shards))}
    for item_id in item_ids:
        i, inner = split_id(item_id, len(self.shards))
        by_shard[i].append(inner)
    return [f"{i}:{m}" for i, ids in by_shard.items() for m in method(self.shards[i], ids)]


#: Run on every shard with the ids it holds (``<shard>:<id>``; none: its drain flag only);
#: returns the ids named as the logical structure knows them (a heartbeat's renew).
on_owners = _routing("on_owners", _on_owners)


def on_every(merge: Callable[[list[_R]], object], *, register: bool = False) -> Callable[[_F], _F]:
    """Run on every shard; ``merge`` makes one answer of theirs. ``register``: the call
    registers the logical structure first (as a plain structure's script call registers it)."""

    def route(method: Callable[..., _R], self: Split, *args: object, **kwargs: object) -> object:
        if register:
            self.register_once()
        return merge([method(shard, *args, **kwargs) for shard in self.shards])

    return _routing("on_every", route)


def swept(
    has_work: Callable[[_E], bool],
    merge: Callable[..., object],
    held: Callable[..., tuple[int, str] | None] | None = None,
) -> Callable[[_F], _F]:
    """Ask the shards in turn (a pop, a dequeue) until one has work (`sweep`), or only the one
    ``held(self, kwargs)`` names; ``merge(self, index, answer, empties)`` makes the answer."""

    def route(method: Callable[..., _E], self: Split, *args: object, **kwargs: object) -> object:
        if held and (owner := held(self, kwargs)):  # it holds what the call names already
            i, own = owner
            return merge(self, i, method(self.shards[i], *args, **{**kwargs, "batch_id": own}), [])
        index, answer, empties = sweep(self, lambda s: method(s, *args, **kwargs), has_work)
        return merge(self, index, answer, empties)

    return _routing("swept", route)


def spread(shard_of: Callable[[Any, _A, str | None], int]) -> Callable[[_F], _F]:
    """Store a list of calls (``store_encoded``), each on the shard ``shard_of(self, call,
    dedupe_id)`` picks: one round trip per shard touched, and the receipts ask for at most one
    drain job, as one structure's would."""

    def route(
        method: Callable[..., list[Receipt]],
        self: Split,
        encoded: Sequence[_A],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        ids = list(dedupe_ids or [None] * len(encoded))
        by_shard: dict[int, list[int]] = {}
        for n, call in enumerate(encoded):
            by_shard.setdefault(shard_of(self, call, ids[n]), []).append(n)
        self.register_once()
        results: list[Receipt | None] = [None] * len(encoded)
        groups: dict[int, list[Receipt]] = {}
        for i, at in by_shard.items():
            calls, call_ids = [encoded[n] for n in at], [ids[n] for n in at]
            got = groups[i] = method(self.shards[i], calls, delay=delay, dedupe_ids=call_ids)
            for n, result in zip(at, got, strict=True):
                results[n] = result
        return pass_receipts(self, cast(list[Receipt], results), groups)

    return _routing("spread", route)


def _unsharded(
    method: Callable[..., object], self: object, *args: object, **kwargs: object
) -> NoReturn:
    raise ConfigurationError(f"{method.__name__} is not available on a sharded structure")


#: Refused on a sharded structure (ConfigurationError): what has no meaning across shards.
unsharded = _routing("unsharded", _unsharded)


def ranked(order: Callable[[Any], SupportsRichComparison]) -> Callable[[_F], _F]:
    """Run a listing (its first argument the most rows, ``limit`` or ``top``) on every shard;
    answer the first of all their rows in ``order``."""
    # ``order``'s row is untyped: its lambdas (one per listing's row type) cannot be typed.

    def route(
        method: Callable[..., Iterable[_R]], self: Split, *args: int, **kwargs: int
    ) -> list[_R]:
        bound = list(inspect.signature(method).parameters.values())[1]
        most = args[0] if args else kwargs.get(bound.name, bound.default)
        rows = [row for shard in self.shards for row in method(shard, *args, **kwargs)]
        return sorted(rows, key=order)[:most]

    return _routing("ranked", route)


def _recorded(method: Callable[..., dict[str, object]], self: Split) -> dict[str, object]:
    return dict(method(self), shards=len(self.shards))


#: ``settings()`` as the registry records them: with ``shards`` when there are several.
recorded = _routing("recorded", _recorded)


# The sweep, and receipts of several shards


def pass_receipts(
    structure: Split, results: list[Receipt], groups: Mapping[int, list[Receipt]]
) -> list[Receipt]:
    """Calls stored on several shards ask for at most one drain job now and one at the
    earliest wake-up, as one structure's would: one drain job sweeps every shard. Shards
    whose later wake-up claim is not passed on release it (the earliest job re-plans them)."""
    if len(groups) == 1:
        return results
    wakes = [(r.wake_in, i) for i, rs in groups.items() for r in rs if r.wake_in is not None]
    for _, i in sorted(wakes)[1:]:
        structure.shards[i].release_drain(flag=False, wake=True)
    drain = any(r.drain_needed for r in results)
    soonest = [r.wake_in for r in results if r.wake_in is not None]
    cleared = [dataclasses.replace(r, drain_needed=False, wake_in=None) for r in results]
    if cleared:
        cleared[0] = dataclasses.replace(
            cleared[0], drain_needed=drain, wake_in=min(soonest) if soonest else None
        )
    return cleared


def sweep(
    structure: Split, take: Callable[[Sharded], _E], has_work: Callable[[_E], bool]
) -> tuple[int | None, _E | None, list[tuple[int, _E]]]:
    """Ask shards in turn, from the one after the last that gave work, until one has work;
    returns (shard index, its answer, the empty answers of the shards asked before)."""
    structure.register_once()
    start, n = structure.next_shard, len(structure.shards)
    empties: list[tuple[int, _E]] = []
    for step in range(n):
        i = (start + step) % n
        answer = take(structure.shards[i])
        if has_work(answer):
            structure.next_shard = (i + 1) % n
            release_claims(structure, empties, keep=None)
            return i, answer, empties
        empties.append((i, answer))
    structure.next_shard = (start + 1) % n
    return None, None, empties


def release_claims(
    structure: Split, empties: Sequence[tuple[int, Empty]], keep: int | None
) -> None:
    """A shard whose empty answer claimed a scheduled drain job (``schedule``) that the
    caller is not told to send gets its claim released, so the next sweep plans it again."""
    for i, answer in empties:
        if answer.schedule and i != keep:
            structure.shards[i].release_drain(flag=False, wake=True)


def earliest(empties: Sequence[tuple[int, _E]]) -> tuple[int, _E] | None:
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


# Buckets


def key_shard(bucket: Split, key: str) -> int:
    """The shard of a key: the same in every process, so a key's rate is one bucket's."""
    return stable_hash(_check_key(key).encode()) % len(bucket.shards)


def call_shard(bucket: Split, call: EncodedCall, dedupe_id: str | None) -> int:
    """The shard a bucket call goes to (`spread`): its key's."""
    return key_shard(bucket, call[0])


def by_key(bucket: SplitBucket, key: str) -> tuple[LeakyBucket, str]:
    """The owner of a bucket key: its shard (`on_owner`), which sends a drain job (``resume``)
    through the logical bucket's ``drain_sender``."""
    shard = bucket.shards[key_shard(bucket, key)]
    shard.drain_sender = bucket.drain_sender
    return shard, key


def own_reservation(
    bucket: SplitBucket, reservation: Reservation | str
) -> tuple[LeakyBucket, Reservation | str]:
    """The shard a reservation belongs to, and the reservation as that shard knows it."""
    if isinstance(reservation, Reservation):
        if reservation.bucket not in ("", bucket.keys.base):
            raise ReservationError(
                f"reservation {reservation.id} belongs to {reservation.bucket}, "
                f"not {bucket.keys.base}"
            )
        i, inner = split_id(reservation.id, len(bucket.shards))
        shard = bucket.shards[i]
        return shard, dataclasses.replace(reservation, id=inner, bucket=shard.keys.base)
    i, inner = split_id(str(reservation), len(bucket.shards))
    return bucket.shards[i], inner


def has_reservation(poll: Dequeued) -> bool:
    return poll.reservation is not None


#: A key's rates, pause and figures live on the key's shard (`on_owner`).
on_key = on_owner(by_key)
#: A reservation is settled on the shard that holds it (`on_owner`).
on_reservation = on_owner(own_reservation)


def merge_dequeue(
    bucket: SplitBucket, i: int | None, poll: Dequeued | None, empties: list[tuple[int, Dequeued]]
) -> Dequeued:
    """The reservation of the shard that had an eligible key, its id naming the shard;
    otherwise the earliest shard's wait."""
    malformed = sum(p.malformed for _, p in empties)
    if poll is not None and poll.reservation is not None:
        reservation = dataclasses.replace(
            poll.reservation, id=f"{i}:{poll.reservation.id}", bucket=bucket.keys.base
        )
        return Dequeued(reservation, malformed=malformed + poll.malformed)
    first = earliest(empties)
    release_claims(bucket, empties, keep=None if first is None else first[0])
    if first is None:
        return Dequeued(malformed=malformed)
    return Dequeued(wait=first[1].wait, schedule=first[1].schedule, malformed=malformed)
