"""The producer path of pooled and bucket tasks, read top to bottom: where ``delay()`` goes.

`ProducerTask.apply_async` routes the call (a drain job or a scheduler's argument-less trigger
goes to the broker; every other option has a meaning or is refused), prepares it (the kind's
``_prepare_call``: checked as the body will take it, then serialized once), stores it through
the structure's public `Producer.store_encoded` (or holds it in an open ``buffer()`` block, or
runs it at once in eager mode), and sends the drain job the store asked for (`_after_add`). A
by-name call a worker receives takes the same steps (`by_name`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import os
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from celery.utils.time import maybe_make_aware

from .. import validation
from ..errors import ConfigurationError, InvalidArgumentError, RedQueueError
from ..structures.protocols import Stored
from ..structures.receipts import ReapResult, Receipt
from ..validation import boolean, seconds
from . import by_name
from .base import RedQueueTask
from .beat import reaped_count
from .buffer import CallBuffer, buffered_call, open_buffers
from .options import check_structure_name, drain_options, is_trigger
from .results import named_receipt
from .wire import DRAIN_HEADER

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from celery.result import AsyncResult, EagerResult

    from .buffer import BufferedReceipt


def _fresh_prefix() -> str:
    raw = os.urandom(10).hex()
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-"


# A random per-process prefix and a counter: shaped like a UUID, unique across processes, and
# a fraction of uuid4()'s cost (a system call per id) on the producer's hot path.
_prefix = _fresh_prefix()
_counter = itertools.count()


def _refresh() -> None:
    global _prefix, _counter
    _prefix, _counter = _fresh_prefix(), itertools.count()


os.register_at_fork(after_in_child=_refresh)


def new_call_id() -> str:
    """A fresh call id."""
    return f"{_prefix}{next(_counter):012x}"


@dataclasses.dataclass(frozen=True)
class ProducerSettings:
    """The options pools and buckets share on the producer side, read by the kind's own class
    (``read_producer_settings``) and checked once (`read`)."""

    #: ``<kind>_dedupe_key``: a function of the call's arguments giving its dedupe id, or None.
    dedupe_key: Callable[..., object] | None
    #: ``<kind>_dedupe_window``: seconds a dedupe id is remembered.
    dedupe_window: float

    @classmethod
    def read(
        cls,
        task: type,
        prefix: str,
        *,
        dedupe_key: Callable[..., object] | None,
        dedupe_window: float,
        name: str | None,
        results: bool,
    ) -> ProducerSettings:
        """Check the values ``task``'s class declares (``PoolTask.read_producer_settings``
        passes its ``pool_*`` attributes, read off the class, so a function stays unbound);
        ``<prefix>_*`` only names the options in errors."""
        if dedupe_key is not None and not callable(dedupe_key):
            raise ConfigurationError(f"{prefix}_dedupe_key must be a callable, got {dedupe_key!r}")
        seconds(f"{prefix}_dedupe_window", dedupe_window, positive=True)
        check_structure_name(task, f"{prefix}_name", name)
        boolean(f"{prefix}_results", results)
        return cls(dedupe_key=dedupe_key, dedupe_window=dedupe_window)


class ProducerTask(RedQueueTask):
    """A task whose calls are stored in a structure that takes calls (a pool, a bucket)."""

    @classmethod
    def read_producer_settings(cls) -> ProducerSettings | None:
        """The kind's producer options, checked: each kind's class reads its own ``<kind>_*``
        attributes. None on a class with no kind."""
        return None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.read_producer_settings()  # refuses a bad value at the declaration

    @functools.cached_property
    def producer_settings(self) -> ProducerSettings:
        """The producer options, read once per task."""
        settings = self.read_producer_settings()
        if settings is None:
            raise TypeError(f"{type(self).__qualname__} is no pool or bucket task")
        return settings

    if TYPE_CHECKING:

        @property
        def structure(self) -> Stored[Any]:
            """The structure the calls go into: the task's ``pool`` or ``bucket``."""

    # A stored call's receipt, not Celery's AsyncResult: a deliberate override.
    def apply_async(  # type: ignore[override]
        self,
        args: Sequence[object] | None = None,
        kwargs: Mapping[str, object] | None = None,
        task_id: str | None = None,
        producer: object = None,
        link: object = None,
        link_error: object = None,
        shadow: str | None = None,
        **options: Any,
    ) -> Receipt | BufferedReceipt | AsyncResult[object] | None:
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
        # 1. Route. A drain job (its header) or a scheduler's argument-less trigger goes to the
        # broker; every other option is checked. The lean path (arguments, no options) skips it.
        routing: dict[str, object] | None = None
        if (
            options
            or task_id is not None
            or producer is not None
            or link is not None
            or link_error is not None
            or shadow is not None
            or (not args and not kwargs)
        ):
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
        # 2. Prepare: checked, serialized, its delay and dedupe id (raises, storing nothing).
        call_id = task_id or new_call_id()
        prepared, delay, dedupe_id = self._prepare(args, kwargs, options, call_id)
        # 3. Store: at once in eager mode, in an open ``buffer()`` block, or in the structure.
        if self.app.conf.task_always_eager:
            return self._run_eagerly(prepared)
        if open_buffers.get():
            held = buffered_call(self, prepared, delay, dedupe_id, call_id)
            if held is not None:
                return held  # stored when the block exits
        receipt = self._store(prepared, delay, dedupe_id)
        # 4. Send the drain job the store asked for (now, or when a delayed call is due).
        return self._after_add(receipt, routing, call_id)

    def _is_by_name_call(self, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
        """A message with arguments (not a direct or eager call of the body): stored, not run
        (`by_name`)."""
        if not args and not kwargs:
            return False
        request = self.request
        return not request.called_directly and not request.is_eager

    def _store_by_name(self, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        return by_name.store_by_name(self, args, kwargs)

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

    def buffer(self, *, flush_on_error: bool = False) -> CallBuffer:
        """``with task.buffer():`` holds this task's calls and stores them on exit (see
        `buffer`)."""
        return CallBuffer((self,), flush_on_error=flush_on_error)

    def reap(self) -> int:
        return self.reaped(self.structure.reap())

    def reaped(self, result: ReapResult) -> int:
        """After a reap of the structure: send the drain job it asked for; returns what it took
        back."""
        if result.drain_needed:
            self.send_drain_or_release()
        return reaped_count(result)

    def _prepare(
        self,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        options: dict[str, object],
        call_id: str,
    ) -> tuple[Any, float, str | None]:
        """A call checked as the body will take it and serialized once (carrying ``call_id``
        when per-call results are on or it is traced), its delay and its dedupe id; raises,
        storing nothing."""
        prepared = self._prepare_call(args, kwargs, call_id)
        if not options and self.producer_settings.dedupe_key is None:
            return prepared, 0.0, None  # the lean path: no delay, no dedupe id
        return prepared, self._delay_of(options), self._dedupe_id(args, kwargs, options)

    def _prepare_call(
        self,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        call_id: str | None = None,
    ) -> object:
        """Check and serialize one call (subclasses); it carries ``call_id`` when per-call
        results are on, or when it carries its caller's trace context (`tracing.stamp`)."""
        raise NotImplementedError

    def _store(self, prepared: object, delay: float, dedupe_id: str | None) -> Receipt:
        """Put one prepared call into the structure (one round trip); returns its receipt."""
        ids = None if dedupe_id is None else [dedupe_id]
        return self.structure.store_encoded([prepared], delay=delay, dedupe_ids=ids)[0]

    def _run_eagerly(self, prepared: object, **options: object) -> EagerResult[object]:
        """Run the body now, on the call as a worker would see it (after the serializer)."""
        encoded = prepared[1] if isinstance(prepared, tuple) else prepared
        stored_args, stored_kwargs = self._unpack(self.structure.serializer.loads(encoded))
        # celery-types wants a tuple of args where Celery takes any sequence; ``options`` are
        # apply's own, of as many types as there are options.
        return self.apply(stored_args, stored_kwargs, **options)  # type: ignore[arg-type]

    def _delay_of(self, options: dict[str, object]) -> float:
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
        self,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        options: dict[str, object],
    ) -> str | None:
        """The call's dedupe id: ``dedupe_id=`` given to apply_async, else the key function's."""
        key_function = self.producer_settings.dedupe_key
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
        self, receipt: Receipt, routing: dict[str, object] | None = None, call_id: str = ""
    ) -> Receipt:
        """Send the drain job an add asked for (now, or when its delayed call is due); returns
        the receipt, named ``call_id``, saying whether it was sent.

        A send that fails (broker down) does not raise: the call is stored, and raising would
        invite a retry that stores it twice. The drain flag is released in the same call, so
        the next call (or beat) sends the job; the receipt says ``drain_sent=False``. A send
        that can never succeed raises `BrokerConfigurationError` (the call is stored).
        """
        if call_id:
            receipt = named_receipt(self, receipt, call_id)
        if not receipt.drain_needed and receipt.wake_in is None:
            return receipt
        sent, error = self.send_wanted_drains(receipt.drain_needed, receipt.wake_in, routing)
        return dataclasses.replace(receipt, drain_sent=sent, drain_error=error)
