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


def check_seconds(name: str, value: Any, *, positive: bool = False) -> float:
    """Validate a duration option, raising ConfigurationError that names it."""
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if bad or value < 0 or (positive and value == 0):
        what = "positive seconds" if positive else "seconds >= 0"
        raise ConfigurationError(f"{name} must be {what}, got {value!r}")
    return float(value)
