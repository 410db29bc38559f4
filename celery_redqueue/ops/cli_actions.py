"""The ``celery -A proj redqueue`` commands that act: requeue, purge, drain, set-rate,
set-concurrency, pause, resume, reap, seek, beat-prune. Registered on the group of `cli_base`; `cli`
imports this module."""

from __future__ import annotations

import re
from datetime import datetime

import click

from .cli_base import app_of, cli_errors, open_ops, open_target, redqueue
from .reading import WORK_KINDS


@redqueue.command()
@click.argument("name")
@click.option("--limit", default=-1, help="How many, from the oldest (default: all).")
@click.pass_context
@cli_errors
def requeue(ctx: click.Context, name: str, limit: int) -> None:
    """Put dead letters back in their queue (receives reset) and send a drain job."""
    ops, target = open_target(ctx, name)
    click.echo(ops.requeue(target, limit=limit))


@redqueue.command()
@click.argument("name")
@click.option("--limit", default=-1, help="How many, from the oldest (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@cli_errors
def purge(ctx: click.Context, name: str, limit: int, yes: bool) -> None:
    """Delete dead letters (they are counted as purged)."""
    ops, target = open_target(ctx, name)
    if not yes:
        click.confirm(f"Delete dead letters of {name}?", abort=True)
    click.echo(ops.purge(target, limit=limit))


@redqueue.command()
@click.argument("name")
@click.pass_context
@cli_errors
def drain(ctx: click.Context, name: str) -> None:
    """Send one drain job for a structure now (it needs the app's task of that name)."""
    ops, target = open_target(ctx, name)
    if ops.drain_task(target) is None:
        what = "consumes it" if target.kind == "stream" else f"is named {target.name!r}"
        raise click.ClickException(f"{target.id}: no task of this app {what}")
    click.echo(f"{target.id}: {ops.send_drain(target)}")


@redqueue.command(name="set-rate")
@click.argument("bucket")
@click.argument("key")
@click.argument("rate")
@click.option("--burst", type=float, default=None, help="Burst allowance (items).")
@click.pass_context
@cli_errors
def set_rate(ctx: click.Context, bucket: str, key: str, rate: str, burst: float | None) -> None:
    """Set one key's rate (e.g. 5/s, 100/m) for every process; takes effect at its next release."""
    ops, target = open_target(ctx, bucket, ("bucket",))
    click.echo(ops.set_rate(target, key, rate, burst))


@redqueue.command(name="set-concurrency")
@click.argument("bucket")
@click.argument("key")
@click.argument("limit")
@click.pass_context
@cli_errors
def set_concurrency(ctx: click.Context, bucket: str, key: str, limit: str) -> None:
    """Set how many calls of one key may be in flight at once across all workers (LIMIT: an
    integer >= 1, or "default" for the bucket's own); takes effect at once."""
    if limit != "default" and not limit.isdigit():
        raise click.BadParameter(f"an integer >= 1 or 'default', got {limit!r}", param_hint="LIMIT")
    ops, target = open_target(ctx, bucket, ("bucket",))
    click.echo(ops.set_concurrency(target, key, None if limit == "default" else int(limit)))


@redqueue.command()
@click.argument("bucket")
@click.argument("key")
@click.option("--seconds", type=float, default=None, help="For this long (default: until resumed).")
@click.pass_context
@cli_errors
def pause(ctx: click.Context, bucket: str, key: str, seconds: float | None) -> None:
    """Pause one key of a bucket for every worker: it keeps accepting calls and releases none."""
    ops, target = open_target(ctx, bucket, ("bucket",))
    click.echo(ops.pause(target, key, seconds))


@redqueue.command()
@click.argument("bucket")
@click.argument("key")
@click.pass_context
@cli_errors
def resume(ctx: click.Context, bucket: str, key: str) -> None:
    """End a key's pause (by hand or a KeyBackoff) and send a drain job for its calls."""
    ops, target = open_target(ctx, bucket, ("bucket",))
    click.echo(ops.resume(target, key))


@redqueue.command()
@click.pass_context
@cli_errors
def reap(ctx: click.Context) -> None:
    """Take back expired reservations of every structure, once."""
    ops = open_ops(ctx)
    for target in ops.targets():
        if target.kind not in WORK_KINDS:
            continue
        if target.structure is None:
            click.echo(f"{target.id}: {target.problem}")
            continue
        result = target.structure.reap()
        if target.kind == "stream":  # opened without the app: it reports the groups due
            sent = f"; {ops.send_drain(target, result.due)}" if result.due else ""
        else:
            sent = f"; {ops.send_drain(target)}" if result.drain_needed else ""
        click.echo(f"{target.id}: {result}{sent}")


#: Name prefix of every beat entry redqueue registers (drain and reaper jobs).
BEAT_ROW_PREFIX = "redqueue: "


@redqueue.command(name="beat-prune")
@click.option("--dry-run", is_flag=True, help="Only list the rows that would be removed.")
@click.pass_context
def beat_prune(ctx: click.Context, dry_run: bool) -> None:
    """Remove redqueue beat rows whose task no longer exists (django-celery-beat).

    django-celery-beat's DatabaseScheduler keeps a row for every entry it ever saw, so the
    drain row of a task removed from the code would go on sending "unregistered task" jobs.
    Celery's default scheduler drops such entries by itself.
    """
    app = app_of(ctx)
    app.loader.import_default_modules()
    try:
        from django_celery_beat.models import PeriodicTask
    except ImportError as exc:
        raise click.ClickException(
            "django-celery-beat is not installed; only its DatabaseScheduler keeps rows of "
            "removed tasks"
        ) from exc
    stale = [
        row
        for row in PeriodicTask.objects.filter(name__startswith=BEAT_ROW_PREFIX)
        if row.task not in app.tasks
    ]
    for row in stale:
        click.echo(f"{'would remove' if dry_run else 'removed'} {row.name!r} (task {row.task})")
        if not dry_run:
            row.delete()
    click.echo(f"{len(stale)} redqueue beat row(s) without a task")


@redqueue.command()
@click.argument("name")
@click.argument("group")
@click.argument("position")
@click.pass_context
@cli_errors
def seek(ctx: click.Context, name: str, group: str, position: str) -> None:
    """Move a stream group's position: start, end, an entry id, an ISO time or epoch seconds."""
    ops, found = open_target(ctx, name, ("stream",))
    stream = found.structure
    target: str | float | datetime = position
    if position not in ("start", "end") and not re.match(r"^\d+-\d+$", position):
        try:
            target = float(position)
        except ValueError:
            try:
                target = datetime.fromisoformat(position)
            except ValueError as exc:
                raise click.ClickException(f"cannot read position {position!r}") from exc
    last = stream.seek(group, target)
    lag = stream.group_figures(group).lag
    sent = ops.send_drain(found)  # one drain job per group, as beat's drain would
    click.echo(f"{group} of {name} now reads after {last}: {lag} to read; {sent}")
