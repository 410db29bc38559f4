"""The package's exception hierarchy: everything raised on purpose derives from RedQueueError."""

from __future__ import annotations

from typing import Any


class RedQueueError(Exception):
    """Base class of every error celery-redqueue raises on purpose."""


class ConfigurationError(RedQueueError, ValueError):
    """A setting or task option is missing or invalid; the message names it."""


class SerializationError(RedQueueError, ValueError):
    """A call's arguments cannot be serialized (nothing was stored) or a payload cannot be read."""


class RedisUnavailableError(RedQueueError, ConnectionError):
    """The Redis server cannot be reached; the original redis-py error is chained."""


class ReservationError(RedQueueError, ValueError):
    """A reservation or lease id is malformed or belongs to another structure."""


class PickleWarning(UserWarning):
    """Pickle was chosen as serializer: loading pickles from a shared Redis can execute code."""


class NoFreeResourceError(RedQueueError):
    """Every resource of the pool is leased (or the pool has none)."""


class UndecodableItemsError(SerializationError):
    """Popped members could not be deserialized (were they written with another serializer?).

    The pop already removed them from Redis, so nothing is lost with the exception: ``items``
    holds what was decoded, in order, and ``raw`` the members that were not.
    """

    def __init__(self, message: str, items: list[Any], raw: list[bytes]) -> None:
        super().__init__(message)
        self.items = items
        self.raw = raw


class RedisServerNotFound(RedQueueError):
    """No usable redis-server binary was found."""


class ReceiptNotReadyError(RedQueueError):
    """A buffered call's receipt was read before its buffer stored it (or it was discarded)."""
