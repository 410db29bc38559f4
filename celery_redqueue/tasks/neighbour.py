"""Drains that yield to the worker's other work (``redqueue_drain_yield``, on by default).

A drain job works until its structure has stayed empty for its linger or its time budget is
spent; at a steady rate a structure is never empty that long, so, without this, a drain holds
its worker process (or thread) for its whole budget while the worker's other messages wait.
With it, a drain that finds other work waiting stops lingering and ends after the batch at
hand: an empty structure clears its drain flag as usual, one with calls left hands over to a
fresh drain job sent behind the waiting messages (or, under the continuous consumer, handed
back to it, which queues the drain behind them in the execution pool).

What waits, looked at every `LOOK` seconds while a drain works or lingers (a lingering drain
waits on its wake signal in slices of that length):

- **a task**: a request this worker reserved that is not a drain job (a plain task, a by-name
  call) and that no free process or thread will start. The drain ends after the call at hand
  (a per-call body takes one call; a batch body its batch).
- **another structure's drain job**, reserved the same way; or **messages in the broker** in
  the queues this worker consumes while none of its processes is free (with a full prefetch,
  e.g. ``worker_prefetch_multiplier = 1``, the worker cannot reserve them, so it cannot tell
  what they are: kombu's ``queue_declare`` gives a count). The drain ends after the batch at
  hand once it has worked `SLICE` seconds, so drains of several structures take turns a batch
  and a slice each rather than one call per job; a lingering drain ends at once.

A drain job of the drain's own structure waiting (a fan-out, beat's) is no reason to end.

The waiting requests are Celery's ``celery.worker.state`` (``reserved_requests`` less
``active_requests``), read directly where the drain runs in the worker's main process (threads,
gevent, solo), and published by the main process in a shared page for prefork's children
(`NeighbourStep`: at once on ``task_received``, then every `PUBLISH` seconds while anything
waits), which cannot see the main process's state. Drains the continuous consumer runs are not
requests: the consumer reports how many run (`set_busy_source`).

**Green execution pools** (gevent, eventlet): a drain job's message is acknowledged when the worker
receives it (``task_received``), not when the drain ends (the kinds are ``acks_late``). The
worker's consumer asks the broker for messages only while fewer than its prefetch (concurrency
times the multiplier) are unacknowledged, and it decides that on entering each poll of the
broker: once lingering drains hold the slots, it sleeps out the poll's timeout (seconds) even
after a slot frees, so plain tasks waited seconds (gevent ``-c 2``, a pool and a bucket beside a
plain task at 50 calls/s each: plain p50 3 to 15 s, yield on or off), and the drains could not
see them to yield. Acknowledged at receipt, a drain holds no slot: the next message is
reserved (the green execution pool's spawn waits for a greenlet) and a drain sees it within `LOOK`.
Nothing is lost by the early ack: a drain message carries no call, and a drain that dies lets
its drain flag's lease run out, so the next call or beat sends another (the fault model).
Prefork and threads keep the late ack (measured: they yield without it).

Only a drain in a ``celery worker`` yields (the step is installed there): a drain called
directly (``task.drain()``) or by an in-process test worker runs as before.

**Shutdown** (whatever ``redqueue_drain_yield`` says): when the worker begins a warm shutdown
(SIGTERM) or a cold one (SIGQUIT, SIGINT; with Celery's ``worker_soft_shutdown_timeout``, the
soft shutdown before it), its main process marks the page (Celery's ``worker_shutting_down``,
sent from its signal handler), and every drain of the worker sees it within `STOP_LOOK`: it
takes no further batch, stops lingering, gives the rest of a per-call batch at hand back to an
at-least-once pool, and hands over to a fresh drain job (or releases its flag when the broker
refuses one), so another worker serves the calls at once instead of after the drain's time
budget or, once the shutdown turns cold and kills the drain, the visibility timeout.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard, cast

from celery.signals import task_received, worker_shutting_down

if TYPE_CHECKING:
    from celery import Celery
    from celery.worker import WorkController
    from celery.worker.request import Request
    from kombu.connection import ConnectionPool

    from ..privates import AnyTask

from .config import get_config
from .worker_step import RedQueueStep

logger = logging.getLogger(__name__)

#: Seconds between a drain's looks for other work (and the slice a lingering drain waits in).
LOOK = 0.005
#: Seconds a drain works before it ends for another structure's drain or the broker's messages.
SLICE = 0.1
#: Seconds between a drain's looks at the broker's queues (a round trip to the broker per
#: queue: not at every `LOOK`, or two busy drains would send it hundreds per second).
BROKER_LOOK = SLICE
#: Seconds between the main process's publications while requests wait (idle: on receipt).
PUBLISH = 0.002
#: Longest wait of the publisher when nothing waits (a receipt wakes it at once).
IDLE_PUBLISH = 0.25

#: Seconds between a drain's looks for the worker's shutdown when it does not yield (a
#: lingering drain waits in slices of this length).
STOP_LOOK = 0.1

#: tasks waiting, free processes, bit mask of the structures whose drain jobs wait.
_FORMAT = struct.Struct("qqQ")
#: The shutdown mark, after `_FORMAT` (written once, by the main process's signal handler).
_STOP = struct.Struct("q")


@dataclass(frozen=True)
class Waiting:
    """What waits for a process of this worker."""

    #: Requests that are not drain jobs.
    tasks: int = 0
    #: Processes (threads) free to start a waiting request.
    free: int = 1
    #: One bit per structure whose drain jobs wait (`bit_of`).
    drains: int = 0


@dataclass
class _Worker:
    """The worker's main process, as the step found it (set before the execution pool forks)."""

    pid: int
    concurrency: int
    page: mmap.mmap
    #: Structure task names, sorted: a name's bit is its index (mod 64).
    structures: tuple[str, ...]
    #: Drains look for the worker's other work (``redqueue_drain_yield``).
    yields: bool = True
    #: Drains the continuous consumer runs now (it sets this: `set_busy_source`).
    busy: Callable[[], int] = lambda: 0
    #: The worker's execution pool is green (gevent, eventlet): drain jobs are acked on receipt.
    green: bool = False


_worker: _Worker | None = None


def installed() -> bool:
    """Drains of this process yield (a ``celery worker`` with ``redqueue_drain_yield``)."""
    return _worker is not None and _worker.yields


def shutting_down() -> bool:
    """This process's worker has begun its shutdown (False outside a ``celery worker``)."""
    return _worker is not None and bool(_STOP.unpack_from(_worker.page, _FORMAT.size)[0])


def _on_shutting_down(sender: object = None, **_: object) -> None:
    """Celery's ``worker_shutting_down`` (the main process's signal handler): mark the page."""
    if _worker is not None and os.getpid() == _worker.pid:
        _STOP.pack_into(_worker.page, _FORMAT.size, 1)


def set_busy_source(count: Callable[[], int] | None) -> None:
    """The continuous consumer's count of drains it runs now (they are no requests)."""
    if _worker is not None:
        _worker.busy = count or (lambda: 0)


def bit_of(name: str) -> int:
    """The bit of structure task ``name`` in `Waiting.drains` (0: not a structure)."""
    if _worker is None or name not in _worker.structures:
        return 0
    return 1 << (_worker.structures.index(name) % 64)


def waiting() -> Waiting:
    """What waits for a process of this worker now (nothing outside a worker)."""
    if _worker is None:
        return Waiting()
    if os.getpid() == _worker.pid:
        return _snapshot(_worker)
    tasks, free, drains = _FORMAT.unpack_from(_worker.page, 0)
    return Waiting(int(tasks), int(free), int(drains))


def _snapshot(worker: _Worker) -> Waiting:
    from celery.worker import state

    for _ in range(3):  # the event loop may change the sets while they are copied
        try:
            reserved, active = list(state.reserved_requests), set(state.active_requests)
            break
        except RuntimeError:
            continue
    else:
        return Waiting()
    queued = [request for request in reserved if request not in active]
    free = worker.concurrency - len(active) - worker.busy()
    if len(queued) <= free:  # each will start on a free process
        return Waiting(free=max(free, 0))
    tasks = drains = 0
    for request in queued:
        bit = bit_of(str(request.name))
        if bit and not request.args and not request.kwargs:
            drains |= bit
        else:
            tasks += 1
    return Waiting(tasks, max(free, 0), drains)


def _publish(worker: _Worker) -> Waiting:
    seen = _snapshot(worker)
    _FORMAT.pack_into(worker.page, 0, seen.tasks, seen.free, seen.drains)
    return seen


class Looker:
    """One drain's looks for other work (see the module); built at the drain's start."""

    def __init__(self, task: AnyTask) -> None:
        self.app = task.app
        self.on = installed() and bool(get_config(task.app).drain_yield)
        #: The drain ends at the worker's shutdown (any drain in a ``celery worker``).
        self.watch = _worker is not None
        self.own = bit_of(str(task.name)) if self.on else 0
        self.started = time.monotonic()
        self.next_look = 0.0
        self.next_broker_look = 0.0
        #: Why the drain ends early: "task" or "turn" (another drain, the broker's messages).
        self.seen: str | None = None
        #: The drain ends after the batch at hand.
        self.ending = False
        self.warned = False

    @property
    def urgent(self) -> bool:
        """A task waits: a per-call body takes only the call at hand."""
        return self.seen == "task"

    @property
    def stopping(self) -> bool:
        """The worker shuts down: take no further batch, hand over now (looked at each time)."""
        if self.seen != "stop" and self.watch and shutting_down():
            self.seen, self.ending = "stop", True
        return self.seen == "stop"

    def yielding(self, idle: bool = False) -> bool:
        """The drain should end after the batch at hand (``idle``: it has none, it lingers:
        at once). Looked at most every `LOOK` seconds; once True, it stays True."""
        if self.stopping or not self.on or self.ending:
            return self.ending
        now = time.monotonic()
        worked = now - self.started >= SLICE
        if self.seen is None and now >= self.next_look:
            self.next_look = now + LOOK
            self.seen = self._look(turns=worked or idle)
        self.ending = self.seen == "task" or (self.seen == "turn" and (idle or worked))
        return self.ending

    def _look(self, turns: bool) -> str | None:
        seen = waiting()
        if seen.tasks:
            return "task"
        if seen.drains & ~self.own:
            return "turn"
        if turns and seen.free <= 0 and time.monotonic() >= self.next_broker_look:
            self.next_broker_look = time.monotonic() + BROKER_LOOK
            if self._broker_waiting():
                return "turn"
        return None

    def listen(self, wait: Callable[[float], bool], seconds: float) -> None:
        """Wait on the wake signal (``wait``) up to ``seconds``, in slices of `LOOK`, until
        woken or until other work waits."""
        if not self.watch:
            wait(seconds)
            return
        end, look = time.monotonic() + seconds, LOOK if self.on else STOP_LOOK
        while (left := end - time.monotonic()) > 0:
            if wait(min(left, look)) or self.yielding(idle=True):
                return

    def _broker_waiting(self) -> bool:
        """A message waits in the broker in a queue this worker consumes (a failed look: no)."""
        try:
            return broker_waiting(self.app)
        except Exception as exc:  # a hint only: the drain carries on
            if not self.warned:
                self.warned = True
                logger.warning("redqueue: could not look at the broker's queues (%s)", exc)
            return False


def broker_waiting(app: Celery) -> bool:
    """A message waits in the broker in a queue ``app``'s worker consumes.

    The count is kombu's public ``queue_declare``'s ``message_count``. The worker's own queue
    is declared again, with its own arguments (what the worker does at every connect: a no-op
    for a declared queue); a passive declare would do for most transports, but kombu's Redis
    transport checks a passive declare's queue with ``EXISTS``, which it does not give the
    ``global_keyprefix`` its other commands get, so it would find no queue under a prefix. An
    exclusive or auto-delete queue is declared passively (a redeclare from another connection
    would claim or delete it): under a prefix kombu reports it missing, i.e. empty.
    """
    from kombu.exceptions import ChannelError

    queues = app.amqp.queues.consume_from or app.amqp.queues
    # celery-types types app.pool as a ProducerPool: Celery's is kombu's ConnectionPool.
    with cast("ConnectionPool", app.pool).acquire(block=True, timeout=1) as conn:
        channel = conn.default_channel
        for queue in queues.values():
            passive = bool(queue.exclusive or queue.auto_delete)
            try:
                declared = queue.bind(channel).queue_declare(passive=passive)
            except ChannelError:  # no such queue: nothing waits in it
                continue
            # kombu-stubs type queue_declare's reply as str | None: it is the channel's
            # (name, message_count, consumer_count) tuple.
            if declared.message_count:  # type: ignore[union-attr]
                return True
    return False


class NeighbourStep(RedQueueStep):
    """The worker bootstep that makes its drains yield (see the module)."""

    label = "redqueue drain yield"

    def __init__(self, parent: WorkController, **kwargs: object) -> None:
        global _worker
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.received = threading.Event()
        structures = _structures(parent.app)
        self.enabled = bool(structures)  # the shutdown mark, whether drains yield or not
        self.yields = self.enabled and bool(get_config(parent.app).drain_yield)
        if self.enabled and _worker is None:
            # Here, before the execution pool forks its children: they share the page.
            _worker = _Worker(
                pid=os.getpid(),
                concurrency=max(int(getattr(parent, "concurrency", 1) or 1), 1),
                page=mmap.mmap(-1, _FORMAT.size + _STOP.size),
                structures=structures,
                yields=self.yields,
                green=bool(getattr(getattr(parent, "pool_cls", None), "is_green", False)),
            )
            _FORMAT.pack_into(_worker.page, 0, 0, 1, 0)
            worker_shutting_down.connect(_on_shutting_down, weak=False)
        super().__init__(parent, **kwargs)

    def start(self, parent: WorkController) -> None:
        if not self.yields:
            return
        task_received.connect(self._on_received, weak=False)
        self.stopping.clear()
        self.thread = threading.Thread(target=self._run, name="redqueue-yield", daemon=True)
        self.thread.start()

    def _on_received(
        self, sender: object = None, request: Request | None = None, **_: object
    ) -> None:
        self.received.set()
        if _is_green_drain(request):
            request.acknowledge()  # a drain job under a green execution pool: at once

    def _run(self) -> None:
        worker = _worker
        if worker is None:
            return
        pause = IDLE_PUBLISH
        while not self.stopping.is_set():
            # A receipt comes just before Celery reserves the request: look again soon.
            received = self.received.wait(pause)
            self.received.clear()
            try:
                seen = _publish(worker)
            except Exception:  # a hint only; the next round tries again
                logger.debug("redqueue: publishing the waiting requests failed", exc_info=True)
                seen = Waiting()
            from celery.worker import state

            anything = len(state.reserved_requests) > len(state.active_requests)
            pause = PUBLISH if received or anything or seen.tasks or seen.drains else IDLE_PUBLISH

    def stop(self, parent: WorkController) -> None:
        task_received.disconnect(self._on_received)
        self.stopping.set()
        self.received.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None


def _is_green_drain(request: Request | None) -> TypeGuard[Request]:
    """``request`` is a drain job (a structure's task, no arguments), the execution pool green."""
    if _worker is None or not _worker.green or request is None:
        return False
    return bool(bit_of(str(request.name))) and not request.args and not request.kwargs


def _structures(app: Celery) -> tuple[str, ...]:
    from .checks import STRUCTURE_KINDS

    return tuple(
        sorted(
            name
            for name, task in app.tasks.items()
            if getattr(type(task), "redqueue_kind", None) in STRUCTURE_KINDS
        )
    )
