"""StreamTask: each task is one consumer group of an event stream and receives every event
(docs/guides/stream.md): a publish sends one drain job per group it woke, never the event."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from celery.exceptions import SoftTimeLimitExceeded

if TYPE_CHECKING:
    from celery import Celery
    from celery.result import AsyncResult

    from ..privates import AnyTask

from ..errors import ConfigurationError, RedQueueError
from ..structures.base import DRAIN_LEASE
from ..structures.receipts import Receipt
from ..structures.streams import EventStream, StreamEvent, StreamRead, validate_group
from ..structures.wake import unlist
from ..validation import positive_int, seconds
from .base import RedQueueTask, error_text, per_process
from .beat import DrainSummary
from .decorators import decorate_task
from .neighbour import Looker
from .options import DrainSettings, function_or_name
from .retries import judge
from .stream_app import make_stream
from .wire import DRAIN_HEADER

logger = logging.getLogger(__name__)


class StreamTask(RedQueueTask):
    """Base class of stream consumers: the task is group ``stream_group`` of ``stream_name``.

    Example:

        @stream_task(stream="orders", group="sms")
        def send_sms(event):
            ...

        send_sms.stream.publish({"order": 7})   # every group of "orders" receives it
    """

    redqueue_kind = "stream"

    #: The stream this task consumes (required).
    stream_name: str | None = None
    #: Its consumer group; defaults to the task name.
    stream_group: str | None = None
    #: Partition key of an event: a callable on the event or the name of one of its fields.
    #: When set, this group handles each key's events one at a time, in publish order. Every
    #: task of a stream that sets it must set the same value (it is computed at publish).
    stream_key: Callable[..., str] | str | None = None
    #: Most entries the stream keeps (approximate trimming; trimmed entries are counted).
    stream_maxlen: int | None = 100_000
    #: Entries read per step of a drain.
    stream_batch_size: int = 10
    #: Seconds an entry handed out may stay unacknowledged before another consumer claims it
    #: (a running body's heartbeat keeps renewing it).
    stream_visibility_timeout: float = 60.0
    #: Deliveries (first, retries, claims) before an entry is dead-lettered.
    stream_max_receives: int = 5
    #: Seconds before an entry whose body raised what Celery would not retry (no
    #: ``autoretry_for`` names it) is handed out again; with ``retry_backoff=True`` the base of
    #: Celery's exponential backoff. Celery's retries (``autoretry_for``, ``self.retry``) wait
    #: as Celery's options say (docs/semantics.md, "Retries").
    stream_retry_delay: float = 1.0
    #: Consumer-side guard (seconds, 0: off): entries whose body completed are remembered and a
    #: redelivered or replayed copy is skipped.
    stream_processed_guard: float = 0.0
    #: Seconds the drain lease lasts unless renewed: a dead drain blocks nobody for longer.
    stream_drain_lease: float = DRAIN_LEASE
    #: Seconds between beat-run drains (a safety net). None: no beat entry.
    stream_drain_interval: float | None = 30.0
    #: Seconds one drain job works before handing over to a fresh one.
    stream_drain_time_budget: float = 10.0
    #: Seconds a drain waits on a caught-up group before it ends, woken by the next publish.
    stream_drain_linger: float = 0.2

    @classmethod
    def read_drain_settings(cls) -> DrainSettings:
        return DrainSettings.read(
            "stream",
            interval=cls.stream_drain_interval,
            time_budget=cls.stream_drain_time_budget,
            lease=cls.stream_drain_lease,
            visibility_timeout=cls.stream_visibility_timeout,
            linger=cls.stream_drain_linger,
            processed_guard=cls.stream_processed_guard,
        )

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.stream_name is not None:
            validate_group(cls.stream_name, "stream_name")
        if cls.stream_group is not None:
            validate_group(cls.stream_group, "stream_group")
        positive_int("stream_maxlen", cls.stream_maxlen, optional=True)
        positive_int("stream_batch_size", cls.stream_batch_size)
        positive_int("stream_max_receives", cls.stream_max_receives)
        seconds("stream_retry_delay", cls.stream_retry_delay)
        function_or_name(cls, "stream_key", "a callable on the event or a field name")
        if "run" in cls.__dict__ and cls.stream_name is None:
            raise ConfigurationError(f"stream_name is required for stream task {cls.__name__}")
        if "run" in cls.__dict__ and cls.stream_group is None and isinstance(cls.name, str):
            validate_group(cls.name, "stream_group (by default the task name)")

    @property
    def group(self) -> str:
        """This task's consumer group."""
        return self.stream_group or validate_group(self.name, "stream_group (the task name)")

    @per_process
    def stream(self) -> EventStream:
        """The stream, as this group reads it; ``publish`` wakes every group of the app."""
        return self._make_stream()

    @per_process
    def structure(self) -> EventStream:
        """What the reaper, the figures and the heartbeat look at: the stream."""
        return self.stream

    @property
    def event(self) -> StreamEvent | None:
        """The entry whose body runs in this thread (id, receives, key), else None."""
        return getattr(self._local, "event", None)

    def _make_stream(self) -> EventStream:
        assert self.stream_name is not None
        return make_stream(self.app, self.stream_name, reader=self, defaults=type(self))

    # Producing: events are published to the stream, never sent as calls.

    # A deliberate override: it takes only drain jobs (the rest rides in options), which a
    # handed-over drain does not send (None).
    def apply_async(  # type: ignore[override]
        self,
        args: Sequence[object] | None = None,
        kwargs: Mapping[str, object] | None = None,
        **options: Any,
    ) -> AsyncResult[object] | None:
        """Drain jobs go to the broker; a call with arguments is refused: a stream task is fed
        by publishing (``task.stream.publish(event)``), so that every group receives it."""
        if (options.get("headers") or {}).get(DRAIN_HEADER):
            drain_options = {
                k: v
                for k, v in options.items()
                if k not in ("task_id", "link", "link_error", "shadow")
            }
            return self.send_drain(**drain_options)
        raise RedQueueError(
            f"{self.name} consumes stream {self.stream_name!r}: publish events with "
            f"{self.name}.stream.publish(event) (every group receives them), not delay()"
        )

    def requeue_dead(self, letters: Any = None, limit: int = -1) -> int:
        """Put dead letters back in the stream, addressed to their groups, and wake them."""
        return self.stream.requeue_dead(letters, limit)

    # Consuming

    def _held_while_draining(self) -> AbstractContextManager[None]:
        return nullcontext()  # a group's reads renew their own entries (`_heartbeat`)

    def _drain(self) -> DrainSummary:
        """Read, run and acknowledge this group's entries until it has caught up (lingering a
        moment) or the time budget is spent."""
        stream = self.stream
        consumer = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        deadline = time.monotonic() + self.stream_drain_time_budget
        done = Counter[str]()  # processed, retried, dead: the stats' words
        batches = 0
        retry_at: float | None = None
        last_work = -float("inf")
        looker = Looker(self)  # the worker's other work waiting: end soon (`neighbour`)
        listed = False  # a lingering read listed this drain on the group's wake signal
        with self._heartbeat(stream, consumer) as working:
            while True:
                if looker.stopping:  # the worker shuts down: another worker serves the rest
                    if listed:  # no empty read ends this job: take its listener off
                        unlist(stream.wake_signals(self.group))
                    self.send_drain()
                    return DrainSummary.of(done, batches, continued=True)
                left = self.stream_drain_linger - (time.monotonic() - last_work)
                size = self.stream_batch_size
                if looker.yielding():
                    left = 0.0  # no linger: end after this batch, a fresh job behind the others
                    if looker.urgent:
                        size = 1  # a task waits: only the entry at hand
                batch = stream.read(
                    self.group,
                    consumer,
                    size,
                    linger=left > 0,
                    listen=max(left, 0.0),
                )
                if batch.read_again:
                    continue
                if batch.lingering:
                    listed = True
                    # Woken by the next publish (wake signal), or other work waits.
                    looker.listen(lambda wait: stream.listen(self.group, wait), left)
                    continue
                if not batch:
                    break
                working[:] = batch.ids
                started = time.monotonic()
                failures, retry_in, dead = self._run_batch(batch)
                last_work = time.monotonic()
                acked = stream.ack(
                    batch,
                    failures=failures,
                    retry_in=retry_in,
                    dead=dead,
                    seconds=last_work - started,
                )
                working[:] = []
                batches += 1
                done.update(processed=acked.processed, retried=acked.retried, dead=acked.dead)
                if retry_in:
                    soonest = time.monotonic() + min(retry_in.values())
                    retry_at = soonest if retry_at is None else min(retry_at, soonest)
                if looker.yielding() or time.monotonic() >= deadline:
                    if listed:  # left listed, it would keep publishes from sending a drain
                        unlist(stream.wake_signals(self.group))
                    self.send_drain()  # hand over, so one group cannot hold a worker forever
                    return DrainSummary.of(done, batches, continued=True)
        if retry_at is not None:
            # Failed entries become claimable after their delay: come back for them then.
            self.send_drain(countdown=max(retry_at - time.monotonic(), 0.0))
            return DrainSummary.of(done, batches, continued=True)
        return DrainSummary.of(done, batches)

    @contextmanager
    def _heartbeat(self, stream: EventStream, consumer: str) -> Iterator[list[str]]:
        """Renew the drain flag and the entries at work (the yielded list) until the drain
        ends, so a short lease and visibility timeout still let a long body run once."""
        working: list[str] = []
        stop = threading.Event()
        interval = min(self.stream_drain_lease, self.stream_visibility_timeout) / 3

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    stream.renew(self.group, consumer, list(working))
                except RedQueueError:
                    logger.warning("%s: heartbeat failed; retrying", self.name, exc_info=True)

        thread = threading.Thread(target=beat, name=f"redqueue-heartbeat-{self.group}", daemon=True)
        thread.start()
        try:
            yield working
        finally:
            stop.set()
            thread.join()

    def _run_batch(self, batch: StreamRead) -> tuple[dict[str, str], dict[str, float], set[str]]:
        """Run the body on each event; returns failures, their retry delays and the ids to
        dead-letter at once."""
        from . import tracing  # a worker's module: not loaded by producers

        failures: dict[str, str] = {}
        retry_in: dict[str, float] = {}
        dead: set[str] = set()
        for index, event in enumerate(batch.events):
            payload, carrier = tracing.unwrap_event(event.payload)  # tracing hook
            if carrier is not None:
                event = dataclasses.replace(event, payload=payload)
            self._local.event = event
            try:
                with tracing.processing(  # tracing hook
                    self,
                    [carrier],
                    destination=str(self.stream_name),
                    kind="stream",
                    group=self.group,
                    key=event.key,
                    receives=event.receives,
                    message_id=event.id,
                ):
                    self._body()(event.payload)
            except SoftTimeLimitExceeded:
                # This job ends here; what it did not finish is claimed again after the
                # visibility timeout by the drain job sent now.
                rest = batch.events[index:]
                self.stream.ack(
                    StreamRead(batch.group, batch.consumer, rest),
                    failures=dict.fromkeys((e.id for e in rest), "time limit"),
                )
                self.send_drain()
                raise
            except Exception as exc:
                # Celery's retry rules (retries.py); any other failure is handed out again
                # after stream_retry_delay, until stream_max_receives.
                verdict = judge(
                    self,
                    exc,
                    event.receives,
                    self.stream_max_receives,
                    redeliver=self.stream_retry_delay,
                )
                verdict.log(logger, self.name, event.id, event.receives)
                failures[event.id] = error_text(verdict.error)
                if verdict.retry:
                    retry_in[event.id] = verdict.delay
                else:
                    dead.add(event.id)
            finally:
                self._local.event = None
        return failures, retry_in, dead

    def reap(self) -> int:
        """Wake this group if it has unread or claimable entries and no drain pending."""
        return self.stream.reap([self.group]).woken


def stream_task(*args: object, **options: object) -> Callable[[Callable[..., object]], AnyTask]:
    """Decorator: a shared task with [`StreamTask`][celery_redqueue.StreamTask] as base; options are
    checked at once. ``stream=`` and ``group=`` are short for ``stream_name=`` and
    ``stream_group=``.

    Example:

        @stream_task(stream="orders", group="loyalty", stream_processed_guard=86400)
        def add_points(event):
            ...
    """
    for short, full in (("stream", "stream_name"), ("group", "stream_group")):
        if short in options:
            options[full] = options.pop(short)
    if "stream_name" not in options:
        raise ConfigurationError("stream_task needs stream= (the stream to consume)")
    # So a bare @stream_task (no options) never gets here: what comes back is the decorator.
    return cast(
        "Callable[[Callable[..., object]], AnyTask]",
        decorate_task(StreamTask, args, options, "stream_task"),
    )


def publish(app: Celery, stream: str, event: object, *, key: str | None = None) -> Receipt:
    """Publish ``event`` on ``stream`` for every group the app subscribes to it (the stream
    object is built once per process and stream)."""
    cache: dict[tuple[int, str], EventStream] = app.__dict__.setdefault("_redqueue_streams", {})
    built = cache.get((os.getpid(), stream))
    if built is None:
        built = cache[(os.getpid(), stream)] = make_stream(app, stream, defaults=StreamTask)
    return built.publish(event, key=key)
