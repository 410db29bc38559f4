"""The Celery glue: task base classes whose calls go into Redis structures, and their decorators.

- :mod:`.base`: what every redqueue task shares (storing calls, drain routing, delays, dedupe);
  :mod:`.composition`: how it composes with other task bases (Flask, Django, yours)
- :mod:`.pool`: :class:`PoolTask` and ``@pool_task`` (capped pools)
- :mod:`.bucket`: :class:`BucketTask` and ``@bucket_task`` (per-key leaky buckets)
- :mod:`.stream`: :class:`StreamTask` and ``@stream_task`` (consumer groups of event streams);
  :mod:`.stream_app`: the app's streams (the groups its tasks subscribe)
- :mod:`.lease`: :class:`LeaseTask` and ``@lease_task`` (leased resources)
- :mod:`.beat`: drain and reaper jobs, beat entries
- :mod:`.config`: the app's ``redqueue_*`` settings
"""

from . import consumer  # noqa: F401  (connects the continuous consumer's worker step)
from .base import RedQueueTask
from .bucket import BucketTask, bucket_task
from .pool import PoolCall, PoolTask, pool_task
from .stream import StreamTask, publish, stream_task

__all__ = [
    "BucketTask",
    "PoolCall",
    "PoolTask",
    "RedQueueTask",
    "StreamTask",
    "bucket_task",
    "pool_task",
    "publish",
    "stream_task",
]
