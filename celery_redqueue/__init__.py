"""celery-redqueue: Redis-backed queueing patterns for Celery."""

from .errors import (
    ConfigurationError,
    PickleWarning,
    RedisUnavailableError,
    RedQueueError,
    ReservationError,
    SerializationError,
)
from .pool import AddResult, CappedPool, PoolBatch, PoolItem, PoolStats

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "CappedPool",
    "ConfigurationError",
    "PickleWarning",
    "PoolBatch",
    "PoolItem",
    "PoolStats",
    "RedQueueError",
    "RedisUnavailableError",
    "ReservationError",
    "SerializationError",
    "__version__",
]
