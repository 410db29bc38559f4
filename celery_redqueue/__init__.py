"""celery-redqueue: Redis-backed queueing patterns for Celery.

Where things are (arrows point down: each layer uses only the layers below it):

- `celery_redqueue.ops`: operator tools (``celery redqueue ...`` CLI)
- `celery_redqueue.tasks`: the Celery glue (PoolTask, BucketTask, StreamTask, LeaseTask,
  decorators, drain and reaper jobs, the app's ``redqueue_*`` settings)
- `celery_redqueue.structures`: Redis structures that know nothing of Celery (CappedPool,
  LeakyBucket, EventStream, LeasedResources, sorted sets, figures, the registry)
- `celery_redqueue.redis`: the Redis layer (client, key names, Lua loader, serializers);
  the scripts themselves are in ``celery_redqueue/lua/``
- `celery_redqueue.errors` and `celery_redqueue.validation`: every exception, and the
  checks of option values, used by all layers
- `celery_redqueue.testing`: the embedded Redis server and the pytest plugin
"""

import importlib
from typing import TYPE_CHECKING

from .errors import (
    BrokerConfigurationError,
    CallLostError,
    CallRefusedError,
    ConfigurationError,
    CorruptDataError,
    InvalidArgumentError,
    KeyBackoff,
    NoFreeResourceError,
    PickleWarning,
    ReceiptNotReadyError,
    RedisUnavailableError,
    RedQueueError,
    ReplyLostError,
    ReservationError,
    SerializationError,
    UndecodableItemsError,
    UniqueLockedError,
    retry_after,
)

if TYPE_CHECKING:
    from .redis.serializers import Serializer
    from .structures.bucket import (
        BucketStats,
        Dequeued,
        KeyStats,
        LeakyBucket,
        Reservation,
        parse_rate,
    )
    from .structures.deadletters import DeadLetter
    from .structures.figures import Figures
    from .structures.lease_keeper import LeaseKeeper
    from .structures.leases import Lease, LeasedResources, LeaseStats
    from .structures.pool import CappedPool, PoolBatch, PoolItem, PoolStats
    from .structures.receipts import ReapResult, Receipt
    from .structures.sets import ScheduledSet, SortedSet, TimeSortedSet
    from .structures.streams import AckResult, EventStream, GroupFigures, StreamEvent, StreamRead
    from .structures.unique import UniqueLocks, UniqueStats
    from .tasks import (
        BucketTask,
        PoolCall,
        PoolTask,
        StreamTask,
        bucket_task,
        pool_task,
        stream_task,
    )
    from .tasks.beat import DrainSummary
    from .tasks.buffer import BufferedReceipt, CallBuffer, buffer
    from .tasks.lease import LeaseTask, lease_task, leased_resources
    from .tasks.stream import publish
    from .tasks.unique import unique

__version__ = "0.2.0.dev0"

#: Where each public name lives, imported on first use (PEP 562): ``import celery_redqueue``
#: loads the errors only; the structures, the Celery glue (and Celery) come with the first name
#: that needs them, and the worker-only modules (continuous consumer, watchdog, tracing) only
#: in a worker. ``tests/pure/test_lean_import.py`` checks it.
_LAZY: dict[str, str] = {
    "Serializer": ".redis.serializers",
    "BucketStats": ".structures.bucket",
    "Dequeued": ".structures.bucket",
    "KeyStats": ".structures.bucket",
    "LeakyBucket": ".structures.bucket",
    "Reservation": ".structures.bucket",
    "parse_rate": ".structures.bucket",
    "DeadLetter": ".structures.deadletters",
    "Figures": ".structures.figures",
    "LeaseKeeper": ".structures.lease_keeper",
    "Lease": ".structures.leases",
    "LeaseStats": ".structures.leases",
    "LeasedResources": ".structures.leases",
    "CappedPool": ".structures.pool",
    "PoolBatch": ".structures.pool",
    "PoolItem": ".structures.pool",
    "PoolStats": ".structures.pool",
    "ReapResult": ".structures.receipts",
    "Receipt": ".structures.receipts",
    "ScheduledSet": ".structures.sets",
    "SortedSet": ".structures.sets",
    "TimeSortedSet": ".structures.sets",
    "AckResult": ".structures.streams",
    "GroupFigures": ".structures.streams",
    "StreamEvent": ".structures.streams",
    "StreamRead": ".structures.streams",
    "EventStream": ".structures.streams",
    "BucketTask": ".tasks",
    "PoolCall": ".tasks",
    "PoolTask": ".tasks",
    "StreamTask": ".tasks",
    "bucket_task": ".tasks",
    "pool_task": ".tasks",
    "stream_task": ".tasks",
    "DrainSummary": ".tasks.beat",
    "BufferedReceipt": ".tasks.buffer",
    "CallBuffer": ".tasks.buffer",
    "buffer": ".tasks.buffer",
    "LeaseTask": ".tasks.lease",
    "lease_task": ".tasks.lease",
    "leased_resources": ".tasks.lease",
    "UniqueLocks": ".structures.unique",
    "UniqueStats": ".structures.unique",
    "unique": ".tasks.unique",
    "publish": ".tasks.stream",
}

__all__ = [
    "AckResult",
    "BrokerConfigurationError",
    "BucketStats",
    "BucketTask",
    "BufferedReceipt",
    "CallBuffer",
    "CallLostError",
    "CallRefusedError",
    "CappedPool",
    "ConfigurationError",
    "CorruptDataError",
    "DeadLetter",
    "Dequeued",
    "DrainSummary",
    "EventStream",
    "Figures",
    "GroupFigures",
    "InvalidArgumentError",
    "KeyBackoff",
    "KeyStats",
    "LeakyBucket",
    "Lease",
    "LeaseKeeper",
    "LeaseStats",
    "LeaseTask",
    "LeasedResources",
    "NoFreeResourceError",
    "PickleWarning",
    "PoolBatch",
    "PoolCall",
    "PoolItem",
    "PoolStats",
    "PoolTask",
    "ReapResult",
    "Receipt",
    "ReceiptNotReadyError",
    "RedQueueError",
    "RedisUnavailableError",
    "ReplyLostError",
    "Reservation",
    "ReservationError",
    "ScheduledSet",
    "SerializationError",
    "Serializer",
    "SortedSet",
    "StreamEvent",
    "StreamRead",
    "StreamTask",
    "TimeSortedSet",
    "UndecodableItemsError",
    "UniqueLockedError",
    "UniqueLocks",
    "UniqueStats",
    "__version__",
    "bucket_task",
    "buffer",
    "lease_task",
    "leased_resources",
    "parse_rate",
    "pool_task",
    "publish",
    "retry_after",
    "stream_task",
    "unique",
]


# object: type checkers see every lazy name through the TYPE_CHECKING imports above.
def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
