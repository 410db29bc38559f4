"""The app's view of one event stream: the groups its tasks subscribe, and the stream built
with their options (publishes wake each group's drain job). `stream` uses it and passes
its task class in; this module never imports it (no import cycle)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

from ..errors import ConfigurationError
from ..structures.receipts import Receipt
from ..structures.streams import EventStream
from .config import get_config

if TYPE_CHECKING:
    from celery import Celery

    from .stream import StreamTask

logger = logging.getLogger(__name__)


def stream_tasks(app: Celery, name: str) -> list[StreamTask]:
    """The app's tasks consuming stream ``name``, by task name."""
    return sorted(
        (
            cast("StreamTask", t)  # a task of the stream kind
            for t in app.tasks.values()
            if getattr(type(t), "redqueue_kind", None) == "stream"
            and cast("StreamTask", t).stream_name == name
        ),
        key=lambda t: t.name,
    )


def make_stream(
    app: Celery,
    name: str,
    *,
    reader: StreamTask | None = None,
    defaults: type[StreamTask] | None = None,
) -> EventStream:
    """The stream ``name`` as the app sees it: every subscribed group declared, publishes
    that wake a group send its task's drain job; reads use ``reader``'s options (else the
    first subscribed task's, else those of the class ``defaults``)."""
    config = get_config(app)
    tasks = stream_tasks(app, name)
    keys = {t.stream_key for t in tasks if t.stream_key is not None}
    if len(keys) > 1:
        raise ConfigurationError(
            f"tasks of stream {name!r} set different stream_key values ({sorted(map(repr, keys))}"
            "); the key is computed once at publish: give them all the same (a field name)"
        )
    maxlens = {t.stream_maxlen for t in tasks}
    if len(maxlens) > 1:
        raise ConfigurationError(
            f"tasks of stream {name!r} set different stream_maxlen values "
            f"{sorted(maxlens, key=str)}; the cap belongs to the stream: give them all the same"
        )
    by_group: dict[str, StreamTask] = {}
    for task in tasks:
        if task.group in by_group:
            raise ConfigurationError(
                f"tasks {by_group[task.group].name} and {task.name} are both group "
                f"{task.group!r} of stream {name!r}: give each task its own stream_group"
            )
        by_group[task.group] = task
    key_spec = next(iter(keys), None)
    own: StreamTask | type[StreamTask] | None = reader or (tasks[0] if tasks else defaults)
    if own is None:
        raise ConfigurationError(f"no task consumes stream {name!r} and no defaults were given")

    def wake(groups: list[str]) -> None:
        for group in groups:
            task = by_group.get(group)
            if task is None:
                continue
            try:
                task.send_drain()
            except Exception:
                # The event is safe in Redis; disarm, so the next publish or beat sends one.
                stream.release_drain(group)
                logger.exception("redqueue: sending the drain job of %s failed", task.name)

    stream = EventStream(
        config.client(),
        name,
        maxlen=own.stream_maxlen,
        groups=sorted(by_group),
        key=_key_function(key_spec),
        visibility_timeout=own.stream_visibility_timeout,
        max_receives=own.stream_max_receives,
        processed_guard=own.stream_processed_guard,
        ordered=reader is not None and reader.stream_key is not None,
        drain_lease=own.stream_drain_lease,
        prefix=config.key_prefix,
        serializer=config.serializer,
        on_wake=wake,
    )
    if app.conf.task_always_eager:
        stream.publish_many = _eager_publish(stream, tasks)  # type: ignore[method-assign]
    elif config.tracing:
        from .tracing import trace_stream  # loaded once tracing is on

        trace_stream(stream)  # tracing hook: publishes keep the caller's context (tracing.py)
    return stream


def _key_function(spec: Callable[..., str] | str | None) -> Callable[..., str] | None:
    if spec is None or callable(spec):
        return spec
    return lambda event: event[spec]


def _eager_publish(stream: EventStream, tasks: list[StreamTask]) -> Callable[..., list[Receipt]]:
    """In eager mode (users' unit tests) a publish runs every group's body at once, on the
    event as a worker would see it; nothing is stored."""

    def publish_many(
        events: Iterable[object], *, keys: Iterable[str | None] | None = None
    ) -> list[Receipt]:
        encoded = [stream.encode(e) for e in events]
        for data in encoded:
            for task in tasks:
                task.apply((stream.serializer.loads(data),))
        return [Receipt(id="eager") for _ in encoded]

    return publish_many
