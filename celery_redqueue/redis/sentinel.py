"""Redis behind Sentinel: ``sentinel://`` URLs and their transport options, as kombu takes them
(docs/redis.md shows the settings). The client asks the sentinels for the master whenever it
opens a connection, so after a failover it finds the new master by itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict
from urllib.parse import unquote, urlsplit

import redis.sentinel

from ..errors import ConfigurationError

SENTINEL_SCHEME = "sentinel://"
#: The transport options redqueue reads (kombu's names); any other is an error.
TRANSPORT_OPTIONS = ("master_name", "min_other_sentinels", "sentinel_kwargs")
DEFAULT_PORT = 26379


class MasterOptions(TypedDict, total=False):
    """The master's connection options a ``sentinel://`` URL carries (its first part)."""

    db: int
    username: str
    password: str


def is_sentinel_url(url: object) -> bool:
    """True for a ``sentinel://`` URL (one or more sentinels separated by ``;``)."""
    return isinstance(url, str) and url.startswith(SENTINEL_SCHEME)


def parse_sentinel_url(url: str) -> tuple[list[tuple[str, int]], MasterOptions]:
    """Split a ``sentinel://`` URL into its sentinels and the master's connection options.

    Returns ``([(host, port), ...], {"db": ..., "username": ..., "password": ...})``; the
    master's options come from the first part, as in kombu.
    """
    sentinels: list[tuple[str, int]] = []
    master: MasterOptions = {}
    for number, part in enumerate(p for p in url.split(";") if p.strip()):
        part = part.strip()
        if not part.startswith(SENTINEL_SCHEME):
            raise ConfigurationError(
                f"redqueue_url: every ';'-separated part must be a sentinel:// URL, got {part!r}"
            )
        try:
            split = urlsplit(part)
            host, port = split.hostname, split.port or DEFAULT_PORT
        except ValueError as exc:
            raise ConfigurationError(f"redqueue_url: bad sentinel address {part!r}: {exc}") from exc
        if not host:
            raise ConfigurationError(f"redqueue_url: sentinel {part!r} has no host")
        sentinels.append((host, port))
        if number == 0:
            path = split.path.strip("/")
            if path and not path.isdigit():
                raise ConfigurationError(f"redqueue_url: database must be a number, got {path!r}")
            master["db"] = int(path or 0)
            if split.username:
                master["username"] = unquote(split.username)
            if split.password:
                master["password"] = unquote(split.password)
    if not sentinels:
        raise ConfigurationError(f"redqueue_url {url!r} names no sentinel")
    return sentinels, master


def sentinel_options(url: str, transport_options: object) -> dict[str, object]:
    """Check ``redqueue_transport_options`` for ``url``; returns the options the client needs.

    The result is hashable once its items are sorted (``sentinel_kwargs`` becomes a tuple of
    pairs), so clients can be cached per process and options.
    """
    if transport_options is None:
        transport_options = {}
    if not isinstance(transport_options, Mapping):
        raise ConfigurationError(
            f"redqueue_transport_options must be a dict, got {transport_options!r}"
        )
    options = dict(transport_options)
    unknown = sorted(set(options) - set(TRANSPORT_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"redqueue_transport_options: unknown option(s) {unknown}; redqueue reads "
            f"{list(TRANSPORT_OPTIONS)}"
        )
    if not is_sentinel_url(url):
        if options:
            raise ConfigurationError(
                "redqueue_transport_options is only read for sentinel:// URLs; "
                f"redqueue_url is {url!r}"
            )
        return {}
    parse_sentinel_url(url)
    name = options.get("master_name")
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            "a sentinel:// redqueue_url needs redqueue_transport_options = "
            "{'master_name': '<the name sentinels monitor>'}"
        )
    checked: dict[str, object] = {"master_name": name}
    others = options.get("min_other_sentinels", 0)
    if isinstance(others, bool) or not isinstance(others, int) or others < 0:
        raise ConfigurationError(f"min_other_sentinels must be an int >= 0, got {others!r}")
    if others:
        checked["min_other_sentinels"] = others
    kwargs = options.get("sentinel_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, Mapping):
            raise ConfigurationError(f"sentinel_kwargs must be a dict, got {kwargs!r}")
        checked["sentinel_kwargs"] = tuple(sorted(kwargs.items()))
    return checked


# The options' values are typed as redis-py types its ``**connection_kwargs``: they are whatever
# redis-py takes, besides the ones `sentinel_options()` checked, which are read back here.
def sentinel_client(url: str, options: Mapping[str, Any]) -> redis.Redis:
    """A client of the current master of ``options["master_name"]``, found through the
    sentinels of ``url``; the other ``options`` are redis-py connection options."""
    opts = dict(options)
    name = opts.pop("master_name", None)
    if not name:
        raise ConfigurationError("a sentinel:// URL needs the master_name transport option")
    others = int(opts.pop("min_other_sentinels", 0))
    sentinel_kwargs = dict(opts.pop("sentinel_kwargs", None) or ())
    sentinels, master = parse_sentinel_url(url)
    # Without sentinel_kwargs, redis-py gives the sentinels the socket_* options only.
    manager = redis.sentinel.Sentinel(
        sentinels,
        min_other_sentinels=others,
        sentinel_kwargs=sentinel_kwargs or None,
        **opts,
    )
    # redis-py leaves master_for unannotated; it returns an instance of its redis_class.
    client: redis.Redis = manager.master_for(name, **master, **opts)
    return client
