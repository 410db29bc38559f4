"""The app's health checks: server warnings (`celery_redqueue.redis.server`) and data
loss (`celery_redqueue.structures.loss`).

At worker start (``worker_ready``, in the ``celery worker`` process) the worker warns when
Redis's eviction policy or missing persistence can lose calls, and compares the structures'
figures with the snapshot last recorded; every reaper run (beat) compares again, so a Redis
that restarted and lost data is logged within one reaper interval with the figures last seen.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from celery.signals import worker_ready

from ..errors import RedQueueError
from ..redis.server import server_warnings
from ..structures.catalog import register
from ..structures.loss import Loss, check_for_loss
from .config import get_config

if TYPE_CHECKING:
    from celery import Celery

    from .base import RedQueueTask

logger = logging.getLogger(__name__)

#: Task kinds whose calls live in a structure (a lease task borrows a resource instead).
STRUCTURE_KINDS = ("pool", "bucket", "stream")


def check_app(app: Celery, *, warn: bool = False) -> list[Loss]:
    """Log the server warnings (with ``warn``) and every data loss found; returns the losses.

    Raises RedQueueError when Redis cannot be read.
    """
    config = get_config(app)
    client = config.client()
    _register_own_structures(app)
    if warn:
        for text in server_warnings(client, refresh=True):
            logger.warning("redqueue: %s", text)
    losses = check_for_loss(client, config.key_prefix)
    for loss in losses:
        logger.error("redqueue: %s", loss.describe())
    return losses


def _register_own_structures(app: Celery) -> None:
    """Record the app's structures in the registry again: a process registers a structure
    once, so after Redis lost its data (registry included) the reaper, the CLI and this check
    would no longer see them."""
    for task in list(app.tasks.values()):
        if getattr(type(task), "redqueue_kind", None) not in STRUCTURE_KINDS:
            continue
        try:
            # A task of a structure kind (checked above) is a RedQueueTask.
            structure = cast("RedQueueTask", task).structure
            register(structure.client, structure.keys, structure.settings())
        except RedQueueError as exc:
            logger.debug("redqueue: re-registering %s failed: %s", task.name, exc)


def _uses_redqueue(app: Celery) -> bool:
    # By the class attribute every redqueue task kind declares: this module is imported by
    # the reaper (beat), which the task classes import, so it cannot import them.
    return any(getattr(type(task), "redqueue_kind", None) for task in app.tasks.values())


def _check_at_worker_start(sender: object = None, **_: object) -> None:
    app = getattr(sender, "app", None)
    if app is None or not _uses_redqueue(app):
        return
    try:
        check_app(app, warn=True)
    except RedQueueError as exc:
        # The worker still starts: calls will raise their own errors while Redis is away.
        logger.warning("redqueue: health check at worker start failed: %s", exc)


worker_ready.connect(_check_at_worker_start, weak=False)
