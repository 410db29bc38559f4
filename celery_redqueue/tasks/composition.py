"""How a redqueue task composes with other task bases (a Flask app's ``task_cls``, Django's
``DjangoTask``, a base of your own), in either order.

Whichever base's ``__call__`` wins, `entry_point()` makes drain jobs recognised first; a
direct call then goes on through the other bases' ``__call__``, and each stored call a drain
runs goes through them too (e.g. inside Flask's app context), one call at a time, without
Celery's own ``__call__`` pushing a second request.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celery import Task

#: The redqueue task whose ``__call__`` chain is running in this context, and whether it runs
#: one stored call of a drain (True) or a direct call (False). Outer entries dispatch a call
#: once; inner ones (reached through another base's ``super().__call__``) only pass it on.
_ACTIVE: contextvars.ContextVar[tuple[Any, bool] | None] = contextvars.ContextVar(
    "redqueue_call", default=None
)


def entry_point(owner: type, inner: Callable[..., Any] | None) -> Callable[..., Any]:
    """The ``__call__`` every redqueue class ends up with: whichever base's ``__call__`` would
    win, drain jobs are recognised first, then the call goes on to ``inner`` (the class's own
    ``__call__``) or to the next ``__call__`` in the MRO."""

    def __call__(self: CallComposition, *args: Any, **kwargs: Any) -> Any:
        return self._enter(owner, inner, args, kwargs)

    __call__._redqueue_entry = True  # type: ignore[attr-defined]
    __call__._redqueue_owner = owner  # type: ignore[attr-defined]
    __call__._redqueue_inner = inner  # type: ignore[attr-defined]
    __call__.__qualname__ = f"{owner.__qualname__}.__call__"
    return __call__


class CallComposition:
    """Mixin of `RedQueueTask`: the ``__call__`` dispatch."""

    if TYPE_CHECKING:  # provided by RedQueueTask

        def _is_drain_request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool: ...
        def _is_by_name_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool: ...
        def _store_by_name(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...
        def drain(self) -> Any: ...
        def _body(self) -> Callable[..., Any]: ...

    def _in_stored_call(self) -> bool:
        """Whether this task is running one stored call of a drain (not a direct call)."""
        active = _ACTIVE.get()
        return active is not None and active[0] is self and active[1]

    def _enter(
        self,
        owner: type,
        inner: Callable[..., Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        active = _ACTIVE.get()
        if active is not None and active[0] is self:
            return self._pass_on(owner, inner, active[1], args, kwargs)
        if self._is_drain_request(args, kwargs):
            return self.drain().as_dict()
        if self._is_by_name_call(args, kwargs):
            return self._store_by_name(args, kwargs)
        args, kwargs = self._direct_call(args, kwargs)
        token = _ACTIVE.set((self, False))
        try:
            return self._pass_on(owner, inner, False, args, kwargs)
        finally:
            _ACTIVE.reset(token)

    def _pass_on(
        self,
        owner: type,
        inner: Callable[..., Any] | None,
        stored: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        if inner is not None:
            return inner(self, *args, **kwargs)
        following = super(owner, self).__call__  # type: ignore[arg-type]
        if stored and getattr(following, "__func__", None) is Task.__call__:
            # Celery's own __call__ would push a request of its own and call the autoretry
            # wrapper; a stored call keeps the drain's request and its structure's retries.
            return self._body()(*args, **kwargs)
        return following(*args, **kwargs)

    def _direct_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments a direct call (not a stored one) hands the body (subclasses)."""
        return args, kwargs

    def _stored_runner(self) -> Callable[..., Any]:
        """`_run_call`, resolved once for a whole batch of stored calls: when no base but
        Celery's ``Task`` has a ``__call__`` of its own, the chain would end at the body (see
        `_pass_on`), so the runner calls the body straight, a few microseconds less per call."""
        if not _ends_at_task_call(type(self)):
            return self._run_call
        body, active = self._body(), (self, True)

        def run(*args: Any, **kwargs: Any) -> Any:
            token = _ACTIVE.set(active)
            try:
                return body(*args, **kwargs)
            finally:
                _ACTIVE.reset(token)

        return run

    def _run_call(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body on one stored call, through every base's ``__call__`` (the per-call
        context they give, e.g. Flask's app context), never through the drain dispatch."""
        token = _ACTIVE.set((self, True))
        try:
            return type(self).__call__(self, *args, **kwargs)
        finally:
            _ACTIVE.reset(token)


_ENDS_AT_TASK_CALL: dict[type, bool] = {}


def _ends_at_task_call(cls: type) -> bool:
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
