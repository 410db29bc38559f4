"""The continuous consumer (opt-in, docs/consumer.md): a worker bootstep that serves the app's
redqueue structures without drain jobs.

The step is added to every ``celery worker`` of an app (``celeryd_init``, before the worker
builds its steps) and includes itself only when the setting ``redqueue_consumer`` or the option
``--redqueue-consumer`` asks for it; `consumer_loop` dispatches the drains.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from ..errors import ConfigurationError
from ..privates import exec_options
from . import consumer_loop, neighbour
from .base import RedQueueTask
from .checks import STRUCTURE_KINDS
from .config import get_config
from .consumer_loop import Dispatcher, Served
from .worker_step import RedQueueStep

if TYPE_CHECKING:
    import click
    from celery import Celery
    from celery.concurrency.base import BasePool
    from celery.worker import WorkController

    from ..privates import AnyTask

logger = logging.getLogger(__name__)

#: The setting (Django: ``CELERY_REDQUEUE_CONSUMER``).
SETTING = "redqueue_consumer"
#: The ``celery worker`` option: ``--redqueue-consumer``.
OPTION = "--redqueue-consumer"

#: Shortest and longest seconds between the consumer's reaper passes (the watchdog): half the
#: shortest visibility timeout of what it serves, within these bounds.
REAP_BOUNDS = (0.5, 30.0)


def queue_of(app: Celery, task: AnyTask) -> str:
    """The queue the task's drain jobs are routed to (its options, then the app's routes)."""
    route = app.amqp.router.route(exec_options(task), task.name)
    queue = route.get("queue")
    return str(getattr(queue, "name", queue))


def served_tasks(
    app: Celery, names: tuple[str, ...] | None, queues: set[str] | None
) -> list[Served]:
    """The tasks a consumer serves: the named ones (each must be a pooled, bucket or stream
    task: ConfigurationError otherwise), or every such task routed to one of ``queues``."""
    # A task of a structure kind is a RedQueueTask.
    tasks = cast(
        "dict[str, RedQueueTask]",
        {
            name: task
            for name, task in app.tasks.items()
            if getattr(type(task), "redqueue_kind", None) in STRUCTURE_KINDS
        },
    )
    if names is not None:
        unknown = sorted(set(names) - set(tasks))
        if unknown:
            raise ConfigurationError(
                f"{SETTING} names {unknown}, which are not pooled, bucket or stream tasks of "
                f"this app (these are: {sorted(tasks)})"
            )
        chosen = [tasks[name] for name in names]
    else:
        chosen = [
            task
            for _, task in sorted(tasks.items())
            if queues is None or queue_of(app, task) in queues
        ]
    return [Served(task, max_drains_of(task)) for task in chosen]


def max_drains_of(task: RedQueueTask) -> int:
    """Most drains of the task's structure at once (a stream group: one)."""
    return task.drain_settings.concurrency


def reap_interval(app: Celery, served: list[Served]) -> float:
    timeouts = [s.task.drain_settings.visibility_timeout for s in served]
    low, high = REAP_BOUNDS
    high = min(high, get_config(app).reaper_interval)
    return max(low, min([t / 2 for t in timeouts] + [high]))


class ConsumerStep(RedQueueStep):
    """The worker bootstep of the continuous consumer."""

    label = "redqueue consumer"
    requires = ("celery.worker.components:Pool",)

    def __init__(
        self, parent: WorkController, redqueue_consumer: bool | None = None, **kwargs: object
    ) -> None:
        # The step is added to every worker; only an app that asks reads its settings.
        asked = redqueue_consumer or parent.app.conf.get(SETTING)
        setting = (
            True if redqueue_consumer else (get_config(parent.app).consumer if asked else False)
        )
        self.enabled = bool(setting)
        self.names = setting if isinstance(setting, tuple) else None
        self.dispatcher: Dispatcher | None = None
        if self.enabled:
            # Before the execution pool starts, so that prefork's children inherit it.
            consumer_loop._APP = parent.app
        super().__init__(parent, **kwargs)

    def start(self, parent: WorkController) -> None:
        # celery-types types WorkController.pool as the Pool bootstep: it is the execution pool
        # the bootstep built.
        execution_pool = cast("BasePool", parent.pool)
        if getattr(execution_pool, "is_green", False):
            logger.warning(
                "redqueue consumer: not available with the %s execution pool (it dispatches from a "
                "thread of its own); drain jobs serve the structures",
                type(execution_pool).__module__,
            )
            return
        queues = set(parent.app.amqp.queues.consume_from or {}) or None
        served = served_tasks(parent.app, self.names, queues)
        if not served:
            logger.warning("redqueue consumer: no pooled, bucket or stream task to serve")
            return
        hub = getattr(parent, "hub", None) if getattr(parent, "use_eventloop", False) else None
        self.dispatcher = Dispatcher(
            parent.app,
            execution_pool,
            served,
            concurrency=int(getattr(parent, "concurrency", 1) or 1),
            hub=hub,
            reap_interval=reap_interval(parent.app, served),
        )
        self.dispatcher.start()
        neighbour.set_busy_source(self.dispatcher.running_drains)
        logger.info("redqueue consumer: serving %s", ", ".join(s.name for s in served))

    def stop(self, parent: WorkController) -> None:
        if self.dispatcher is not None:
            neighbour.set_busy_source(None)
            self.dispatcher.stop()
            self.dispatcher = None


def add_worker_option(command: click.Command) -> None:
    """Give ``celery worker`` the ``--redqueue-consumer`` flag (from the package's
    ``celery.commands`` plugin, loaded before Celery parses the command line); the worker hands
    it to `ConsumerStep` as ``redqueue_consumer``."""
    import click

    if any(OPTION in getattr(param, "opts", ()) for param in command.params):
        return
    command.params.append(
        click.Option(
            [OPTION],
            is_flag=True,
            default=False,
            help="Serve the app's pooled, bucket and stream tasks continuously (redqueue).",
        )
    )
