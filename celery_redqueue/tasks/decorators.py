"""The decorators' shared helper: a shared task (or an app's task) with a redqueue base, built
on the app's ``task_cls`` and checked where it is declared."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from celery import Task, current_app
from celery.local import Proxy

if TYPE_CHECKING:
    from celery import Celery

    from ..privates import AnyTask

from ..errors import ConfigurationError
from ..privates import active_apps, finalize_lock, on_app_finalize
from .options import PREFIXES, check_decoration_keywords


def compose_base(base: type[AnyTask], app: Celery, label: str) -> type[AnyTask]:
    """``base`` built on the app's ``task_cls`` (Flask's ``FlaskTask``, Django's ``DjangoTask``,
    a base of your own), so the task keeps what that class gives every task of the app."""
    app_task: type[AnyTask] = app.Task
    task_cls = app_task.__mro__[1]
    if task_cls is Task or issubclass(base, task_cls):
        return base
    try:
        # celery-types declares Task.__name__ as an instance property: mypy reads a Task
        # class's __name__ as that property, not a str.
        composed: type[AnyTask] = type(  # type: ignore[call-overload]
            base.__name__,
            (base, app_task),
            {"__module__": base.__module__, "__qualname__": base.__qualname__, "abstract": True},
        )
    except TypeError as exc:
        raise ConfigurationError(
            f"{label}: {base.__name__} cannot be built on the app's task_cls "
            f"{task_cls.__name__}: {exc}"
        ) from exc
    return composed


def _check_declaration(
    base: type[AnyTask], options: dict[str, object], fun: Callable[..., object] | None = None
) -> None:
    """Build a throwaway subclass: it runs the checks Celery's class will run, but now, at the
    decoration site, rather than when the app is finalized."""
    check_decoration_keywords(
        base, [k for k in options if k not in ("name", "bind")], getattr(base, "redqueue_kind", "")
    )
    attrs = {k: v for k, v in options.items() if hasattr(base, k) or k.startswith(PREFIXES)}
    if fun is not None:
        attrs["run"] = fun if options.get("bind") else staticmethod(fun)
        attrs["name"] = options.get("name") or f"{fun.__module__}.{fun.__name__}"
    type("_Check", (base,), attrs)


def _shared(
    fun: Callable[..., object], base: type[AnyTask], options: dict[str, object], label: str
) -> AnyTask:
    """What Celery's ``shared_task`` does, with the base built on each app's ``task_cls``."""

    options = {k: v for k, v in options.items() if k not in ("shared", "lazy")}

    def create(app: Celery) -> AnyTask:
        # celery-types' Celery.task takes no function together with options; Celery does.
        task: AnyTask = app.task(  # type: ignore[call-overload]
            fun, base=compose_base(base, app, label), shared=False, lazy=False, **options
        )
        return task

    on_app_finalize(create)
    for app in active_apps():
        if app.finalized:  # type: ignore[attr-defined]  # celery-types omits Celery.finalized
            with finalize_lock(app):
                try:
                    create(app)
                except ConfigurationError:
                    # An app finalized before this module was imported, without redqueue
                    # settings (Celery's fallback default app, say): it does not use this task.
                    continue

    def task_by_app() -> AnyTask:
        app = current_app
        # The decorator's name= is a str (Celery's task option).
        name = cast("str", options.get("name") or app.gen_task_name(fun.__name__, fun.__module__))
        return app.tasks[name]

    # The Proxy forwards every attribute to the current app's task (celery-types types
    # shared_task's result as the task, too).
    return cast("AnyTask", Proxy(task_by_app))


def decorate_task(
    default_base: type[AnyTask], args: tuple[object, ...], options: dict[str, Any], name: str
) -> AnyTask | Callable[[Callable[..., object]], AnyTask]:
    """What pool_task, bucket_task and lease_task share: a shared task (or ``app=``'s task)
    with the given base built on the app's ``task_cls``, its options checked at the decoration
    site. ``options`` are the decorator's keywords: Celery's task options, of every type."""
    base = options.pop("base", default_base)
    if not (isinstance(base, type) and issubclass(base, default_base)):
        raise ConfigurationError(f"{name} base must subclass {default_base.__name__}, got {base!r}")
    app: Celery | None = options.pop("app", None)
    _check_declaration(base, options)

    # A shared task comes back as Celery's Proxy: it stands for the current app's task.
    def register(fun: Callable[..., object]) -> AnyTask:
        _check_declaration(base, options, fun)
        if app is not None:
            # celery-types' Celery.task takes no function together with options; Celery does.
            task: AnyTask = app.task(  # type: ignore[call-overload]
                fun, base=compose_base(base, app, name), **options
            )
            return task
        return _shared(fun, base, options, name)

    if len(args) == 1 and callable(args[0]) and not options:
        return register(args[0])
    if args:
        raise TypeError(f"{name} takes keyword options only, or is used bare: @{name}")
    return register
