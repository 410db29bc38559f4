"""The package's exception hierarchy: everything raised on purpose derives from RedQueueError."""

from __future__ import annotations

from typing import Any


class RedQueueError(Exception):
    """Base class of every error celery-redqueue raises on purpose."""


class ConfigurationError(RedQueueError, ValueError):
    """A setting or task option is missing or invalid; the message names it."""


class SerializationError(RedQueueError, ValueError):
    """A call's arguments cannot be serialized (nothing was stored) or a payload cannot be read."""


class InvalidArgumentError(RedQueueError, ValueError):
    """A call's argument (``countdown``, ``eta``, ...) is invalid; nothing was stored."""


class RedisUnavailableError(RedQueueError, ConnectionError):
    """The Redis server cannot be reached, did not answer in time (a stalled or overloaded
    server), is loading its data, or is a read-only replica; the redis-py error is chained.

    After a timeout, a write may or may not have been applied: Redis may have run it and
    failed to answer.
    """


class RedisCommandError(RedQueueError):
    """Redis refused a command or a script failed (``WRONGTYPE`` on a key another program
    wrote, a script error, ...); the redis-py error is chained."""


class RedisFullError(RedisCommandError):
    """Redis is at ``maxmemory`` under ``noeviction`` and refused a write.

    Nothing of the call was written (Redis refuses a script before its first write, and every
    change is one script); reads, pops, acks and the reaper still work, which is how a full
    Redis drains. Raise ``maxmemory``, or let consumers catch up.
    """


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


class CorruptDataError(RedQueueError, ValueError):
    """A structure's stored field cannot be read (another program wrote it, or it was
    corrupted); the message names the structure's key and the field."""
