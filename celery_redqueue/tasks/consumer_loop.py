"""The continuous consumer's dispatcher: one thread in the worker's main process that waits for
work on the structures it serves and runs their drains in the worker's own execution pool.

What it serves, its listing on the wake signals, shutdown and costs: docs/consumer.md. A drain
it runs is a drain job's drain (``task.drain()``); only the follow-up drain jobs it asks for are
handed back here (`handover`). The execution pool is asked through its public
``apply_async(target, args, callback=...)`` with `run_drain`, a module-level function (prefork
pickles it); under prefork with the event loop the call is made from the loop's own thread
(woken through a pipe), elsewhere from the dispatcher's thread.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, cast

from celery import current_app

from ..errors import RedQueueError
from ..structures.wake import WakeSignal
from .base import RedQueueTask
from .config import get_config
from .handover import capturing
from .wake_wait import has_work, kick_signal, signals_of, wait_for_work

if TYPE_CHECKING:
    from billiard.einfo import ExceptionInfo
    from celery import Celery
    from celery.concurrency.base import BasePool
    from kombu.asynchronous import Hub

logger = logging.getLogger(__name__)

#: The app whose tasks `run_drain` looks up: set in the worker's main process before the
#: execution pool starts, so prefork children inherit it.
_APP: Celery | None = None

#: Seconds a structure whose drain failed (Redis unreachable) waits before the next try.
RETRY_PAUSE = 1.0
#: Longest blocking wait of the listener. A structure whose drain ended is taken into the wait
#: at once (the dispatcher kicks the listener: `Dispatcher._kick`); the slice bounds the rest
#: (a structure whose pause after a failure ended, a lost kick).
LISTEN_SLICE = 0.5
#: The consumer's listing is renewed when this share of it is left (so a stalled round or a
#: slow Redis still renews it in time).
REARM_SHARE = 2 / 3


def consumer_listener() -> str:
    """This worker's consumer's listener id (host, main process): its warm shutdown takes
    exactly its own listing off."""
    return f"consumer:{socket.gethostname()}:{os.getpid()}"


def listen_seconds(task: RedQueueTask) -> float:
    """How long the consumer lists itself on the task's wake signal for: its drain lease (so a
    killed consumer stops absorbing calls within one lease), 0 when it has no wake signal."""
    try:
        if signals_of(task) is None:
            return 0.0
    except RedQueueError:
        return 0.0
    return float(task.drain_settings.lease)


class DrainReply(TypedDict, total=False):
    """What `run_drain` returns: the drain jobs its drain asked for, or its error."""

    error: str
    #: Drain jobs asked for now, and seconds until the soonest asked for later (`handover`).
    now: int
    later: float | None


def run_drain(task_name: str) -> DrainReply:
    """Run one drain of ``task_name`` in this execution pool's process or thread; never raises
    (the threads execution pool gives a raised error to no callback). Returns what it asked
    for (or the error)."""
    app = _APP if _APP is not None else current_app
    try:
        task = cast("RedQueueTask", app.tasks[task_name])  # the consumer serves only those
        with capturing(task_name) as handover:
            task.drain()
    except Exception as exc:
        logger.warning("redqueue consumer: drain of %s failed: %s", task_name, exc, exc_info=True)
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"now": handover.now, "later": handover.later}


@dataclass
class Served:
    """One task whose structure the consumer serves."""

    task: RedQueueTask
    #: Most drains of this structure at once.
    max_drains: int
    running: int = 0
    #: Monotonic time a drain is due (asked for by a drain: now, or a delayed call's moment).
    due_at: float | None = None
    #: Monotonic time before which the structure is not looked at (after a failure).
    paused_until: float = 0.0
    #: Seconds the consumer lists itself on the wake signal for (0: the structure has none: it
    #: is looked at instead), and the monotonic time to renew that listing.
    listen: float = 0.0
    rearm_at: float = 0.0

    @property
    def name(self) -> str:
        return str(self.task.name)


class Dispatcher:
    """Waits for work and hands drains to the execution pool; see the module's docstring."""

    def __init__(
        self,
        app: Celery,
        execution_pool: BasePool,
        served: list[Served],
        concurrency: int,
        hub: Hub | None = None,
        reap_interval: float = 5.0,
    ) -> None:
        self.app = app
        self.execution_pool = execution_pool
        self.served = {s.name: s for s in served}
        self.concurrency = max(1, int(concurrency))
        self.hub = hub
        self.reap_interval = reap_interval
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._stopping = threading.Event()
        #: The dispatcher's thread and the listener's.
        self._threads: list[threading.Thread] = []
        self._pending: collections.deque[str] = collections.deque()
        self._pipe: tuple[int, int] | None = None
        self._next_reap = 0.0
        self.listener = consumer_listener()
        #: The listener's own list, in its blocking read beside the signals: pushed to when a
        #: structure it does not wait on went idle, so that it waits on that one too at once.
        self._kick_signal: WakeSignal | None = None
        #: Names the listener waits on now, and whether a kick is due (under ``_lock``).
        self._waiting: frozenset[str] = frozenset()
        self._kick_wanted = False
        self._idle = threading.Event()

    # Life cycle

    def start(self) -> None:
        global _APP
        _APP = self.app
        if self.hub is not None:
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            self._pipe = (read_end, write_end)
            self.hub.add_reader(read_end, self._on_pipe)
        self._kick_signal = kick_signal(
            [s.task for s in self.served.values()],
            get_config(self.app).key_prefix,
            self.listener,
        )
        for served in self.served.values():
            served.listen = listen_seconds(served.task)
            # Listed before the first drain looks: a call stored in between wakes it.
            self._arm(served)
            served.due_at = time.monotonic()  # a first drain: work already there, delayed calls
        for target, name in (
            (self._run, "redqueue-consumer"),
            (self._listen, "redqueue-consumer-wait"),
        ):
            self._threads.append(threading.Thread(target=target, name=name, daemon=True))
            self._threads[-1].start()

    def stop(self) -> None:
        """Stop waiting and dispatching, take the consumer's listing off every structure (calls
        stored from then on ask for drain jobs), and hand the structures with work to drain
        jobs (one per structure with a drain running or due, or calls waiting: those stored
        while it was listed asked for none), so that another worker (or this one's next start)
        carries on. Running drains finish in the execution pool: they ack their batches; its
        own shutdown waits for them (warm) or ends them (cold)."""
        self._stopping.set()
        self._changed.set()
        self._idle.set()
        self._kick()
        for thread in self._threads:
            thread.join(timeout=30)
        if self.hub is not None and self._pipe is not None:
            try:
                self.hub.remove_reader(self._pipe[0])
            except Exception:  # the loop may be gone already
                logger.debug("redqueue consumer: removing the pipe reader failed", exc_info=True)
        for served in self.served.values():
            self._arm(served, off=True)
        if self._kick_signal is not None:
            try:
                self._kick_signal.client.delete(self._kick_signal.key)
            except Exception:  # it expires on its own
                logger.debug("redqueue consumer: deleting the kick list failed", exc_info=True)
        with self._lock:
            moments = {s.name: (s.running, s.due_at) for s in self.served.values()}
        for served in self.served.values():
            running, due_at = moments[served.name]
            now = bool(running) or _waiting(served)  # a drain job finds what is due when
            if not now and due_at is None:
                continue
            countdown = None if now or due_at is None else due_at - time.monotonic()
            served.task.send_drain_or_release(
                countdown=countdown if countdown and countdown > 0 else None
            )
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    def running_drains(self) -> int:
        """Drains this consumer runs in the execution pool now (no requests: `neighbour`)."""
        with self._lock:
            return sum(s.running for s in self.served.values())

    # The dispatcher's thread

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._changed.clear()  # before the round: a change during it is not missed
            try:
                timeout = self._round()
            except Exception:
                logger.exception("redqueue consumer: dispatch round failed")
                timeout = RETRY_PAUSE
            if timeout > 0:
                self._changed.wait(timeout)

    def _round(self) -> float:
        """Dispatch what is due; returns how long to wait before looking again."""
        now = time.monotonic()
        if now >= self._next_reap:
            self._next_reap = now + self.reap_interval
            self._reap()
        for served in self.served.values():
            if served.listen and served.rearm_at <= now:
                self._arm(served)
        with self._lock:
            kick, self._kick_wanted = self._kick_wanted, False
        if kick:
            self._kick()
        with self._lock:
            free = self.concurrency - sum(s.running for s in self.served.values())
            due = [
                s
                for s in self.served.values()
                if s.running < s.max_drains
                and s.paused_until <= now
                and s.due_at is not None
                and s.due_at <= now
            ]
        for served in due[: max(free, 0)]:
            self._dispatch(served)
        return self._next_wait(time.monotonic())

    def _listen(self) -> None:
        """The listener's thread: wait on the idle structures' wake signals (or look at those
        without one) and mark the structures woken as due."""
        while not self._stopping.is_set():
            self._idle.clear()  # before looking: a drain ending meanwhile is not missed
            now = time.monotonic()
            with self._lock:
                # A structure waiting for a due time still takes calls for now meanwhile.
                idle = [
                    s.task
                    for s in self.served.values()
                    if s.running == 0
                    and (s.due_at is None or s.due_at > now)
                    and s.paused_until <= now
                ]
                self._waiting = frozenset(task.name for task in idle)
            if not idle:
                self._idle.wait(LISTEN_SLICE)
                continue
            try:
                woken = wait_for_work(idle, self._stopping, LISTEN_SLICE, self._kick_signal)
            except Exception:
                logger.exception("redqueue consumer: waiting for work failed")
                self._stopping.wait(RETRY_PAUSE)
                continue
            finally:
                with self._lock:
                    self._waiting = frozenset()
            for task in woken:
                self._want(self.served[task.name], 1, None)

    def _next_wait(self, now: float) -> float:
        """Seconds until something can be dispatched (a drain ending sets ``_changed``)."""
        moments = [self._next_reap]
        moments += [s.rearm_at for s in self.served.values() if s.listen]
        with self._lock:
            if sum(s.running for s in self.served.values()) < self.concurrency:
                for s in self.served.values():
                    if s.running < s.max_drains and s.due_at is not None:
                        moments.append(max(s.due_at, s.paused_until))
        return max(min(moments) - now, 0.0)

    def _kick(self) -> None:
        """Make the listener end its blocking read and look again at what to wait on."""
        if self._kick_signal is None:
            return
        try:
            with self._kick_signal.client.pipeline(transaction=False) as pipe:
                pipe.rpush(self._kick_signal.key, 1)
                pipe.pexpire(self._kick_signal.key, int(LISTEN_SLICE * 4000))
                pipe.execute()
        except Exception as exc:  # the listener's slice ends on its own
            logger.debug("redqueue consumer: kicking the listener failed: %s", exc)

    def _arm(self, served: Served, off: bool = False) -> None:
        """List the consumer on the structure's wake signals for ``served.listen`` seconds (or
        take it off); a failure (Redis unreachable) is retried after `RETRY_PAUSE`: meanwhile
        stores ask for drain jobs, which lose nothing."""
        if not served.listen:
            return
        try:
            for signal in signals_of(served.task) or ():
                signal.arm(self.listener, 0.0 if off else served.listen)
        except RedQueueError as exc:
            logger.warning("redqueue consumer: listening on %s failed: %s", served.name, exc)
            served.rearm_at = time.monotonic() + RETRY_PAUSE
            return
        served.rearm_at = time.monotonic() + served.listen * (1 - REARM_SHARE)

    def _reap(self) -> None:
        """The watchdog: take back expired holds of every served structure, and run the drain
        a structure needs (work under an expired drain flag, or work taken back) here."""
        for served in list(self.served.values()):
            try:
                with capturing(served.name) as handover:
                    served.task.reap()
            except RedQueueError as exc:
                logger.warning("redqueue consumer: reaping %s failed: %s", served.name, exc)
                continue
            if handover.wanted():
                self._want(served, handover.now, handover.later)

    # Dispatching

    def _dispatch(self, served: Served) -> None:
        with self._lock:
            served.running += 1
            served.due_at = None
        if self.hub is not None and self._pipe is not None:
            self._pending.append(served.name)
            os.write(self._pipe[1], b"x")
        else:
            self._apply(served.name)

    def _on_pipe(self, *_: object) -> None:
        """In the event loop's thread: read the pipe and apply what is pending."""
        try:
            while os.read(self._pipe[0] if self._pipe else -1, 512):
                pass
        except (BlockingIOError, OSError):
            pass
        while self._pending:
            self._apply(self._pending.popleft())

    def _apply(self, name: str) -> None:
        done: Callable[[DrainReply | ExceptionInfo], None] = lambda result: self._done(name, result)  # noqa: E731
        try:
            self.execution_pool.apply_async(
                run_drain,
                args=(name,),
                callback=done,
                error_callback=done,
            )
        except Exception as exc:
            logger.warning(
                "redqueue consumer: the execution pool refused a drain of %s: %s", name, exc
            )
            self._done(name, {"error": repr(exc)})

    def _done(self, name: str, result: DrainReply | ExceptionInfo) -> None:
        """A drain ended (in the execution pool's result thread or the event loop)."""
        served = self.served[name]
        if not isinstance(result, dict):  # an error callback's ExceptionInfo
            result = {"error": repr(result)}
        with self._lock:
            served.running -= 1
            # Idle now: the listener must wait on it too (it waits on others, or on nothing).
            self._kick_wanted = self._kick_wanted or (
                bool(self._waiting) and name not in self._waiting
            )
            if "error" in result:
                served.paused_until = time.monotonic() + RETRY_PAUSE
        if "error" not in result:
            self._want(served, int(result.get("now") or 0), result.get("later"))
        self._idle.set()
        self._changed.set()

    def _want(self, served: Served, now: int, later: float | None) -> None:
        """A drain asked for more: now, or in ``later`` seconds."""
        when = time.monotonic() if now else None
        if later is not None:
            moment = time.monotonic() + float(later)
            when = moment if when is None else min(when, moment)
        if when is None:
            return
        with self._lock:
            served.due_at = when if served.due_at is None else min(served.due_at, when)
        self._changed.set()


def _waiting(served: Served) -> bool:
    """The structure has calls waiting (True when that cannot be told: a drain job finds out)."""
    try:
        return has_work(served.task)
    except RedQueueError:
        return True
