"""Celery glue for unique locks: `unique(...)` keeps at most one call per key of any Celery task
queued or running (docs/unique.md).

Modes:

* ``queued``: the call site takes the key (``apply_async`` raises
  [`UniqueLockedError`][celery_redqueue.UniqueLockedError] naming the holder while another call
  of that key waits in the queue); the worker gives it back when the body starts. A retry
  takes it again for its message (refused while another call of the key waits).
* ``running``: the worker takes the key when the body starts and gives it back when the body
  ends (on a retry: before its message is published); a call whose body would start while
  another of the key runs fails with ``UniqueLockedError`` (its body does not run).
* ``until_done``: the call site takes the key and the worker keeps it until the body ends
  (success or failure); a retry hands it to the retry's message before publishing it. A
  redelivered message (acks late, its worker died) takes the key over once the dead
  delivery's lease ran out.

While a body runs its lock is renewed every ``ttl / 3`` seconds by a
[`LeaseKeeper`][celery_redqueue.LeaseKeeper]; a worker killed in the body stops renewing, so the
key is free ``ttl`` seconds later at most. The key a call site takes lasts ``queue_ttl`` (plus
the call's countdown) while the call waits in the broker. Releases carry the lease's token: a
holder that lost its lock never releases the next holder's.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, overload

if TYPE_CHECKING:
    from celery import Celery
    from celery.result import AsyncResult

    from ..privates import AnyTask

from ..errors import ConfigurationError, RedQueueError, UniqueLockedError
from ..structures.lease_keeper import LeaseKeeper
from ..structures.lease_types import Lease
from ..structures.unique import QUEUED, RUNNING, Refused, UniqueLocks
from ..validation import seconds
from .config import get_config

logger = logging.getLogger(__name__)

#: The modes of `unique`.
MODES = ("queued", "running", "until_done")

_tables_lock = threading.Lock()
_tables: dict[tuple[int, int, str], UniqueLocks] = {}

KeyFunction = Callable[..., str]

#: The task `unique` decorates: handed back itself, so its type stays the caller's.
_TaskT = TypeVar("_TaskT", bound="AnyTask")


class _UniqueTask(Protocol):
    """What `_Unique.install` reads of the task it decorates, and sets on it."""

    name: str
    unique_mode: str
    unique_ttl: float
    unique_queue_ttl: float
    unique_key: KeyFunction
    unique_locks: Callable[[], UniqueLocks]
    unique_lease: Callable[[], Lease | None]
    apply_async: Callable[..., AsyncResult[object]]
    run: Callable[..., object]

    @property
    def app(self) -> Celery: ...


def unique_locks(app: Celery, name: str) -> UniqueLocks:
    """The app's lock table called ``name`` (the glue uses the task name); one object per
    process."""
    slot = (os.getpid(), id(app), name)
    with _tables_lock:
        table = _tables.get(slot)
        if table is None:
            config = get_config(app)
            table = _tables[slot] = UniqueLocks(config.client(), name, prefix=config.key_prefix)
        return table


@overload
def unique(
    task: None = None,
    *,
    key: KeyFunction | Sequence[str] | None = None,
    mode: str = "until_done",
    ttl: float = 10.0,
    queue_ttl: float = 3600.0,
) -> Callable[[_TaskT], _TaskT]: ...


@overload
def unique(
    task: _TaskT,
    *,
    key: KeyFunction | Sequence[str] | None = None,
    mode: str = "until_done",
    ttl: float = 10.0,
    queue_ttl: float = 3600.0,
) -> _TaskT: ...


def unique(
    task: _TaskT | None = None,
    *,
    key: KeyFunction | Sequence[str] | None = None,
    mode: str = "until_done",
    ttl: float = 10.0,
    queue_ttl: float = 3600.0,
) -> _TaskT | Callable[[_TaskT], _TaskT]:
    """Decorator: at most one call per key of a Celery task (any task: ``@app.task`` too).

    Put it above the task decorator. ``key`` is a function of the call's arguments returning
    the key, or the names of the arguments that make it (default: all of them); ``mode`` is
    ``queued``, ``running`` or ``until_done``; ``ttl`` the lease in seconds, renewed while the
    body runs (how long a dead worker keeps its key); ``queue_ttl`` how long the key the call
    site takes (``queued``, ``until_done``) lasts while the call waits in the broker (plus its
    ``countdown`` or ``eta``): a call lost before its body starts keeps its key that long at
    most. A refused duplicate raises `UniqueLockedError` (``.holder`` is the task id of the
    call that holds the key): at the call site in ``queued`` and ``until_done``, as the call's
    result in ``running``.

    Example:

        @unique(key=["account"], mode="until_done", ttl=30)
        @app.task
        def rebuild_index(account):
            ...
    """
    if mode not in MODES:
        raise ConfigurationError(f"unique: mode must be one of {MODES}, got {mode!r}")
    lease_ttl = seconds("ttl", ttl, positive=True)
    queue_lease_ttl = seconds("queue_ttl", queue_ttl, positive=True)
    if (key is not None and not callable(key)) and (
        isinstance(key, str) or not all(isinstance(n, str) for n in key)
    ):
        raise ConfigurationError(f"unique: key must be a function or argument names: {key!r}")

    def decorate(task: _TaskT) -> _TaskT:
        _Unique(task, key, mode, lease_ttl, queue_lease_ttl).install()
        return task

    return decorate if task is None else decorate(task)


@dataclass
class _Holding:
    """The lock of the body running in this context (for ``self.retry`` and fencing)."""

    owner: _Unique
    task_id: str
    key: str
    locks: UniqueLocks
    keeper: LeaseKeeper | None
    #: The lock was released or handed back already (a retry published its message).
    settled: bool = False


#: The unique body running in this context (a worker thread, or a greenlet).
_HOLDING: contextvars.ContextVar[_Holding | None] = contextvars.ContextVar(
    "redqueue_unique", default=None
)


def unique_lease() -> Lease | None:
    """The lock lease of the unique body running now (``running`` and ``until_done``), or None:
    its ``fence`` is the fencing token to give the store the body writes to."""
    held = _HOLDING.get()
    return None if held is None or held.keeper is None else held.keeper.lease


class _Unique:
    def __init__(
        self,
        task: AnyTask,
        key: KeyFunction | Sequence[str] | None,
        mode: str,
        ttl: float,
        queue_ttl: float,
    ) -> None:
        self.task = task
        self.key = key
        self.mode = mode
        self.ttl = ttl
        self.queue_ttl = queue_ttl
        self.run: Callable[..., object] = task.run
        self.apply_async: Callable[..., AsyncResult[object]] = task.apply_async
        try:
            self.signature: inspect.Signature | None = inspect.signature(self.run)
        except (TypeError, ValueError):
            self.signature = None

    @property
    def who(self) -> str:
        # Read at each use: a prefork child has its own pid.
        return f"{socket.gethostname()}:{os.getpid()}"

    def install(self) -> None:
        # Celery's Task declares none of these: they are set here, on this one task.
        task = cast("_UniqueTask", self.task)
        task.unique_mode = self.mode
        task.unique_ttl = self.ttl
        task.unique_queue_ttl = self.queue_ttl
        task.unique_key = self.key_of
        task.unique_locks = functools.partial(unique_locks, task.app, task.name)
        task.unique_lease = unique_lease
        task.apply_async = self.call_site
        body = self.body

        @functools.wraps(self.run)
        def run(*args: object, **kwargs: object) -> object:
            return body(*args, **kwargs)

        task.run = run

    def locks(self) -> UniqueLocks:
        return unique_locks(self.task.app, self.task.name)

    def key_of(self, *args: object, **kwargs: object) -> str:
        """The lock key of a call with these arguments."""
        if callable(self.key):
            return str(self.key(*args, **kwargs))
        if self.signature is not None:
            bound = self.signature.bind_partial(*args, **kwargs)
            values = dict(bound.arguments)
        else:
            values = {str(n): v for n, v in enumerate(args)} | kwargs
        names = list(self.key) if self.key is not None else list(values)
        missing = [n for n in names if n not in values]
        if missing:
            raise ConfigurationError(f"{self.task.name}: unique key arguments missing: {missing}")
        return ",".join(f"{n}={values[n]!r}" for n in names) or "-"

    def call_site(
        self,
        args: Sequence[object] | None = None,
        kwargs: Mapping[str, object] | None = None,
        **options: Any,
    ) -> AsyncResult[object]:
        # ``options`` are Celery's apply_async options, of as many types as there are keys.
        task_id = options.get("task_id")
        held = _HOLDING.get()
        if held is not None and held.owner is self and task_id == held.task_id:
            # ``self.retry`` (or ``autoretry_for``) publishing the running call's next message.
            return self.retry_site(held, args, kwargs, options)
        if self.mode == RUNNING or (task_id and task_id == self.task.request.id):
            # A message of the call running here (the redelivery retry in ``body``).
            return self.apply_async(args, kwargs, **options)
        key = self.key_of(*(args or ()), **(kwargs or {}))
        task_id = options["task_id"] = task_id or _new_id()
        got = self.locks().acquire(
            key, task_id=task_id, token=task_id, ttl=self.queue_ttl + _delay(options),
            who=self.who, phase=QUEUED,
        )  # fmt: skip
        if isinstance(got, Refused):
            raise _refused(self.task.name, got)
        return self.publish(key, task_id, args, kwargs, options)

    def publish(
        self,
        key: str,
        task_id: str,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        options: Mapping[str, object],
    ) -> AsyncResult[object]:
        try:
            return self.apply_async(args, kwargs, **options)
        except BaseException:
            self.locks().release_queued(key, task_id)
            raise

    def retry_site(
        self,
        held: _Holding,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        options: Mapping[str, object],
    ) -> AsyncResult[object]:
        """The retry's message, published after its lock is settled by mode: ``until_done``
        hands the running lock to it (a queued lock of the same task id, so no duplicate slips
        in between), ``running`` releases it (the retry must not find its own lock held),
        ``queued`` takes the key again as a queued call (refused while another call of the key
        waits: that one does the work; Celery then rejects the retry)."""
        locks, key, task_id = held.locks, held.key, held.task_id
        wait = self.queue_ttl + _delay(options)
        if self.mode == QUEUED:
            got = locks.acquire(
                key, task_id=task_id, token=task_id, ttl=wait, who=self.who, phase=QUEUED
            )
            if isinstance(got, Refused):
                raise _refused(self.task.name, got)
            return self.publish(key, task_id, args, kwargs, options)
        held.settled = True
        handed = self.settle(held, (task_id, wait) if self.mode == "until_done" else None)
        if not handed:
            return self.apply_async(args, kwargs, **options)
        return self.publish(key, task_id, args, kwargs, options)

    def settle(self, held: _Holding, hand_back: tuple[str, float] | None) -> bool:
        """Release (or hand back) the body's lock; False when it was lost or Redis failed."""
        assert held.keeper is not None
        lease = held.keeper.stop()
        try:
            if held.locks.release(lease, hand_back=hand_back):
                return True
            logger.warning("%s: unique key %r was lost before release", self.task.name, held.key)
        except RedQueueError:
            logger.exception("%s: releasing unique key %r failed", self.task.name, held.key)
        return False

    def body(self, *args: object, **kwargs: object) -> object:
        request = self.task.request
        if request.called_directly or (request.is_eager and not request.id):
            return self.run(*args, **kwargs)
        key = self.key_of(*args, **kwargs)
        locks = self.locks()
        task_id = cast("str", request.id)  # a call with a message (checked above) has its id
        if self.mode == QUEUED:
            locks.release_queued(key, task_id)
            return self.call(_Holding(self, task_id, key, locks, None), args, kwargs)
        got = locks.acquire(
            key, task_id=task_id, ttl=self.ttl, who=self.who, phase=RUNNING,
            claim=self.mode == "until_done",
        )  # fmt: skip
        if isinstance(got, Refused):
            if got.holder == task_id and self.mode == "until_done":
                # An earlier delivery of this very message holds it: it died (or still runs);
                # come back once its lease ran out, and take the key over then.
                wait = max(got.expires_at - datetime.now(timezone.utc).timestamp(), 0) + 1
                raise self.task.retry(countdown=wait, max_retries=None)
            raise _refused(self.task.name, got)
        keeper = LeaseKeeper(locks, got, self.ttl)
        keeper.start()
        held = _Holding(self, task_id, key, locks, keeper)
        try:
            return self.call(held, args, kwargs)
        finally:
            if not held.settled:
                self.settle(held, None)

    def call(self, held: _Holding, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        reset = _HOLDING.set(held)
        try:
            return self.run(*args, **kwargs)
        finally:
            _HOLDING.reset(reset)


def _delay(options: Mapping[str, Any]) -> float:
    """Seconds a call's ``countdown`` or ``eta`` keeps it from running."""
    eta = options.get("eta")
    if isinstance(eta, datetime):
        now = datetime.now(eta.tzinfo or timezone.utc)
        return max((eta - now).total_seconds(), 0.0)
    return max(float(options.get("countdown") or 0), 0.0)


def _refused(name: str, refused: Refused) -> UniqueLockedError:
    return UniqueLockedError(
        f"{name}: unique key {refused.key!r} is held by task {refused.holder}",
        refused.key,
        refused.holder,
    )


def _new_id() -> str:
    from uuid import uuid4

    return str(uuid4())
