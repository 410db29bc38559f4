"""Redis clients: built from a URL, one per process and URL, with timeouts by default, and
every redis-py error translated into the package's own (see `redis_errors()`)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TypeAlias

import redis
import redis.cluster

from ..errors import (
    ConfigurationError,
    CorruptDataError,
    RedisCommandError,
    RedisFullError,
    RedisUnavailableError,
    RedQueueError,
)
from .sentinel import is_sentinel_url, sentinel_client

#: A client the package talks to Redis through: a plain or Sentinel master client
#: (``redis.Redis``), or a cluster's (``RedisCluster``, see `call.is_cluster()`).
Client: TypeAlias = redis.Redis | redis.cluster.RedisCluster

_clients: dict[tuple[int, str, tuple[tuple[str, object], ...]], Client] = {}
_lock = threading.Lock()

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")

#: Seconds a command waits for Redis's answer, and a connection for its handshake, unless
#: ``redqueue_redis_options`` says otherwise. Without them (redis-py < 8 has none by default) a
#: stalled Redis that accepts connections but never answers blocks a call forever. Every script
#: is bounded and answers in milliseconds, so 5 s only ever trips on a sick server. Blocking
#: commands (a lease's BLPOP) block for less than this.
DEFAULT_TIMEOUTS: dict[str, float] = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}


def make_client(url: str, options: Mapping[str, object] | None = None) -> Client:
    """Build a new client for ``url``; ``redis+cluster://`` URLs give a RedisCluster,
    ``sentinel://`` URLs a client of the master (see `sentinel`).

    ``options`` go to redis-py's ``from_url`` over `DEFAULT_TIMEOUTS` (pass
    ``socket_timeout=None`` to wait forever).
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"redqueue_url must be a redis:// URL, got {url!r}")
    opts = {**DEFAULT_TIMEOUTS, **(options or {})}
    if is_sentinel_url(url):
        return sentinel_client(url, opts)
    try:
        if url.startswith(CLUSTER_SCHEMES):
            plain = url.replace("+cluster", "", 1)
            return redis.cluster.RedisCluster.from_url(plain, **opts)
        return redis.Redis.from_url(url, **opts)
    except ValueError as exc:
        raise ConfigurationError(f"redqueue_url {url!r} is not usable: {exc}") from exc


def get_client(url: str, options: Mapping[str, object] | None = None) -> Client:
    """Return this process's client for ``url``, creating it once.

    The cache is keyed by process id too: a prefork child must not share the parent's sockets.
    """
    opts = tuple(sorted((options or {}).items()))
    key = (os.getpid(), url, opts)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = make_client(url, dict(opts))
    return client


#: redis-py errors that mean "Redis cannot serve now" rather than "Redis said no".
_UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,  # also loading, auth, too many clients
    redis.exceptions.TimeoutError,
    redis.exceptions.InvalidResponse,  # the protocol stream broke (a proxy, a half-read reply)
    redis.exceptions.ReadOnlyError,  # a replica, e.g. during a failover
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
)

#: Redis's OOM text: inside a script Redis 6 reports it as a script error, not as OOM.
#: A script's check before its first write (lua/check_keys.lua): "CORRUPT <key...>: <what>";
#: Redis 7 appends " script: <sha>, on @user_script:<line>." to a script's error.
_CORRUPT = re.compile(r"CORRUPT (.*?)(?: script: \w+, on @user_script:\d+\.)?$", re.S)
_OOM_TEXT = "command not allowed when used memory > 'maxmemory'"


def translate_error(exc: Exception, action: str) -> RedQueueError:
    """The package's error for a redis-py error met while doing ``action``."""
    text = str(exc.args[0]) if exc.args else str(exc)
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or _OOM_TEXT in text:
        return RedisFullError(
            f"Redis is full (maxmemory, noeviction) while {action}: nothing was written; "
            f"raise maxmemory or let consumers catch up ({text})"
        )
    if isinstance(exc, redis.exceptions.TimeoutError):
        return RedisUnavailableError(
            f"Redis did not answer in time while {action} (stalled or overloaded; a write may "
            f"or may not have been applied): {text}"
        )
    if isinstance(exc, _UNAVAILABLE):
        return RedisUnavailableError(f"Redis unreachable while {action}: {text}")
    corrupt = _CORRUPT.search(text)
    if corrupt:
        return CorruptDataError(f"{action}: {corrupt.group(1)}; nothing was written")
    return RedisCommandError(f"Redis refused {action}: {type(exc).__name__}: {text}")


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Turn every redis-py error into a RedQueueError naming the action, the cause chained.

    Unreachable, stalled, loading or read-only Redis:
    [`RedisUnavailableError`][celery_redqueue.RedisUnavailableError]; at maxmemory:
    `RedisFullError`; anything else Redis refuses (``WRONGTYPE``, a script error):
    `RedisCommandError`.
    """
    try:
        yield
    except redis.exceptions.RedisError as exc:
        raise translate_error(exc, action) from exc


def server_time(client: Client) -> float:
    """The Redis server's clock, seconds since the epoch (a cluster client: its first node's)."""
    clock = client.time()
    sec, usec = next(iter(clock.values())) if isinstance(clock, dict) else clock
    return float(sec) + float(usec) / 1e6
