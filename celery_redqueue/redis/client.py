"""Redis clients: built from a URL, one per process and URL, translated errors."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import redis
import redis.cluster

from ..errors import ConfigurationError, RedisUnavailableError
from .sentinel import is_sentinel_url, sentinel_client

_clients: dict[tuple[int, str, tuple[tuple[str, Any], ...]], Any] = {}
_lock = threading.Lock()

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def make_client(url: str, options: Mapping[str, Any] | None = None) -> Any:
    """Build a new client for ``url``; ``redis+cluster://`` URLs give a RedisCluster,
    ``sentinel://`` URLs a client of the master (see :mod:`.sentinel`)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"redqueue_url must be a redis:// URL, got {url!r}")
    opts = dict(options or {})
    if is_sentinel_url(url):
        return sentinel_client(url, opts)
    try:
        if url.startswith(CLUSTER_SCHEMES):
            plain = url.replace("+cluster", "", 1)
            return redis.cluster.RedisCluster.from_url(plain, **opts)
        return redis.Redis.from_url(url, **opts)
    except ValueError as exc:
        raise ConfigurationError(f"redqueue_url {url!r} is not usable: {exc}") from exc


def get_client(url: str, options: Mapping[str, Any] | None = None) -> Any:
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


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Turn redis-py connection failures into RedisUnavailableError naming the action."""
    try:
        yield
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise RedisUnavailableError(f"Redis unreachable while {action}: {exc}") from exc
