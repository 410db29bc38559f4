"""``celery -A proj redqueue ...``: look at and tend every pool and bucket of an app.

Structures are found through the registry, so the command needs only the app's settings
(``redqueue_url``, ``redqueue_key_prefix``), not the modules that define the tasks.

    celery -A proj redqueue list                     # every structure with its figures
    celery -A proj redqueue dead pool:proj.record    # its dead letters
    celery -A proj redqueue requeue pool:proj.record [--limit N]
    celery -A proj redqueue purge pool:proj.record [--limit N] --yes
    celery -A proj redqueue reap                     # what beat's reaper does, once
    celery -A proj redqueue seek stream:orders sms start   # replay (or skip) for one group
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import click

from ..structures.bucket import LeakyBucket
from ..structures.catalog import open_structure, registered
from ..structures.pool import CappedPool
from ..structures.streams import EventStream
from ..tasks.beat import DRAIN_HEADER
from ..tasks.config import get_config
from ..tasks.stream import stream_tasks


def _app(ctx: click.Context) -> Any:
    return ctx.obj.app


def _structures(ctx: click.Context) -> list[tuple[str, CappedPool | LeakyBucket]]:
    config = get_config(_app(ctx))
    client = config.client()
    found = []
    for kind, name, settings in registered(client, config.key_prefix):
        structure = open_structure(client, config.key_prefix, kind, name, settings)
        if structure is not None:
            structure.serializer = config.serializer
            found.append((f"{kind}:{name}", structure))
    return found


def _find(ctx: click.Context, name: str) -> CappedPool | LeakyBucket:
    for full_name, structure in _structures(ctx):
        if name in (full_name, structure.name):
            return structure
    raise click.ClickException(f"no pool or bucket named {name!r} (see: redqueue list)")


def _kick(ctx: click.Context, structure: CappedPool | LeakyBucket) -> str:
    """Send a drain job for the structure's task, if this app knows one by that name."""
    app = _app(ctx)
    app.loader.import_default_modules()
    if isinstance(structure, EventStream):  # a stream is drained by one task per group
        for task in stream_tasks(app, structure.name):
            task.send_drain()
        return "; drain jobs sent" if stream_tasks(app, structure.name) else "; beat's drain next"
    if structure.name in app.tasks:
        app.send_task(structure.name, (), {}, headers={DRAIN_HEADER: 1})
        return "; drain job sent"
    return "; beat's drain will pick them up"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


@click.group(name="redqueue")
def redqueue() -> None:
    """Pools and buckets of celery-redqueue: figures, dead letters, reaping."""


@redqueue.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.pass_context
def list_structures(ctx: click.Context, as_json: bool) -> None:
    """Every registered pool and bucket, with its backpressure figures."""
    structures = dict(_structures(ctx))
    rows = [(name, structure.figures()) for name, structure in structures.items()]
    if as_json:
        click.echo(json.dumps({name: f.as_dict() for name, f in rows}, indent=2))
        return
    if not rows:
        click.echo("no pools or buckets registered under this prefix yet")
        return
    header = f"{'structure':40} {'depth':>8} {'flight':>7} {'dead':>6} {'delayed':>7} "
    header += f"{'in/s':>8} {'out/s':>8} {'oldest':>8} {'drain':>8} {'workers':>7}"
    click.echo(header)
    for name, f in rows:
        workers = "-" if f.workers_needed is None else f"{f.workers_needed:.2f}"
        click.echo(
            f"{name:40} {f.depth:8} {f.in_flight:7} {f.dead:6} {f.delayed:7} "
            f"{f.rate_in:8.2f} {f.rate_out:8.2f} {_seconds(f.oldest_age):>8} "
            f"{_seconds(f.drain_eta):>8} {workers:>7}"
        )
        stream = structures[name]
        if isinstance(stream, EventStream):  # one line per group: lag, pending
            for group in stream.groups():
                g = stream.group_figures(group)
                click.echo(
                    f"  group {group:32} {g.lag:8} {g.pending:7} {g.dead:6} {'':7} "
                    f"{g.rate_in:8.2f} {g.rate_out:8.2f} {_seconds(g.oldest_pending_age):>8}"
                )


@redqueue.command()
@click.argument("name")
@click.option("--limit", default=20, show_default=True, help="How many, from the oldest.")
@click.pass_context
def dead(ctx: click.Context, name: str, limit: int) -> None:
    """List a structure's dead letters: payload, receives, last error."""
    letters = _find(ctx, name).dead_letters(0, limit - 1)
    if not letters:
        click.echo("no dead letters")
    for letter in letters:
        key = f" key={letter.key}" if letter.key is not None else ""
        click.echo(
            f"receives={letter.receives}{key} error={letter.error!r} payload={letter.payload!r}"
        )


@redqueue.command()
@click.argument("name")
@click.option("--limit", default=-1, help="How many, from the oldest (default: all).")
@click.pass_context
def requeue(ctx: click.Context, name: str, limit: int) -> None:
    """Put dead letters back in their queue (receives reset) and send a drain job."""
    structure = _find(ctx, name)
    count = structure.requeue_dead(limit=limit)
    click.echo(f"requeued {count}" + (_kick(ctx, structure) if count else ""))


@redqueue.command()
@click.argument("name")
@click.option("--limit", default=-1, help="How many, from the oldest (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def purge(ctx: click.Context, name: str, limit: int, yes: bool) -> None:
    """Delete dead letters (they are counted as purged)."""
    structure = _find(ctx, name)
    if not yes:
        click.confirm(f"Delete dead letters of {name}?", abort=True)
    click.echo(f"purged {structure.purge_dead(limit=limit)}")


@redqueue.command()
@click.pass_context
def reap(ctx: click.Context) -> None:
    """Take back expired reservations of every structure, once."""
    for name, structure in _structures(ctx):
        result = structure.reap()
        click.echo(f"{name}: {result}" + (_kick(ctx, structure) if result.drain_needed else ""))


@redqueue.command()
@click.argument("name")
@click.argument("group")
@click.argument("position")
@click.pass_context
def seek(ctx: click.Context, name: str, group: str, position: str) -> None:
    """Move a stream group's position: start, end, an entry id, an ISO time or epoch seconds."""
    stream = _find(ctx, name)
    if not isinstance(stream, EventStream):
        raise click.ClickException(f"{name!r} is not a stream")
    target: Any = position
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
    click.echo(f"{group} of {name} now reads after {last}: {lag} to read" + _kick(ctx, stream))
