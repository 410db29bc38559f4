"""The package's exception hierarchy: everything raised on purpose derives from RedQueueError."""

from __future__ import annotations


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
