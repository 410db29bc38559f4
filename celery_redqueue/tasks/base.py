"""The shared plumbing of tasks backed by a redqueue structure: ``delay()`` stores the call in
its structure (through `Producer`), the broker
carries argument-less drain jobs marked by `DRAIN_HEADER`, and a drain job runs
the body for calls taken from the structure. The kinds: `pool`, `bucket`, ..."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery import Task
from celery.exceptions import Retry
from celery.utils.time import maybe_make_aware

from .. import validation
from ..errors import InvalidArgumentError, RedQueueError, SerializationError
from ..structures.protocols import Drained, Producer
from .beat import register_beat
from .buffer import CallBuffer, buffered_call
from .by_name import ByNameCalls
from .composition import CallComposition, entry_point
from .config import get_config
from .handover import handed_over
from .heartbeat import heartbeat
from .options import check_option_names, drain_options, is_trigger, warn_if_task_cls_dropped
from .results import named_receipt, new_call_id
from .wire import DRAIN_HEADER, REAPER_TASK

logger = logging.getLogger(__name__)

#: This process's id, refreshed in a forked child: every call looks its structure up, and
#: os.getpid() is a system call.
_pid = os.getpid()


def _refresh_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


def error_text(exc: BaseException) -> str:
    """What a dead letter keeps of a failure."""
    return f"{type(exc).__name__}: {exc}"


class RedQueueTask(ByNameCalls, CallComposition, Task):  # type: ignore[misc]
    """Shared plumbing of tasks backed by a redqueue structure.

    It composes with other task bases (a Flask app's ``task_cls``, Django's ``DjangoTask``, a
    base of your own) in either order: a drain job is recognised whichever ``__call__`` wins,
    and each stored call runs through the other bases' ``__call__`` (so, e.g., inside Flask's
    app context), one call at a time.
    """

    #: A message is acknowledged after its job returned: a by-name call's message only once
    #: the call is stored (`by_name`); a drain job's when the drain ended.
    acks_late = True

    #: The kind's ``*_results`` option (set per class: it is read on every call).
    _results_option = ""

    @property
    def redqueue_results(self) -> bool:
        """Per-call results are on (the kind's ``*_results`` option)."""
        return bool(getattr(self, self._results_option, False))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._results_option = f"{getattr(cls, 'redqueue_kind', '')}_results"
        check_option_names(cls)
        if not getattr(cls.__call__, "_redqueue_entry", False):
            # Another base's __call__ (or the class's own) would win: wrap it.
            cls.__call__ = entry_point(cls, cls.__dict__.get("__call__"))  # type: ignore[method-assign]

    def drain(self) -> Any:
        """Run stored calls (subclasses); returns a DrainSummary."""
        raise NotImplementedError

    def retry(
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        """Inside a stored call, raise `Retry` for the drain to
        handle (the structure retries the call); elsewhere, Celery's retry."""
        if self._in_stored_call():
            raise Retry(exc=exc, when=countdown if countdown is not None else eta)
        return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)

    @classmethod
    def bind(cls, app: Any) -> Any:
        bound = super().bind(app)
        warn_if_task_cls_dropped(cls, app)
        if cls.name and cls.name != REAPER_TASK:
            config = get_config(app)
            if config.beat:
                register_beat(app, "redqueue: reap", config.reaper_interval, REAPER_TASK, {})
                cls._register_schedules(app)
        return bound

    @classmethod
    def _register_schedules(cls, app: Any) -> None:
        """Subclasses add their own beat entries."""

    def send_drain(self, **options: Any) -> Any:
        """Send one argument-less drain job for this task to the broker.

        It goes through ``send_task`` with the task's own routing options: the task's signature
        check would refuse a call without the body's arguments (a consumer's: `handover`).
        """
        if handed_over(self.name, options.get("countdown")):
            return None
        options = dict(self._get_exec_options(), **options)
        options.setdefault("ignore_result", self.ignore_result)
        options["headers"] = dict(options.get("headers") or {}, **{DRAIN_HEADER: 1})
        return self.app.send_task(self.name, (), {}, task_type=self, **options)

    def check_call(self, args: Any, kwargs: Any) -> None:
        """Refuse, at the call site, arguments the body cannot take (Celery's own check)."""
        if self.typing:
            self.__header__(*(args or ()), **(kwargs or {}))

    def _is_drain_request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
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

    def _watch_after_failure(self, visibility_timeout: float, drain_lease: float) -> None:
        """A drain that raised (Redis unreachable or restarted under it) leaves its lease to
        run out over the structure's calls, and its work in flight to expire: have this
        process's heartbeat reap the structure every second until both have (plus a margin),
        so that the drain the work needs is sent even with beat off."""
        heartbeat().watch(self.structure, self.reap, visibility_timeout + drain_lease + 5.0)

    def _unpack(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
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

    # Producing: a call goes into the structure, never to the broker.

    #: The option naming a key function for producer-side dedupe (set by subclasses).
    dedupe_option = ""

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> Any:
        """Store the call in the task's structure; returns its receipt, not an AsyncResult.

        Drain jobs (marked by their header, e.g. sent by beat) go to the broker as usual, and so
        does an argument-less call of a body that needs arguments made by a scheduler or tool
        (`options.is_trigger()`: beat, django-celery-beat, Flower); from anything else
        (``delay()`` with the arguments forgotten) it is refused with InvalidArgumentError.
        ``task_id=`` names the call (the receipt's ``id``).
        Every other option has a meaning for the call or is refused, naming it
        (`celery_redqueue.tasks.options`). In eager mode the body runs at once on the
        arguments as a worker would see them.
        """
        routing: dict[str, Any] | None = None
        plain = (
            not options
            and task_id is None
            and producer is None
            and link is None
            and link_error is None
            and shadow is None
        )
        if not plain or (not args and not kwargs):
            # The lean path (a call with arguments and no options) skips what cannot apply.
            drain = bool((options.get("headers") or {}).get(DRAIN_HEADER))
            if drain or (not args and not kwargs and self._needs_arguments()):
                if not drain and not is_trigger(args, producer, options):
                    raise InvalidArgumentError(self._missing_arguments())
                return self.send_drain(
                    producer=producer,
                    task_id=task_id,
                    link=link,
                    link_error=link_error,
                    shadow=shadow,
                    **options,
                )
            routing = drain_options(
                self.name,
                dict(options, task_id=task_id, link=link, link_error=link_error, shadow=shadow),
            )
            if producer is not None:
                routing["producer"] = producer
        if task_id is not None and (not isinstance(task_id, str) or not task_id):
            raise InvalidArgumentError(f"{self.name}: task_id must be a non-empty string")
        call_id = task_id or new_call_id()
        prepared = self._prepare_call(args, kwargs, call_id if self.redqueue_results else None)
        delay = self._delay_of(options) if options else 0.0
        key_function = getattr(self, self.dedupe_option)
        dedupe_id = (
            self._dedupe_id(key_function, args, kwargs, options)
            if key_function is not None or options
            else None
        )
        if self._always_eager():
            return self._run_eagerly(prepared)
        held = buffered_call(self, prepared, delay, dedupe_id, call_id)
        if held is not None:
            return held  # stored when the open ``with buffer():`` block exits
        return self._after_add(self._store(prepared, delay, dedupe_id), routing, call_id)

    def _missing_arguments(self) -> str:
        try:
            shown = f"{self.name}{inspect.signature(self._body())}"
        except (TypeError, ValueError):
            shown = self.name
        return (
            f"{shown} needs arguments: an argument-less delay()/apply_async() is refused (it "
            f"would store nothing and only send a drain job); to drain now, call "
            f"{self.name}.send_drain()"
        )

    def _always_eager(self) -> bool:
        """``app.conf.task_always_eager``, the same answer for a third of the cost.

        Celery's lookup tries every spelling of the name (namespace, old names) in every layer
        of the configuration and raises and catches a KeyError for each it misses, on every
        call; here the spellings are worked out once per configuration object and looked up
        with ``in``. Anything unexpected falls back to Celery's own lookup.
        """
        conf = self.app.conf
        cached = self.__dict__.get("_redqueue_eager_keys")
        maps = getattr(conf, "maps", None)  # a list Celery extends in place (add_defaults)
        if cached is None or cached[0] is not conf or cached[2] is not maps:
            try:
                keys = tuple(conf._key(k) for k in conf._to_keys("task_always_eager"))
            except Exception:
                return bool(conf.task_always_eager)
            if not isinstance(maps, list):
                return bool(conf.task_always_eager)
            cached = self.__dict__["_redqueue_eager_keys"] = (conf, keys, maps)
        keys = cached[1]
        for mapping in maps:
            for key in keys:
                if key in mapping:
                    return bool(mapping[key])
        return bool(conf.task_always_eager)

    def AsyncResult(self, task_id: str, **kwargs: Any) -> Any:
        """Refused: a stored call has no result. Celery's canvas asks for one when it freezes a
        signature (chains, groups, chords), so those fail here, when they are built."""
        raise RedQueueError(
            f"{self.name}: chains, groups and chords are refused: a pooled or bucket call has no "
            "task id and no result to pass on or join; call the next task from the body, or "
            "use .s(...).delay() / add_many() on its own"
        )

    def buffer(self, *, flush_on_error: bool = False) -> CallBuffer:
        """``with task.buffer():`` holds this task's calls and stores them on exit (see
        `buffer`)."""
        return CallBuffer((self,), flush_on_error=flush_on_error)

    def _prepare_call(self, args: Any, kwargs: Any, call_id: str | None = None) -> Any:
        """Check and serialize one call, carrying ``call_id`` if given (subclasses)."""
        raise NotImplementedError

    def _store(self, prepared: Any, delay: float, dedupe_id: str | None) -> Any:
        """Put one prepared call into the structure; returns the receipt (subclasses)."""
        raise NotImplementedError

    def _run_eagerly(self, prepared: Any, **options: Any) -> Any:
        """Run the body now, on the call as a worker would see it (after the serializer)."""
        encoded = prepared[1] if isinstance(prepared, tuple) else prepared
        stored_args, stored_kwargs = self._unpack(self.structure.serializer.loads(encoded))
        return self.apply(stored_args, stored_kwargs, **options)

    def requeue_dead(self, letters: Any = None, limit: int = -1) -> int:
        """Put dead letters back in the structure and make sure a drain job runs."""
        count: int = self.structure.requeue_dead(letters, limit)
        if count:
            self.send_drain()
        return count

    @property
    def structure(self) -> Drained:
        """The Redis structure behind this task (subclasses)."""
        raise NotImplementedError

    def _delay_of(self, options: dict[str, Any]) -> float:
        """Seconds to hold a call before it enters its structure (``countdown=`` or ``eta=``).

        Raises InvalidArgumentError for NaN, infinities, a moment more than
        `MAX_DELAY` away, or an eta that is not a datetime:
        checked before anything is stored.
        """
        countdown, eta = options.get("countdown"), options.get("eta")
        if countdown is not None and eta is not None:
            raise InvalidArgumentError(f"{self.name}: pass countdown= or eta=, not both")
        if countdown is not None:
            return validation.delay(f"{self.name}: countdown", countdown)
        if eta is not None:
            if isinstance(eta, str):
                try:
                    eta = datetime.fromisoformat(eta)
                except ValueError as exc:
                    raise InvalidArgumentError(f"{self.name}: eta {eta!r} is not ISO 8601") from exc
            if not isinstance(eta, datetime):
                raise InvalidArgumentError(f"{self.name}: eta must be a datetime, got {eta!r}")
            now = self.app.now()
            eta = maybe_make_aware(eta, now.tzinfo)
            return validation.delay(f"{self.name}: eta", (eta - now).total_seconds())
        return 0.0

    def _dedupe_id(
        self, key_function: Any, args: Any, kwargs: Any, options: dict[str, Any]
    ) -> str | None:
        """The call's dedupe id: ``dedupe_id=`` given to apply_async, else the key function's."""
        dedupe_id = options.get("dedupe_id")
        if dedupe_id is None and key_function is not None:
            try:
                dedupe_id = key_function(*(args or ()), **(kwargs or {}))
            except Exception as exc:
                raise RedQueueError(
                    f"{self.name}: dedupe key failed on this call: {exc!r}"
                ) from exc
        if dedupe_id is not None and (not isinstance(dedupe_id, str) or not dedupe_id):
            raise RedQueueError(
                f"{self.name}: a dedupe id must be a non-empty string, got {dedupe_id!r}"
            )
        return dedupe_id

    def _after_add(
        self, receipt: Any, routing: dict[str, Any] | None = None, call_id: str = ""
    ) -> Any:
        """Send the drain job an add asked for (now, or when its delayed call is due); returns
        the receipt, named ``call_id``, saying whether it was sent.

        A send that fails (broker down) does not raise: the call is stored, and raising would
        invite a retry that stores it twice. The drain flag is released in the same call, so
        the next call (or beat) sends the job; the receipt says ``drain_sent=False``.
        """
        if call_id:
            receipt = named_receipt(self, receipt, call_id)
        if not receipt.drain_needed and receipt.wake_in is None:
            return receipt
        sent, error = self.send_wanted_drains(receipt.drain_needed, receipt.wake_in, routing)
        return dataclasses.replace(receipt, drain_sent=sent, drain_error=error)

    def send_wanted_drains(
        self, drain_needed: bool, wake_in: float | None, routing: dict[str, Any] | None = None
    ) -> tuple[bool, str | None]:
        """Send the drain jobs that stored calls asked for: one now (``drain_needed``) and/or
        one when the earliest delayed call is due (``wake_in``). Returns (all sent, error)."""
        error = None
        if drain_needed:
            error = self.send_drain_or_release(routing=routing)
        if wake_in is not None:
            error = self.send_drain_or_release(countdown=wake_in, routing=routing) or error
        return error is None, error

    def send_drain_or_release(
        self, countdown: float | None = None, routing: dict[str, Any] | None = None
    ) -> str | None:
        """Send a drain job (now, or after ``countdown`` seconds); if the broker refuses, log a
        warning, release what announced the job (the drain flag, or the scheduled wake-up) so
        that the next call or beat sends one, and return the error text (None when sent)."""
        options = dict(routing or {})
        if countdown is not None:
            options["countdown"] = countdown
        try:
            self.send_drain(**options)
        except Exception as exc:
            logger.warning(
                "%s: could not send a drain job (%s); the calls are stored and the next call "
                "or beat sends one",
                self.name,
                error_text(exc),
            )
            # Pools and buckets hold a drain flag; a stream's group lease frees itself.
            if not isinstance(producer := self.structure, Producer):
                return error_text(exc)
            try:
                producer.release_drain(flag=countdown is None, wake=countdown is not None)
            except RedQueueError as release_exc:
                logger.warning(
                    "%s: could not release the drain flag either (%s); it frees itself when "
                    "its lease runs out",
                    self.name,
                    release_exc,
                )
            return error_text(exc)
        return None

    def _per_process(self, attr: str, build: Callable[[], Any]) -> Any:
        """Build a structure once per process: a prefork child must not reuse the parent's."""
        cached: tuple[int, Any] | None = self.__dict__.get(attr)
        if cached is None or cached[0] != _pid:
            cached = (_pid, build())
            self.__dict__[attr] = cached
        return cached[1]

    def _body(self) -> Callable[..., Any]:
        """The body without Celery's autoretry wrapper: redqueue applies retry options itself."""
        body: Callable[..., Any] = getattr(self, "_orig_run", None) or self.run
        return body


RedQueueTask.__call__ = entry_point(RedQueueTask, None)  # type: ignore[method-assign]
