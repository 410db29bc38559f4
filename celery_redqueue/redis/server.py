"""What in the Redis server's own settings can lose calls: the one `server_warnings()` that
figures, the dashboard, ``top``, the CLI and the worker's start-up check all show
(docs/failure-modes.md, "Configuration that loses data"). A server that refuses CONFIG or INFO
is skipped quietly, check by check; answers are cached a minute per client (``refresh=True``
reads again).
"""

from __future__ import annotations

import threading
import time

import redis

from .client import Client, redis_errors

#: Seconds a client's server warnings are reused before CONFIG/INFO are read again.
WARNINGS_TTL = 60.0

_lock = threading.Lock()
_warnings: dict[str, tuple[float, tuple[str, ...]]] = {}
_REFUSED = (redis.exceptions.ResponseError, redis.exceptions.NoPermissionError)


def server_warnings(client: Client, *, refresh: bool = False) -> tuple[str, ...]:
    """Plain-text warnings about how the server keeps (or may lose) stored calls; empty when
    all is well or the server refuses to say. Raises RedisUnavailableError when Redis cannot
    be reached (the caller reports it as unreachable)."""
    key = repr(client)  # redis-py's repr names host, port and db: servers told apart
    now = time.monotonic()
    cached = _warnings.get(key)
    if cached is not None and not refresh and now - cached[0] < WARNINGS_TTL:
        return cached[1]
    with redis_errors("reading the server's settings"):
        found = tuple(_read_warnings(client))
    with _lock:
        _warnings[key] = (now, found)
    return found


def _read_warnings(client: Client) -> list[str]:
    found: list[str] = []
    policy = _config(client, "maxmemory-policy")
    if policy is not None and policy != "noeviction":
        found.append(
            f"Redis maxmemory-policy is {policy}: when full, Redis deletes keys and structures "
            "lose calls silently (phantom depth, wedged keys); set noeviction"
        )
    info = _info(client)
    save = _config(client, "save")
    aof = info.get("aof_enabled")
    if save is not None and not save.strip() and aof is not None and not int(aof):
        found.append(
            "Redis persistence is off (no AOF, no RDB snapshots): a restart loses every stored "
            "call; set appendonly yes"
        )
    if info.get("rdb_last_bgsave_status", "ok") != "ok":
        found.append("the last RDB snapshot failed: a restart may lose recent work")
    if info.get("aof_last_write_status", "ok") != "ok":
        found.append("the last AOF write failed: a restart may lose recent work")
    if info.get("loading", 0):
        found.append("Redis is loading its data set: figures may be incomplete")
    return found


def _config(client: Client, name: str) -> str | None:
    """One ``CONFIG GET`` value, or None when the server refuses the command."""
    try:
        reply = client.config_get(name)
    except _REFUSED:
        return None
    value = reply.get(name) if isinstance(reply, dict) else None
    return value.decode() if isinstance(value, bytes) else value


def _info(client: Client) -> dict[str, str | int | float]:
    """One INFO section's fields, as redis-py parses them (numbers as int or float)."""
    try:
        return dict(client.info("persistence"))
    except _REFUSED:
        return {}
