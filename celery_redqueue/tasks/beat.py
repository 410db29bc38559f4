"""Drain and reaper jobs: the argument-less messages the broker carries, and beat's schedule.

A drain job is the task's own name with no arguments and the ``redqueue_drain`` header; the
task's ``__call__`` recognises it and drains its structure. The reaper is one task,
``celery_redqueue.reap``, that beat runs for the whole app.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from celery import shared_task, signature
from celery.exceptions import SoftTimeLimitExceeded

from ..structures.catalog import open_entry, registry_entries
from ..structures.receipts import ReapResult, Record
from .checks import check_app
from .config import get_config
from .wire import REAPER_TASK

if TYPE_CHECKING:
    from celery import Celery

    from ..privates import AnyTask
    from .base import RedQueueTask

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrainSummary(Record):
    """What one drain job did, in calls, each word meaning what it means in the structure's
    stats (docs/glossary.md); also the job's (JSON-friendly) return value."""

    #: Calls whose body completed.
    processed: int = 0
    #: Calls whose body raised and that are done without a dead letter (at-most-once pools).
    failed: int = 0
    #: Calls handed back for another try (a Celery retry, or a failure redelivered).
    retried: int = 0
    #: Calls dead-lettered (retries or receives spent, or entries that could not be read).
    dead: int = 0
    #: Batches popped (pools, streams).
    batches: int = 0
    #: The job sent or scheduled the drain job that goes on.
    continued: bool = False

    @classmethod
    def of(
        cls, counts: Mapping[str, int], batches: int = 0, continued: bool = False
    ) -> DrainSummary:
        """A summary of ``counts`` (``processed``, ``failed``, ``retried``, ``dead``)."""
        return cls(
            counts.get("processed", 0),
            counts.get("failed", 0),
            counts.get("retried", 0),
            counts.get("dead", 0),
            batches,
            continued,
        )


def register_beat(
    app: Celery, key: str, interval: float, task_name: str, headers: Mapping[str, object]
) -> None:
    """Add a beat entry under a fixed name, so re-binding a task never duplicates it."""
    sig = signature(task_name, app=app, options={"headers": headers} if headers else {})
    app.add_periodic_task(interval, sig, name=key)


#: Key of the reaper's result that counts structures whose reaping failed this run.
FAILED_KEY = "redqueue: failed"


def reaped_count(result: ReapResult | int) -> int:
    """Items a structure's reap result says it took back, and stream groups it woke."""
    if isinstance(result, int):
        return result
    return int(result.returned + result.dead_lettered + result.lost + len(result.groups))


@shared_task(name=REAPER_TASK, ignore_result=True, bind=True)
def reap(self: AnyTask) -> dict[str, int]:
    """Beat-run: take back expired reservations of every redqueue structure.

    First the app's own pooled and bucket tasks (which also send the drain job that returned
    items need), then every other structure found in the registry under the app's prefix.

    Each structure is reaped on its own: what one raises is logged, counted under `FAILED_KEY`,
    and the others are still reaped; the job never raises (docs/failure-modes.md, "One broken
    structure").
    """
    reaped: dict[str, int] = {}
    failed = 0
    covered: set[str] = set()
    for name, task in list(self.app.tasks.items()):
        if name == REAPER_TASK:
            continue
        try:
            structure = getattr(task, "structure", None)
            if structure is None:
                continue
            covered.add(structure.keys.base)
            count = cast("RedQueueTask", task).reap()  # a task with a structure
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            failed += 1
            logger.error("redqueue: reaping %s failed: %s", name, _describe(exc), exc_info=True)
            continue
        if count:
            reaped[name] = count
    try:
        config = get_config(self.app)
        entries = registry_entries(config.client(), config.key_prefix)
    except Exception as exc:
        # The registry itself is unreadable (Redis down, the key overwritten): the app's own
        # tasks above were still reaped.
        logger.error("redqueue: reading the registry failed: %s", _describe(exc), exc_info=True)
        entries = []
        failed += 1
    for entry in entries:
        label = f"{entry.kind}:{entry.name}"
        try:
            other = open_entry(config.client(), config.key_prefix, entry)
            if other is None or other.keys.base in covered:
                continue
            count = reaped_count(other.reap())
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            failed += 1
            logger.error(
                "redqueue: reaping registered %s failed: %s", label, _describe(exc), exc_info=True
            )
            continue
        if count:
            reaped[label] = count
    try:
        # A Redis that restarted and lost data is logged here, with the figures last seen.
        check_app(self.app)
    except Exception as exc:
        logger.error("redqueue: checking for data loss failed: %s", _describe(exc))
    if failed:
        reaped[FAILED_KEY] = failed
    return reaped


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    return f"{text} (caused by {type(cause).__name__}: {cause})" if cause is not None else text
