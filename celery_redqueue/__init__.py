"""celery-redqueue: Redis-backed queueing patterns for Celery."""

from .bucket import (
    BucketStats,
    EnqueueResult,
    KeyStats,
    LeakyBucket,
    Poll,
    ReapResult,
    Reservation,
    parse_rate,
)
from .deadletters import DeadLetter
from .drain import DrainSummary
from .errors import (
    ConfigurationError,
    PickleWarning,
    RedisUnavailableError,
    RedQueueError,
    ReservationError,
    SerializationError,
)
from .figures import Figures
from .lease_tasks import LeaseTask, lease_task, resource_pool
from .leases import Lease, LeaseKeeper, LeaseStats, NoFreeResourceError, ResourcePool
from .pool import AddResult, CappedPool, PoolBatch, PoolItem, PoolStats
from .sets import ScheduledSet, SortedSet, TimeSortedSet, UndecodableItemsError
from .tasks import BucketTask, PoolCall, PoolTask, bucket_task, pool_task

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "BucketStats",
    "BucketTask",
    "CappedPool",
    "ConfigurationError",
    "DeadLetter",
    "DrainSummary",
    "EnqueueResult",
    "Figures",
    "KeyStats",
    "LeakyBucket",
    "Lease",
    "LeaseKeeper",
    "LeaseStats",
    "LeaseTask",
    "NoFreeResourceError",
    "PickleWarning",
    "Poll",
    "PoolBatch",
    "PoolCall",
    "PoolItem",
    "PoolStats",
    "PoolTask",
    "ReapResult",
    "RedQueueError",
    "RedisUnavailableError",
    "Reservation",
    "ReservationError",
    "ResourcePool",
    "ScheduledSet",
    "SerializationError",
    "SortedSet",
    "TimeSortedSet",
    "UndecodableItemsError",
    "__version__",
    "bucket_task",
    "lease_task",
    "parse_rate",
    "pool_task",
    "resource_pool",
]
