"""Warnings about the Redis server itself, for the dashboard's warnings panel and ``top``.

A small stand-in reading two things a queue's safety depends on: the eviction policy (anything
but ``noeviction`` lets Redis delete queued work to make room) and persistence (off means a
restart loses every queue). Servers that refuse ``CONFIG`` (managed services, ACLs) are skipped
quietly: the panel then shows what ``INFO`` alone can tell.

:func:`server_warnings` is the one entry point, so a fuller health check (data loss detection)
can replace it without touching its callers.
"""

from __future__ import annotations

from typing import Any

import redis


def _config(client: Any, name: str) -> str | None:
    """One ``CONFIG GET`` value, or None when the server refuses the command."""
    try:
        reply = client.config_get(name)
    except (redis.exceptions.ResponseError, redis.exceptions.NoPermissionError):
        return None
    value = reply.get(name) if isinstance(reply, dict) else None
    return value.decode() if isinstance(value, bytes) else value


def _info(client: Any) -> dict[str, Any]:
    try:
        return dict(client.info("persistence"))
    except (redis.exceptions.ResponseError, redis.exceptions.NoPermissionError):
        return {}


def server_warnings(client: Any) -> list[str]:
    """Plain-text warnings about how the server keeps (or may lose) queued work.

    Connection failures propagate (the caller reports Redis as unreachable); refusals of
    ``CONFIG``/``INFO`` just mean fewer checks.
    """
    found: list[str] = []
    policy = _config(client, "maxmemory-policy")
    if policy is not None and policy != "noeviction":
        found.append(
            f"maxmemory-policy is {policy}: when memory runs out Redis may evict queued work; "
            "set it to noeviction"
        )
    info = _info(client)
    save = _config(client, "save")
    aof = info.get("aof_enabled")
    if save is not None and not save.strip() and aof is not None and not int(aof):
        found.append(
            "persistence is off (no RDB snapshots, no AOF): a Redis restart loses every queue"
        )
    if info.get("rdb_last_bgsave_status", "ok") != "ok":
        found.append("the last RDB snapshot failed: a restart may lose recent work")
    if info.get("aof_last_write_status", "ok") != "ok":
        found.append("the last AOF write failed: a restart may lose recent work")
    if info.get("loading", 0):
        found.append("Redis is loading its data set: figures may be incomplete")
    return found
