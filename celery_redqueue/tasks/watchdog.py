"""The worker's watchdog: every ``celery worker`` that serves stored calls looks, every few
seconds, for work no drain job will serve, and sends that drain itself, with or without beat.

Why it exists: a stored call waits for a drain job, and three faults leave it with none. A drain
SIGKILLed while it held the drain flag (lingering, or mid-batch) leaves the flag to expire
over calls stored meanwhile, which sent no job; a worker SIGKILLed while it held a gathering
drain's countdown message (``pool_batch_wait``) leaves that message to wait out the broker's
visibility timeout (an hour); a drain whose send failed (broker down) released the flag, and
nothing sends it once the broker is back. Beat's reaper finds all three, but a fleet run without
beat (``redqueue_beat = False``, or no ``celery beat`` process) and with ``*_drain_interval=None``
had nobody: the call waited for the next call.

Each pass runs the reaper's own step for every pooled, bucket and stream task routed to this
worker's queues: ``task.reap()``, one bounded script per structure (and shard). It takes back
what expired (at-most-once batches counted ``lost``, with their waiters told: `results`), and
arms the drain flag with ``SET NX`` when work is due and no drain holds it: of many workers
looking at once, only the one whose ``SET NX`` won sends a drain job (`rearm_drain.lua`,
``stream_wake.lua``). So a stranded call is served within its drain lease plus about one
interval (``redqueue_watchdog_interval``, 2 s) after the drain that held the flag died, or about
one interval after the broker came back.

It runs on a thread of its own in the worker's main process (never in the event loop: a pass
against a Redis that does not answer blocks for its timeouts). Structures served by this
worker's continuous consumer (`consumer`) are left to the consumer's own watchdog, which keeps
the drains it finds in the worker. ``redqueue_watchdog_interval`` sets the seconds between
passes; 0 turns the watchdog off (a fleet whose beat runs the reaper often enough).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from ..errors import RedQueueError
from .base import RedQueueTask
from .checks import STRUCTURE_KINDS
from .config import get_config
from .consumer import ConsumerStep, queue_of
from .worker_step import RedQueueStep

if TYPE_CHECKING:
    from celery import Celery
    from celery.worker import WorkController

logger = logging.getLogger(__name__)


def watched_tasks(app: Celery, queues: set[str] | None) -> list[RedQueueTask]:
    """The app's pooled, bucket and stream tasks whose drain jobs go to one of ``queues`` (all
    of them with None: a worker consuming every queue)."""
    return [
        cast("RedQueueTask", task)  # a task of a structure kind
        for _, task in sorted(app.tasks.items())
        if getattr(type(task), "redqueue_kind", None) in STRUCTURE_KINDS
        and (queues is None or queue_of(app, task) in queues)
    ]


def watch_once(tasks: Iterable[RedQueueTask]) -> int:
    """One pass: reap each task's structure, sending the drain its due work needs; returns
    what the reapers took back. One structure that fails (Redis unreachable, corrupt data) is
    logged and the others are still looked at."""
    taken = 0
    for task in tasks:
        try:
            taken += task.reap()
        except RedQueueError as exc:
            logger.warning("redqueue watchdog: looking at %s failed: %s", task.name, exc)
        except Exception:
            logger.exception("redqueue watchdog: looking at %s failed", task.name)
    return taken


class WatchdogStep(RedQueueStep):
    """The worker bootstep that runs the watchdog's thread (see the module)."""

    label = "redqueue watchdog"
    # After the execution pool (prefork's children are forked before the thread starts) and
    # after the continuous consumer (the first pass must know what the consumer serves).
    requires = ("celery.worker.components:Pool", ConsumerStep)

    def __init__(self, parent: WorkController, **kwargs: object) -> None:
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        super().__init__(parent, **kwargs)

    def start(self, parent: WorkController) -> None:
        # Read here, not at __init__: the step is added to every worker, and only an app with
        # pooled, bucket or stream tasks has (and must have) redqueue settings.
        queues = set(parent.app.amqp.queues.consume_from or {}) or None
        tasks = watched_tasks(parent.app, queues)
        if not tasks:
            return
        interval = get_config(parent.app).watchdog_interval
        if interval <= 0:
            return
        self.stopping.clear()
        self.thread = threading.Thread(
            target=self._run,
            args=(parent, tasks, interval),
            name="redqueue-watchdog",
            daemon=True,
        )
        self.thread.start()

    def _run(self, parent: WorkController, tasks: list[RedQueueTask], interval: float) -> None:
        # The first pass at once: a worker that starts is often what a stranded call waited for.
        while not self.stopping.is_set():
            consumed = _consumer_served(parent)
            watch_once(task for task in tasks if task.name not in consumed)
            self.stopping.wait(interval)

    def stop(self, parent: WorkController) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
            self.thread = None


def _consumer_served(parent: WorkController) -> set[str]:
    """The tasks this worker's continuous consumer serves (none when it is off or idle)."""
    for step in getattr(parent, "steps", ()):
        dispatcher = getattr(step, "dispatcher", None)
        if isinstance(step, ConsumerStep) and dispatcher is not None:
            return set(dispatcher.served)
    return set()
