"""The Celery glue: task base classes whose calls go into Redis structures, and their decorators.

- `base`: what every redqueue task shares (drain jobs, retries, the ``__call__`` dispatch that
  composes with other task bases: Flask, Django, yours)
- `producing`: the producer path of pools and buckets (storing calls, delays, dedupe);
  `by_name`: a message with arguments, stored as ``.delay()`` would
- `pool`: [`PoolTask`][celery_redqueue.PoolTask] and ``@pool_task`` (capped pools)
- `bucket`: [`BucketTask`][celery_redqueue.BucketTask] and ``@bucket_task`` (per-key leaky buckets)
- `stream`: [`StreamTask`][celery_redqueue.StreamTask] and ``@stream_task`` (consumer groups of
  event streams); `stream_app`: the app's streams (the groups its tasks subscribe)
- `lease`: [`LeaseTask`][celery_redqueue.LeaseTask] and ``@lease_task`` (leased resources)
- `beat`: drain and reaper jobs, beat entries
- `config`: the app's ``redqueue_*`` settings
- `watchdog`: every worker's pass that sends the drains no one else would (no beat needed)
"""

from celery.signals import celeryd_init

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


def _add_worker_steps(sender: object = None, instance: object = None, **_: object) -> None:
    """Give every ``celery worker`` the steps of the continuous consumer, the watchdog and the
    drains' yield to other work (``celeryd_init``, before the worker builds its steps). Their
    modules are imported here, in the worker: a producer that imports the package never loads
    them."""
    from .consumer import ConsumerStep
    from .neighbour import NeighbourStep
    from .watchdog import WatchdogStep

    app = getattr(instance, "app", None)
    if app is not None:
        app.steps["worker"].update((ConsumerStep, WatchdogStep, NeighbourStep))


celeryd_init.connect(_add_worker_steps, weak=False)
