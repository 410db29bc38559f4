"""The decorators' shared helper: a shared task (or an app's task) with a redqueue base."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Task, shared_task

from ..errors import ConfigurationError


def decorate_task(
    default_base: type[Task], args: tuple[Any, ...], options: dict[str, Any], name: str
) -> Any:
    """What pool_task, bucket_task and lease_task share: a shared task (or ``app=``'s task)
    with the given base, its options checked at the decoration site."""
    base = options.pop("base", default_base)
    if not (isinstance(base, type) and issubclass(base, default_base)):
        raise ConfigurationError(f"{name} base must subclass {default_base.__name__}, got {base!r}")
    # Building a throwaway subclass runs the same validation as Celery will, but now, at the
    # decoration site, rather than when the app is finalized.
    type("_Check", (base,), {k: v for k, v in options.items() if hasattr(base, k)})
    app = options.pop("app", None)
    decorate: Callable[..., Any] = app.task if app is not None else shared_task
    if len(args) == 1 and callable(args[0]) and not options:
        return decorate(base=base)(args[0])
    if args:
        raise TypeError(f"{name} takes keyword options only, or is used bare: @{name}")
    return decorate(base=base, **options)
