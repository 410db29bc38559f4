"""Every private attribute of Celery, kombu or redis-py the package uses, in one place.

Each function says what public API is missing; ``tests/pure/test_privates.py`` checks each one
against the installed releases (nox runs it on the oldest and the newest supported), so an
upgrade that moves one fails there, by name, rather than somewhere in a worker. Nothing else in
the package touches another library's underscore names (``tests/pure/test_privates.py`` greps).

It imports nothing of Celery, kombu or redis-py at module level: the Redis layer uses it too, and
structures never import Celery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    from celery import Celery, Task
    from redis.connection import ConnectionInterface

    #: Any Celery task, whatever its body takes and returns (celery-types makes ``Task``
    #: generic over both). Here, at the bottom of the imports, so every layer can name it.
    AnyTask: TypeAlias = Task[..., object]


def active_apps() -> Iterable[Celery]:
    """The Celery apps created so far. ``celery.shared_task`` reads the same list to add a task
    to apps that are already finalized; Celery exposes no public way to iterate them."""
    # celery-types' celery._state stub declares none of its private functions.
    from celery._state import _get_active_apps  # type: ignore[attr-defined]

    apps: Iterable[Celery] = _get_active_apps()
    return apps


def on_app_finalize(callback: Callable[[Celery], object]) -> None:
    """Have ``callback(app)`` run for every app when it is finalized, as ``shared_task`` does
    (``celery._state.connect_on_app_finalize``; Celery has no public hook for it)."""
    from celery._state import connect_on_app_finalize

    connect_on_app_finalize(callback)


def finalize_lock(app: Celery) -> AbstractContextManager[bool]:
    """The lock ``app.finalize()`` holds while it adds shared tasks: ``shared_task`` takes it to
    add a task to a finalized app without racing a finalize in another thread (no public
    equivalent). It is a ``threading.RLock``, whose ``__enter__`` returns True."""
    # celery-types declares no private attribute of Celery.
    lock: AbstractContextManager[bool] = app._finalize_mutex  # type: ignore[attr-defined]
    return lock


def exec_options(task: AnyTask) -> dict[str, Any]:
    """The routing and delivery options a task's messages are sent with (queue, routing_key,
    exchange, priority, ...), as ``Task.apply_async`` reads them. Celery's
    ``Task._get_exec_options`` is the only accessor; copying its attribute list would drift."""
    # A copy: Celery returns the dict it keeps on the task. celery-types declares no private
    # method of Task.
    return dict(task._get_exec_options())  # type: ignore[attr-defined]


def check_arguments(
    task: AnyTask, args: Sequence[object] | None, kwargs: Mapping[str, object] | None
) -> None:
    """Raise TypeError when the body cannot take ``args``/``kwargs``: Celery's own check for
    ``Task.typing`` (``Task.__header__``, a function with the body's signature that
    ``apply_async`` calls); there is no public one."""
    # celery-types does not declare __header__, which Celery sets on each task class it builds.
    task.__header__(*(args or ()), **(kwargs or {}))  # type: ignore[attr-defined]


def undecorated_body(task: AnyTask) -> Callable[..., object]:
    """The body without Celery's ``autoretry_for`` wrapper (Celery keeps the original as
    ``task._orig_run`` when it wraps ``run``): redqueue applies the retry options to each
    stored call itself, so the wrapper must not retry the whole drain."""
    body: Callable[..., object] = getattr(task, "_orig_run", None) or task.run
    return body


def push_request_of_calls() -> Callable[..., None]:
    """The ``push_request`` of a task class whose ``__call__`` goes on to Celery's
    ``Task.__call__``: one that pushes a request starting from the current one, as Celery does
    from 5.5 on (celery/celery#9208); there, Celery's own.

    Before 5.5, ``Task.__call__`` pushed a bare request (args and kwargs only). `celery worker`
    skips that call (its stack protection runs the body directly), but eager runs
    (``apply()``, ``task_always_eager``) and Celery's in-process test worker do not: the body
    saw no ``id``, ``retries == 0`` and ``called_directly``, so its ``self.retry()`` and
    ``autoretry_for`` re-raised instead of retrying. Used as a class attribute:
    ``push_request = push_request_of_calls()``."""
    import celery
    from celery import Task
    from celery.app.task import Context

    if celery.VERSION >= (5, 5):
        own: Callable[..., None] = Task.push_request
        return own

    def push_request(self: AnyTask, *args: dict[str, object], **kwargs: object) -> None:
        self.request_stack.push(Context(*args, **{**vars(self.request), **kwargs}))

    return push_request


def socket_identity(conn: ConnectionInterface) -> int | None:
    """Something that changes when a redis-py connection reconnects (its socket object's id), or
    None when it is not connected: ``CLIENT UNBLOCK`` needs the server's id of the connection,
    which a reconnect changes, and redis-py tells no one it reconnected."""
    sock = getattr(conn, "_sock", None)
    return None if sock is None else id(sock)
