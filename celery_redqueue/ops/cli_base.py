"""What every ``celery -A proj redqueue`` command shares: the command group, opening the app's
structures, one-line errors and finding a structure by name. `cli` (figures) and
`cli_actions` (actions) register their commands on `redqueue`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click
from celery import Celery

from ..errors import RedQueueError
from .reading import WORK_KINDS, Operations, Target

P = ParamSpec("P")
R = TypeVar("R")


def app_of(ctx: click.Context) -> Celery:
    """The Celery app given with ``-A`` (or ``CELERY_APP``). Without one Celery hands out its
    default app, whose settings name no Redis: say what is missing instead."""
    if ctx.find_root().params.get("app") is None:
        raise click.UsageError(
            f"no Celery app given: run celery -A proj redqueue {ctx.info_name} ... (or set "
            "CELERY_APP=proj), naming the module of your Celery app, whose redqueue_* settings "
            "say where the structures live",
            ctx,
        )
    app: Celery = ctx.obj.app  # Celery's CLIContext
    return app


def open_ops(ctx: click.Context) -> Operations:
    return Operations.from_app(app_of(ctx))


def cli_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Show redqueue errors as a one-line message and exit status 1, not a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except RedQueueError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


def open_target(
    ctx: click.Context, name: str, kinds: tuple[str, ...] = WORK_KINDS
) -> tuple[Operations, Target]:
    """The app's structures, and the one named ``name`` among ``kinds``."""
    ops = open_ops(ctx)
    return ops, ops.find(name, kinds)


def structure_command(
    kinds: tuple[str, ...], json_help: str
) -> Callable[[Callable[[click.Context, Operations, Target, bool], None]], click.Command]:
    """Register a ``redqueue`` command on one structure given by NAME, with ``--json``: it opens
    the app's structures, finds NAME among ``kinds`` and calls the function with
    ``(ctx, ops, target, as_json)``; its docstring is the command's help."""

    def register(
        func: Callable[[click.Context, Operations, Target, bool], None],
    ) -> click.Command:
        @click.argument("name")
        @click.option("--json", "as_json", is_flag=True, help=json_help)
        @click.pass_context
        @cli_errors
        def command(ctx: click.Context, name: str, as_json: bool) -> None:
            func(ctx, *open_target(ctx, name, kinds), as_json)

        return redqueue.command(name=func.__name__, help=func.__doc__)(command)

    return register


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


@click.group(name="redqueue")
def redqueue() -> None:
    """Structures of celery-redqueue: figures, dead letters, actions, dashboard, metrics."""
