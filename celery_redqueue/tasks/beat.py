"""Drain and reaper jobs: the argument-less messages the broker carries, and beat's schedule.

A drain job is the task's own name with no arguments and the ``redqueue_drain`` header; the
task's ``__call__`` recognises it and drains its structure. The reaper is one task,
``celery_redqueue.reap``, that beat runs for the whole app.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from celery import Task, shared_task, signature

from ..errors import RedQueueError
from ..structures.catalog import open_structure, registered
from .config import get_config

logger = logging.getLogger(__name__)

#: Message header that marks an argument-less drain job.
DRAIN_HEADER = "redqueue_drain"
REAPER_TASK = "celery_redqueue.reap"


@dataclass(frozen=True)
class DrainSummary:
    """What one drain job did; also its (JSON-friendly) return value."""

    processed: int = 0
    failed: int = 0
    batches: int = 0
    continued: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def register_beat(
    app: Any, key: str, interval: float, task_name: str, headers: dict[str, Any]
) -> None:
    """Add a beat entry under a fixed name, so re-binding a task never duplicates it."""
    sig = signature(task_name, app=app, options={"headers": headers} if headers else {})
    app.add_periodic_task(interval, sig, name=key)


@shared_task(name=REAPER_TASK, ignore_result=True, bind=True)  # type: ignore[misc, untyped-decorator]
def reap(self: Task) -> dict[str, int]:
    """Beat-run: take back expired reservations of every redqueue structure.

    First the app's own pooled and bucket tasks (which also send the drain job that returned
    items need), then every other structure found in the registry under the app's prefix.
    """
    reaped: dict[str, int] = {}
    covered: set[str] = set()
    for name, task in list(self.app.tasks.items()):
        structure = getattr(task, "structure", None)
        if structure is None or name == REAPER_TASK:
            continue
        try:
            covered.add(structure.keys.base)
            count = task.reap()
        except RedQueueError:
            logger.exception("redqueue: reaping %s failed", name)
            continue
        if count:
            reaped[name] = count
    config = get_config(self.app)
    client = config.client()
    for kind, name, settings in registered(client, config.key_prefix):
        try:
            other = open_structure(client, config.key_prefix, kind, name, settings)
            if other is None or other.keys.base in covered:
                continue
            result = other.reap()
        except (RedQueueError, TypeError, ValueError):
            logger.exception("redqueue: reaping registered %s:%s failed", kind, name)
            continue
        count = sum(
            v for v in result.__dict__.values() if isinstance(v, int) and not isinstance(v, bool)
        )
        if count:
            reaped[f"{kind}:{name}"] = count
    return reaped
