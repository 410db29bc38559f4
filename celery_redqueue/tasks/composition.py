"""How a redqueue task composes with other task bases (a Flask app's ``task_cls``, Django's
``DjangoTask``, a base of your own), in either order.

Whichever base's ``__call__`` wins, `entry_point()` makes drain jobs recognised first (the
dispatch itself is `RedQueueTask._enter`, in `base`); a direct call then goes on through the
other bases' ``__call__``, and each stored call a drain runs goes through them too (e.g. inside
Flask's app context), one call at a time, without Celery's own ``__call__`` pushing a second
request.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from celery import Task

#: The redqueue task whose ``__call__`` chain is running in this context, and whether it runs
#: one stored call of a drain (True) or a direct call (False). Outer entries dispatch a call
#: once; inner ones (reached through another base's ``super().__call__``) only pass it on.
ACTIVE: contextvars.ContextVar[tuple[Any, bool] | None] = contextvars.ContextVar(
    "redqueue_call", default=None
)


def entry_point(owner: type, inner: Callable[..., Any] | None) -> Callable[..., Any]:
    """The ``__call__`` every redqueue class ends up with: whichever base's ``__call__`` would
    win, drain jobs are recognised first, then the call goes on to ``inner`` (the class's own
    ``__call__``) or to the next ``__call__`` in the MRO."""

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
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
