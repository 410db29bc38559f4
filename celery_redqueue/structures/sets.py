"""Sorted sets shared by many producers and consumers, in the style of ``redset``: one Redis
sorted set each (``<prefix>:{set:<name>}:items``), every pop one atomic server-side step, time
from the server's ``TIME``. docs/guides/sets.md explains them for users.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError, UndecodableItemsError
from ..redis.client import redis_errors
from ..redis.keys import DEFAULT_PREFIX, StructureKeys
from ..redis.lua import script
from ..redis.serializers import (
    JSONSerializer,
    KombuSerializer,
    Serializer,
    get_serializer,
    to_bytes,
)
from ..validation import count

#: ``scorer(item) -> float``; the item is untyped: a scorer is written for the set's own
#: items (``len(url)``), which the set does not know.
Scorer = Callable[[Any], float]


def _check_score(score: object, what: str = "score") -> float:
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise ConfigurationError(f"{what} must be a number, got {score!r}")
    value = float(score)
    if math.isnan(value):
        raise ConfigurationError(f"{what} must not be NaN")
    return value


class StrSerializer:
    """``redset``'s default: an item is stored as ``str(item)`` (bytes as they are) and comes
    back as text, so ``add(1)`` then ``pop()`` gives ``"1"``. Chosen with ``serializer="str"``."""

    name = "str"

    def dumps(self, obj: object) -> bytes | str:
        return obj if isinstance(obj, bytes | str) else str(obj)

    def loads(self, data: str) -> str:
        return data


def _set_serializer(spec: str | Serializer | None) -> Serializer:
    return StrSerializer() if spec == "str" else get_serializer(spec)


class SortedSet:
    """A Redis sorted set of serialized items, lowest score first.

    Args:
        client: a ``redis.Redis`` (or ``RedisCluster``) client.
        name: the set's name; together with ``prefix`` it names the Redis key.
        scorer: ``scorer(item) -> float``, used by ``add`` when no score is given.
        serializer: ``"json"`` (default), ``"str"`` (``redset``'s default: ``str(item)`` in,
            text out), another kombu serializer name, or any object with
            ``dumps(obj) -> bytes | str`` and ``loads(str) -> obj`` (it receives text, as in
            ``redset``; a member that is not UTF-8 is reported as undecodable).
        prefix: namespace of the key.

    Example:

        ranking = SortedSet(client, "crawl-frontier", scorer=lambda url: len(url))
        ranking.add("https://example.com/")
        ranking.add("https://example.com/a", score=0)   # 0 is a real score
        ranking.pop()   # -> "https://example.com/a"
    """

    kind = "set"

    def __init__(
        self,
        client: Any,
        name: str,
        scorer: Scorer | None = None,
        serializer: str | Serializer | None = None,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        if scorer is not None and not callable(scorer):
            raise ConfigurationError(f"scorer must be callable, got {scorer!r}")
        # Untyped, not Client: its replies are read as bytes (see catalog.Registered.client).
        self.client = client
        self.name = name
        self.serializer = _set_serializer(serializer)
        # Our own serializers read bytes; any other object gets text, as redset gave it.
        self._loads_text = not isinstance(self.serializer, JSONSerializer | KombuSerializer)
        self.scorer = scorer
        self.keys = StructureKeys(prefix, self.kind, name)
        self.key = self.keys("items")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    # Encoding

    def encode(self, item: object) -> bytes:
        """The member that stands for ``item`` in Redis (raises SerializationError)."""
        return to_bytes(self.serializer.dumps(item))

    def _decode_all(self, members: list[bytes]) -> list[object]:
        items: list[object] = []
        raw: list[bytes] = []
        for member in members:
            try:
                data = member.decode() if self._loads_text else member
                items.append(self.serializer.loads(data))
            except Exception:
                raw.append(member)
        if raw:
            raise UndecodableItemsError(
                f"{len(raw)} member(s) of {self.key} could not be deserialized "
                f"(first: {raw[0][:80]!r})",
                items,
                raw,
            )
        return items

    # Adding and removing

    def add(self, item: object, score: float | None = None) -> float:
        """Add ``item`` (or update its score if present); returns the score it was given.

        Without ``score`` the set's scorer decides, else the default score (0 here, the server's
        time in time-based sets). Raises SerializationError or ConfigurationError, storing
        nothing.
        """
        member = self.encode(item)
        if score is None and self.scorer is not None:
            score = _check_score(self.scorer(item), "scorer result")
        if score is None:
            return self._add_default(member)
        value = _check_score(score)
        with redis_errors(f"adding to {self.key}"):
            self.client.zadd(self.key, {member: value})
        return value

    def _add_default(self, member: bytes) -> float:
        with redis_errors(f"adding to {self.key}"):
            self.client.zadd(self.key, {member: 0.0})
        return 0.0

    def discard(self, item: object) -> bool:
        """Remove ``item`` if present; returns whether it was."""
        with redis_errors(f"removing from {self.key}"):
            return bool(self.client.zrem(self.key, self.encode(item)))

    def clear(self) -> bool:
        """Delete every item (this set's key only); returns whether there was anything."""
        with redis_errors(f"clearing {self.key}"):
            return bool(self.client.delete(self.key))

    # Reading

    def __len__(self) -> int:
        with redis_errors(f"counting {self.key}"):
            return int(self.client.zcard(self.key))

    def __contains__(self, item: object) -> bool:
        return self.score(item) is not None

    def score(self, item: object) -> float | None:
        """The score of ``item``, or None when it is not in the set."""
        with redis_errors(f"reading {self.key}"):
            value = self.client.zscore(self.key, self.encode(item))
        return None if value is None else float(value)

    def peek(self, position: int = 0) -> object:
        """The item at ``position`` (0 is the next one ``pop`` would return), left in place.

        Raises KeyError when there is no item at that position.
        """
        count("position", position)
        members = self._peek_members(position)
        if not members:
            raise KeyError(f"{self.key} has no item at position {position}")
        return self._decode_all(members)[0]

    def _peek_members(self, position: int) -> list[bytes]:
        with redis_errors(f"reading {self.key}"):
            return list(self.client.zrange(self.key, position, position))

    def peek_score(self) -> float | None:
        """The lowest score in the set, or None when it is empty."""
        with redis_errors(f"reading {self.key}"):
            head = self.client.zrange(self.key, 0, 0, withscores=True)
        return float(head[0][1]) if head else None

    # Consuming

    def pop(self) -> object:
        """Atomically remove and return the next item; raises KeyError when there is none."""
        items = self.take(1)
        if not items:
            raise KeyError(f"{self.key} has no item to pop")
        return items[0]

    def take(self, n: int) -> list[object]:
        """Atomically remove and return up to ``n`` items, lowest score first; ``n <= 0``
        takes nothing and returns ``[]`` (as ``redset``).

        Raises UndecodableItemsError (carrying every popped item) if a member cannot be read.
        """
        if isinstance(n, int) and not isinstance(n, bool) and n <= 0:
            return []
        count("take count", n)
        return self._decode_all(self._pop_members(n))

    def _pop_members(self, n: int) -> list[bytes]:
        with redis_errors(f"popping from {self.key}"):
            popped = self.client.zpopmin(self.key, n)
        return [member for member, _ in popped]


class TimeSortedSet(SortedSet):
    """A sorted set scored by the time each item was added: first in, first out.

    The default score is the Redis server's clock (``TIME``) at the moment of the add, so
    producers on many machines agree on the order whatever their own clocks say.
    """

    def _add_default(self, member: bytes) -> float:
        return self._add_at_server_time(member, 0.0)

    def _add_at_server_time(self, member: bytes, delay: float) -> float:
        score = script("set_add_now")(self.client, [self.key], [repr(delay), member])
        return float(score)


class ScheduledSet(TimeSortedSet):
    """A time-sorted set whose items become available at their score (a Unix timestamp).

    ``pop``, ``take`` and ``peek`` only see items that are due by the Redis server's clock;
    ``len()`` counts every item, ``available()`` the due ones, and ``peek_score()`` tells when
    the earliest item is (or was) due, which is how long a consumer with nothing to do may sleep.

    Example:

        later = ScheduledSet(client, "cancel-unpaid")
        later.add({"order": 7}, delay=900)        # due 15 minutes from now (server clock)
        later.add({"order": 8}, score=1_900_000_000)
        later.take(10)                            # [] until something is due
    """

    def add(self, item: object, score: float | None = None, *, delay: float | None = None) -> float:
        """Add ``item``, due at ``score`` (Unix seconds) or ``delay`` seconds from now.

        ``delay`` is measured on the Redis server's clock. With neither, the scorer decides, else
        the item is due at once. Returns the score (the due time) the item was given.
        """
        if delay is None:
            return super().add(item, score)
        if score is not None:
            raise ConfigurationError("pass either score= or delay=, not both")
        delay = _check_score(delay, "delay")
        if math.isinf(delay):
            raise ConfigurationError("delay must be finite")
        return self._add_at_server_time(self.encode(item), delay)

    def available(self) -> int:
        """How many items are due now (by the server's clock)."""
        return int(script("set_count_due")(self.client, [self.key], []))

    def _peek_members(self, position: int) -> list[bytes]:
        return list(script("set_peek_due")(self.client, [self.key], [position]))

    def _pop_members(self, n: int) -> list[bytes]:
        return list(script("set_pop_due")(self.client, [self.key], [n]))
