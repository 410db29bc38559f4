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
from .tasks import DrainSummary, PoolCall, PoolTask, pool_task

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "CappedPool",
    "ConfigurationError",
    "DrainSummary",
    "PickleWarning",
    "PoolBatch",
    "PoolCall",
    "PoolItem",
    "PoolStats",
    "PoolTask",
    "RedQueueError",
    "RedisUnavailableError",
    "ReservationError",
    "SerializationError",
    "__version__",
    "pool_task",
]
