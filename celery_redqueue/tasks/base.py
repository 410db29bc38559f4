"""What every task backed by a redqueue structure shares: drain jobs (argument-less, marked by
`DRAIN_HEADER`, sent through `send_drain`, released when the broker refuses them), the
``__call__`` dispatch that runs a drain, beat rows, retries inside a stored call, and the structure
built once per process. Storing calls is `producing`'s; the kinds: `pool`, `bucket`, `stream`.

A redqueue task composes with other task bases (a Flask app's ``task_cls``, Django's
``DjangoTask``, a base of your own), in either order. Whichever base's ``__call__`` wins,
`entry_point()` makes drain jobs recognised first (`RedQueueTask._enter`); a direct call then
goes on through the other bases' ``__call__``, and each stored call a drain runs goes through
them too (e.g. inside Flask's app context), one call at a time, without Celery's own
``__call__`` pushing a second request."""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, cast, overload

from celery import Task

if TYPE_CHECKING:
    from celery import Celery
    from celery.exceptions import Retry
    from celery.result import AsyncResult

from ..errors import RedQueueError, SerializationError
from ..privates import check_arguments, exec_options, push_request_of_calls, undecorated_body
from ..structures.protocols import Drained, Producer
from .beat import DrainSummary, register_beat
from .broker import check_transport, is_transient, refused
from .config import get_config
from .handover import handed_over
from .heartbeat import heartbeat
from .options import DrainSettings, check_option_names, warn_if_task_cls_dropped
from .retries import StoredRetry
from .wire import DRAIN_HEADER, REAPER_TASK

logger = logging.getLogger(__name__)
_T = TypeVar("_T")


class per_process(Generic[_T]):
    """A task attribute built on first use in each process: ``pool = per_process(_make_pool)``.

    The value is kept in the task's ``__dict__``, so later reads are plain attribute reads (the
    producer's path reads the structure on every call), and dropped in a forked child, which
    must not reuse its parent's connections (a prefork child builds its own)."""

    def __init__(self, build: Callable[[Any], _T]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        _PER_PROCESS.add(name)

    @overload
    def __get__(self, task: None, owner: type | None = None) -> per_process[_T]: ...
    @overload
    def __get__(self, task: object, owner: type | None = None) -> _T: ...
    def __get__(self, task: object, owner: type | None = None) -> _T | per_process[_T]:
        if task is None:
            return self
        value = self.build(task)
        task.__dict__[self.name] = value
        _holders.add(task)
        return value


#: The names of `per_process` attributes, and the tasks holding any: a forked child drops them.
_PER_PROCESS: set[str] = set()
_holders: weakref.WeakSet[object] = weakref.WeakSet()


def _drop_in_child() -> None:
    for task in list(_holders):
        for name in _PER_PROCESS:
            task.__dict__.pop(name, None)
    _holders.clear()


os.register_at_fork(after_in_child=_drop_in_child)


def error_text(exc: BaseException) -> str:
    """What a dead letter keeps of a failure."""
    return f"{type(exc).__name__}: {exc}"


#: The redqueue task whose ``__call__`` chain is running in this context, and whether it runs
#: one stored call of a drain (True) or a direct call (False). Outer entries dispatch a call
#: once; inner ones (reached through another base's ``super().__call__``) only pass it on.
ACTIVE: contextvars.ContextVar[tuple[object, bool] | None] = contextvars.ContextVar(
    "redqueue_call", default=None
)


def entry_point(owner: type, inner: Callable[..., object] | None) -> Callable[..., object]:
    """The ``__call__`` every redqueue class ends up with: whichever base's ``__call__`` would
    win, drain jobs are recognised first, then the call goes on to ``inner`` (the class's own
    ``__call__``) or to the next ``__call__`` in the MRO."""

    def __call__(self: RedQueueTask, *args: object, **kwargs: object) -> object:
        return self._enter(owner, inner, args, kwargs)

    __call__._redqueue_entry = True  # type: ignore[attr-defined]
    __call__._redqueue_owner = owner  # type: ignore[attr-defined]
    __call__._redqueue_inner = inner  # type: ignore[attr-defined]
    __call__.__qualname__ = f"{owner.__qualname__}.__call__"
    return __call__


_ENDS_AT_TASK_CALL: dict[type, bool] = {}


def ends_at_task_call(cls: type) -> bool:
    """Whether a stored call's ``__call__`` chain on ``cls`` goes straight to Celery's own
    ``Task.__call__`` (no inner ``__call__``, no other base's in between); kept per class."""
    known = _ENDS_AT_TASK_CALL.get(cls)
    if known is None:
        call = cls.__call__
        owner = getattr(call, "_redqueue_owner", None)
        known = _ENDS_AT_TASK_CALL[cls] = (
            owner is not None
            and getattr(call, "_redqueue_inner", None) is None
            and super(owner, cls).__call__ is Task.__call__
        )
    return known


# Task is generic in celery-types' stubs only: not subscriptable at run time on every supported
# Celery, so its type arguments stay implicit (Any) here.
class RedQueueTask(Task):  # type: ignore[type-arg]
    """Shared plumbing of tasks backed by a redqueue structure.

    It composes with other task bases (a Flask app's ``task_cls``, Django's ``DjangoTask``, a
    base of your own) in either order: a drain job is recognised whichever ``__call__`` wins,
    and each stored call runs through the other bases' ``__call__`` (so, e.g., inside Flask's
    app context), one call at a time.
    """

    #: A message is acknowledged after its job returned: a by-name call's message only once
    #: the call is stored (`by_name`); a drain job's when the drain ended.
    acks_late = True

    #: The task kind (``"pool"``, ``"bucket"``, ``"stream"``), its options' prefix: set by each
    #: kind's class (annotated only here, so the classes that set it are a class's kinds).
    redqueue_kind: str

    @classmethod
    def read_drain_settings(cls) -> DrainSettings | None:
        """The options every kind with a drain has (``pool_drain_lease``...), checked: each
        kind's class reads its own ``<kind>_*`` attributes. None on a class with no kind."""
        return None

    @functools.cached_property
    def drain_settings(self) -> DrainSettings:
        """The drain options, read once per task: what the kind-blind code reads."""
        settings = self.read_drain_settings()
        if settings is None:
            raise TypeError(f"{type(self).__qualname__} has no kind: no pool, bucket or stream")
        return settings

    @property
    def redqueue_results(self) -> bool:
        """Per-call results are on (the kind's ``*_results`` option)."""
        return self.drain_settings.results

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        check_option_names(cls)
        cls.read_drain_settings()  # refuses a bad value at the declaration
        if not getattr(cls.__call__, "_redqueue_entry", False):
            # Another base's __call__ (or the class's own) would win: wrap it (replacing the
            # method is the point).
            cls.__call__ = entry_point(cls, cls.__dict__.get("__call__"))  # type: ignore[method-assign]

    # --- the __call__ dispatch (see the module: whichever base's __call__ wins) ----------

    # A direct or eager call goes on to Task.__call__: its body then runs under the call's own
    # request on every Celery (before 5.5 a bare one: `push_request_of_calls`).
    push_request = push_request_of_calls()

    def _in_stored_call(self) -> bool:
        """Whether this task is running one stored call of a drain (not a direct call)."""
        active = ACTIVE.get()
        return active is not None and active[0] is self and active[1]

    def _enter(
        self,
        owner: type,
        inner: Callable[..., object] | None,
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> object:
        active = ACTIVE.get()
        if active is not None and active[0] is self:
            return self._pass_on(owner, inner, active[1], args, kwargs)
        if self._is_drain_request(args, kwargs):
            return self.drain().as_dict()
        if self._is_by_name_call(args, kwargs):
            return self._store_by_name(args, kwargs)
        args, kwargs = self._direct_call(args, kwargs)
        token = ACTIVE.set((self, False))
        try:
            return self._pass_on(owner, inner, False, args, kwargs)
        finally:
            ACTIVE.reset(token)

    def _pass_on(
        self,
        owner: type,
        inner: Callable[..., object] | None,
        stored: bool,
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> object:
        if inner is not None:
            return inner(self, *args, **kwargs)
        following = super(owner, self).__call__  # type: ignore[arg-type]
        if stored and getattr(following, "__func__", None) is Task.__call__:
            # Celery's own __call__ would push a request of its own and call the autoretry
            # wrapper; a stored call keeps the drain's request and its structure's retries.
            return self._body()(*args, **kwargs)
        return following(*args, **kwargs)

    def _direct_call(
        self, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        """The arguments a direct call (not a stored one) hands the body (subclasses)."""
        return args, kwargs

    def _stored_runner(self) -> Callable[..., object]:
        """`_run_call`, resolved once for a whole batch of stored calls: when no base but
        Celery's ``Task`` has a ``__call__`` of its own, the chain would end at the body (see
        `_pass_on`), so the runner calls the body straight, a few microseconds less per call."""
        if not ends_at_task_call(type(self)):
            return self._run_call
        body, active = self._body(), (self, True)

        def run(*args: object, **kwargs: object) -> object:
            token = ACTIVE.set(active)
            try:
                return body(*args, **kwargs)
            finally:
                ACTIVE.reset(token)

        return run

    def _run_call(self, *args: object, **kwargs: object) -> object:
        """Run the body on one stored call, through every base's ``__call__`` (the per-call
        context they give, e.g. Flask's app context), never through the drain dispatch."""
        token = ACTIVE.set((self, True))
        try:
            return type(self).__call__(self, *args, **kwargs)
        finally:
            ACTIVE.reset(token)

    def _is_by_name_call(self, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
        """A message with arguments that the structure stores instead of running (pools and
        buckets: `ProducerTask`); a stream task's by-name calls run the body as before."""
        return False

    def _store_by_name(self, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        raise NotImplementedError  # only reached when _is_by_name_call says so

    def drain(self) -> DrainSummary:
        """Run stored calls until the structure has none ready or the time budget is spent (the
        kind's `_drain`); returns what it did.

        While it runs, the process's heartbeat renews the drain flag and the work in flight,
        so neither expires under a long body. A drain that raised is watched after
        (`_watch_after_failure`).
        """
        try:
            with self._held_while_draining():
                return self._drain()
        except Exception:
            self._watch_after_failure()
            raise

    def _drain(self) -> DrainSummary:
        """One drain of the kind's structure (subclasses)."""
        raise NotImplementedError

    def _held_while_draining(self) -> AbstractContextManager[None]:
        """What the heartbeat renews while a drain runs: the structure's drain flag."""
        return heartbeat().holding(self.structure)

    def retry(self, *args: object, **options: object) -> Retry:
        """Inside a stored call, raise `StoredRetry` for the drain to handle (the structure
        hands the call out again after ``countdown``, at ``eta``, else after
        ``default_retry_delay``, within ``max_retries``: `retries.judge`); elsewhere, Celery's
        retry. It takes Celery's arguments, positional or named."""
        if self._in_stored_call():
            given = inspect.signature(Task.retry).bind(self, *args, **options).arguments
            when = given["countdown"] if given.get("countdown") is not None else given.get("eta")
            raise StoredRetry(given.get("exc"), when, given.get("max_retries"))
        # Passed on as given: they are Celery's own arguments (checked by Celery's retry).
        celery_retry = cast("Callable[..., Retry]", super().retry)
        return celery_retry(*args, **options)

    @classmethod
    def bind(cls, app: Celery) -> Celery:
        bound = super().bind(app)
        warn_if_task_cls_dropped(cls, app)
        if cls.name and cls.name != REAPER_TASK:
            check_transport(app)  # a broker that can never take a drain job fails here
            config = get_config(app)
            if config.beat:
                register_beat(app, "redqueue: reap", config.reaper_interval, REAPER_TASK, {})
                # Each structure's drain runs on a schedule too, as a safety net (None: no row).
                settings = cls.read_drain_settings()
                if settings is not None and (interval := settings.interval):
                    drain_header = {DRAIN_HEADER: 1}
                    register_beat(
                        app, f"redqueue: drain {cls.name}", interval, cls.name, drain_header
                    )
        return bound

    def send_drain(self, **options: Any) -> AsyncResult[object] | None:
        """Send one argument-less drain job for this task to the broker.

        It goes through ``send_task`` with the task's own routing options: the task's signature
        check would refuse a call without the body's arguments (a consumer's: `handover`).
        """
        if handed_over(self.name, options.get("countdown")):
            return None
        options = dict(exec_options(self), **options)
        options.setdefault("ignore_result", self.ignore_result)
        options["headers"] = dict(options.get("headers") or {}, **{DRAIN_HEADER: 1})
        return self.app.send_task(self.name, (), {}, task_type=self, **options)

    def check_call(
        self, args: Sequence[object] | None, kwargs: Mapping[str, object] | None
    ) -> None:
        """Refuse, at the call site, arguments the body cannot take (Celery's own check)."""
        if self.typing:
            check_arguments(self, args, kwargs)

    def _is_drain_request(self, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
        """A drain job: no arguments and the drain header, or no arguments, a body that needs
        some, and a message behind it (a beat row run by hand, ``celery call``, Flower)."""
        if args or kwargs:
            return False
        if getattr(self.request, DRAIN_HEADER, None):
            return True
        return not self.request.called_directly and self._needs_arguments()

    def _needs_arguments(self) -> bool:
        """The body cannot be called without arguments."""
        try:
            inspect.signature(self._body()).bind()
        except TypeError:
            return True
        except ValueError:  # no signature to read: assume a plain call is meant
            return False
        return False

    def reap(self) -> int:
        """Return expired reservations of this task's structure; returns how many."""
        raise NotImplementedError

    def _watch_after_failure(self) -> None:
        """A drain that raised (Redis unreachable or restarted under it) leaves its lease to
        run out over the structure's calls, and its work in flight to expire: have this
        process's heartbeat reap the structure every second until both have (plus a margin),
        so that the drain the work needs is sent even with beat off."""
        settings = self.drain_settings
        window = settings.visibility_timeout + settings.lease
        heartbeat().watch(self.structure, self.reap, window + 5.0)

    def _unpack(self, payload: object) -> tuple[list[object], dict[str, object]]:
        if (
            not isinstance(payload, list | tuple)
            or not 2 <= len(payload) <= 3  # a third element: its metadata: trace context, call id
            or not isinstance(payload[0], list | tuple)
            or not isinstance(payload[1], dict)
            or (len(payload) == 3 and not isinstance(payload[2], dict))
        ):
            raise SerializationError(
                f"{self.name}: stored call has an unexpected shape: {payload!r}"
            )
        return list(payload[0]), dict(payload[1])

    def AsyncResult(self, task_id: str, **kwargs: object) -> NoReturn:
        """Refused: a stored call has no result. Celery's canvas asks for one when it freezes a
        signature (chains, groups, chords), so those fail here, when they are built."""
        raise RedQueueError(
            f"{self.name}: chains, groups and chords are refused: a pooled or bucket call has no "
            "task id and no result to pass on or join; call the next task from the body, or "
            "use .s(...).delay() / add_many() on its own"
        )

    def requeue_dead(self, letters: object = None, limit: int = -1) -> int:
        """Put dead letters back in the structure and make sure a drain job runs."""
        count: int = self.structure.requeue_dead(letters, limit)
        if count:
            self.send_drain()
        return count

    if TYPE_CHECKING:  # each kind sets it, a `per_process` attribute

        @property
        def structure(self) -> Drained:
            """The Redis structure behind this task, whatever its kind: its ``pool``,
            ``bucket`` or ``stream`` (what the reaper, the figures and the heartbeat look at)."""

    def send_drain_or_release(
        self, countdown: float | None = None, routing: dict[str, object] | None = None
    ) -> str | None:
        """Send a drain job (now, or after ``countdown`` seconds); if the broker is down, log a
        warning, release what announced the job (the drain flag, or the scheduled wake-up) so
        that the next call, a worker's watchdog (`watchdog`) or beat sends one, and return the
        error text (None when sent). A send that can never succeed (not a broker blip) releases
        the same and raises `BrokerConfigurationError`."""
        options = dict(routing or {})
        if countdown is not None:
            options["countdown"] = countdown
        try:
            self.send_drain(**options)
        except Exception as exc:
            if transient := is_transient(exc):
                logger.warning(
                    "%s: could not send a drain job (%s); the calls are stored and the next "
                    "call, a worker's watchdog or beat sends one",
                    self.name,
                    error_text(exc),
                )
            # Pools and buckets release their drain flag; a stream group's expires by itself.
            if isinstance(producer := self.structure, Producer):
                try:
                    producer.release_drain(flag=countdown is None, wake=countdown is not None)
                except RedQueueError as release_exc:
                    logger.warning(
                        "%s: could not release the drain flag either (%s); it frees itself "
                        "when its lease runs out",
                        self.name,
                        release_exc,
                    )
            if not transient:
                raise refused(
                    self.app, exc, f" (sending {self.name}'s; its calls are stored)"
                ) from exc
            return error_text(exc)
        return None

    def send_wanted_drains(
        self, drain_needed: bool, wake_in: float | None, routing: dict[str, object] | None = None
    ) -> tuple[bool, str | None]:
        """Send the drain jobs that stored calls asked for: one now (``drain_needed``) and/or
        one when the earliest delayed call is due (``wake_in``). Returns (all sent, error)."""
        error = None
        if drain_needed:
            error = self.send_drain_or_release(routing=routing)
        if wake_in is not None:
            error = self.send_drain_or_release(countdown=wake_in, routing=routing) or error
        return error is None, error

    @per_process
    def _local(self) -> threading.local:
        """What this thread's stored call carries (the bucket's reservation, the stream's
        event), per process."""
        return threading.local()

    def _body(self) -> Callable[..., object]:
        """The body without Celery's autoretry wrapper: redqueue applies retry options itself."""
        return undecorated_body(self)


# Replaced on purpose: the class's __call__ is the entry point (see the module).
RedQueueTask.__call__ = entry_point(RedQueueTask, None)  # type: ignore[method-assign]
