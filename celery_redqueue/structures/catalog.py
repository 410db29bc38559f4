"""Where every structure of a prefix is listed, so the reaper, the figures and the CLI can find
all pools and buckets without importing user code.

A structure registers itself the first time a process uses it: its ``kind:name`` goes into the
set ``<prefix>:registry`` and its settings into ``<prefix>:{<kind>:<name>}:meta``.
"""

from __future__ import annotations

import json
from typing import Any

from ..redis.client import redis_errors
from ..redis.keys import StructureKeys, normalize_prefix, registry_key

#: Every structure kind by name; a kind adds itself when its class is defined.
KINDS: dict[str, type[Any]] = {}


def add_kind(kind: str, cls: type[Any]) -> None:
    """Make ``kind`` reopenable from the registry (called by the structure base)."""
    KINDS[kind] = cls


def register(client: Any, keys: StructureKeys, settings: dict[str, Any]) -> None:
    """Record a structure and its settings (idempotent; one round trip)."""
    with redis_errors(f"registering {keys.base}"):
        pipe = client.pipeline(transaction=False)
        pipe.sadd(registry_key(keys.prefix), f"{keys.kind}:{keys.name}")
        pipe.set(keys("meta"), json.dumps(settings, sort_keys=True))
        pipe.execute()


def registered(client: Any, prefix: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every registered structure of ``prefix`` as ``(kind, name, settings)``, sorted."""
    prefix = normalize_prefix(prefix)
    with redis_errors("reading the registry"):
        members = sorted(m.decode() for m in client.smembers(registry_key(prefix)))
        found = []
        for member in members:
            kind, _, name = member.partition(":")
            raw = client.get(StructureKeys(prefix, kind, name)("meta"))
            found.append((kind, name, json.loads(raw) if raw else {}))
    return found


def open_structure(
    client: Any, prefix: str, kind: str, name: str, settings: dict[str, Any]
) -> Any | None:
    """Rebuild a registered structure from its recorded settings (None for an unknown kind)."""
    cls = KINDS.get(kind)
    if cls is None:
        return None
    return cls(client, name, prefix=prefix, **settings)
