"""Where every structure of a prefix is listed, so the reaper, the figures and the CLI can find
all pools and buckets without importing user code.

A structure registers itself the first time a process uses it: its ``kind:name`` goes into the
set ``<prefix>:registry`` and its settings into ``<prefix>:{<kind>:<name>}:meta``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..redis.client import redis_errors
from ..redis.keys import StructureKeys, normalize_prefix, registry_key

if TYPE_CHECKING:
    from ..redis.client import Client
    from .base import Structure

#: Every structure kind by name; a kind adds itself when its class is defined.
KINDS: dict[str, Callable[..., Structure]] = {}


def add_kind(kind: str, cls: Callable[..., Structure]) -> None:
    """Make ``kind`` reopenable from the registry (called by the structure base)."""
    KINDS[kind] = cls


def register(client: Client, keys: StructureKeys, settings: dict[str, object]) -> None:
    """Record a structure and its settings (idempotent; one round trip)."""
    with redis_errors(f"registering {keys.base}"):
        pipe = client.pipeline(transaction=False)
        pipe.sadd(registry_key(keys.prefix), f"{keys.kind}:{keys.name}")
        pipe.set(keys("meta"), json.dumps(settings, sort_keys=True))
        pipe.execute()


class Registered:
    """The one registration path of every structure (pools, buckets, streams, leased resources):
    the first script call of a process records the structure and its settings,
    so the reaper and the operators' tools find it without importing user code.

    ``register=False`` at construction means "never record it": a shard (the registry lists its
    logical structure), or a structure a reader opened from the registry (reading must not
    write).
    """

    # redis-py types replies as ``bytes | str`` (decoding is a client option): the readers of a
    # structure's client, here and in ops/, rely on the bytes this package's clients answer.
    client: Any
    keys: StructureKeys
    _registered: bool = False

    def settings(self) -> dict[str, object]:
        """What another process needs to open this structure (the registry keeps it)."""
        raise NotImplementedError

    def register_once(self) -> None:
        """Record the structure in the registry, once per process and structure."""
        if not self._registered:
            register(self.client, self.keys, self.settings())
            self._registered = True


@dataclass(frozen=True)
class Entry:
    """One registered structure as stored: its settings not decoded yet, so that one
    unreadable entry does not hide the others."""

    kind: str
    name: str
    raw_settings: bytes | None


def registry_entries(client: Any, prefix: str) -> list[Entry]:
    """Every registered structure of ``prefix``, sorted by ``kind:name``."""
    # Untyped, not Client: the members are read as bytes (see Registered.client).
    prefix = normalize_prefix(prefix)
    with redis_errors("reading the registry"):
        members = sorted(m.decode(errors="replace") for m in client.smembers(registry_key(prefix)))
        found = []
        for member in members:
            kind, _, name = member.partition(":")
            raw = client.get(StructureKeys(prefix, kind, name)("meta"))
            found.append(Entry(kind, name, raw))
    return found


def decode_settings(entry: Entry) -> dict[str, object]:
    """An entry's recorded settings; ConfigurationError (naming it) when they are unreadable."""
    if entry.raw_settings is None:
        return {}
    try:
        settings = json.loads(entry.raw_settings)
    except (ValueError, RecursionError) as exc:
        raise ConfigurationError(
            f"settings of {entry.kind}:{entry.name} are not readable JSON: {exc}"
        ) from exc
    if not isinstance(settings, dict):
        raise ConfigurationError(
            f"settings of {entry.kind}:{entry.name} are not a JSON object: {settings!r}"
        )
    return settings


def registered(client: Client, prefix: str) -> list[tuple[str, str, dict[str, object]]]:
    """Every registered structure of ``prefix`` as ``(kind, name, settings)``, sorted.

    Raises ConfigurationError when an entry's settings are unreadable; callers that must carry
    on past one bad entry use `registry_entries()` and `open_entry()`.
    """
    return [(e.kind, e.name, decode_settings(e)) for e in registry_entries(client, prefix)]


def open_structure(
    client: Client, prefix: str, kind: str, name: str, settings: dict[str, object]
) -> Any | None:
    """Rebuild a registered structure from its recorded settings (a sharded one's name its
    ``shards``); None for an unknown kind."""
    # Untyped: a reader (ops/reading.py) holds the kind's own class (a pool, bucket or stream),
    # which KINDS, filled by the Structure base for every subclass, cannot name.
    cls = KINDS.get(kind)
    if cls is None:
        return None
    return cls(client, name, prefix=prefix, **settings)


def open_entry(client: Client, prefix: str, entry: Entry) -> Structure | None:
    """Rebuild one registry entry (None for an unknown kind).

    Raises a RedQueueError naming the entry when its settings are unreadable or refused.
    """
    if entry.kind not in KINDS:
        return None
    settings = decode_settings(entry)
    try:
        return open_structure(client, prefix, entry.kind, entry.name, settings)
    except TypeError as exc:  # a setting this version does not know
        raise ConfigurationError(
            f"settings of {entry.kind}:{entry.name} do not fit this version: {exc}"
        ) from exc
