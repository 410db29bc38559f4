"""``celery -A proj redqueue ...``: look at and tend every structure of an app, found through the
registry (only the app's settings are needed). docs/operations.md lists the commands.
"""

from __future__ import annotations

import json
import time
from typing import Final

import click
from celery.bin.worker import worker

from ..redis.server import server_warnings
from ..structures.loss import check_for_loss
from ..tasks.consumer import add_worker_option
from .bucket_views import OverridesView, PausedView
from .cli_base import (
    app_of,
    cli_errors,
    open_ops,
    open_target,
    redqueue,
    seconds_text,
    structure_command,
)
from .reading import WORK_KINDS, Operations, Target, json_default

# This module is the package's `celery.commands` plugin, loaded before Celery parses the command
# line: the place to give `celery worker` its --redqueue-consumer flag.
add_worker_option(worker)


@redqueue.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.pass_context
@cli_errors
def list_structures(ctx: click.Context, as_json: bool) -> None:
    """Every registered structure, with its backpressure figures."""
    ops = open_ops(ctx)
    for text in server_warnings(ops.client):
        click.echo(f"warning: {text}", err=True)
    for loss in check_for_loss(ops.client, ops.prefix):
        click.echo(f"data lost: {loss.describe()}", err=True)
    views = ops.overview()["structures"]
    if as_json:
        figures: dict[str, object] = {}
        for view in views:
            if "figures" in view:  # a stream's groups go with its figures
                groups = {"groups": view["groups"]} if "groups" in view else {}
                figures[view["id"]] = {**view["figures"].as_dict(), **groups}
            else:
                figures[view["id"]] = view.get("leases", view.get("unique"))
        click.echo(json.dumps(figures, indent=2, default=json_default))
        return
    if not views:
        click.echo("no structures registered under this prefix yet")
        return
    # The name column fits the longest name (task names are long), so the figures line up.
    w = max(
        [
            40,
            *(len(v["id"]) for v in views),
            *(len(g.group) + 8 for v in views for g in v.get("groups", ())),
        ]
    )
    header = f"{'structure':{w}} {'depth':>8} {'flight':>7} {'dead':>6} {'delayed':>7} "
    header += f"{'in/s':>8} {'out/s':>8} {'oldest':>8} {'drain':>8} {'workers':>7}"
    click.echo(header)
    for view in views:
        if "error" in view:
            click.echo(f"{view['id']:{w}} {view['error']}")
        elif "leases" in view:
            s = view["leases"]
            click.echo(f"{view['id']:{w}} {s['free']} free, {s['leased']} held of {s['resources']}")
        elif "unique" in view:
            click.echo(f"{view['id']:{w}} {unique_summary(view['unique'])}")
        else:
            f = view["figures"]
            workers = "-" if f.workers_needed is None else f"{f.workers_needed:.2f}"
            click.echo(
                f"{view['id']:{w}} {f.depth:8} {f.in_flight:7} {f.dead:6} "
                f"{f.delayed:7} {f.rate_in:8.2f} {f.rate_out:8.2f} "
                f"{seconds_text(f.oldest_age):>8} {seconds_text(f.drain_eta):>8} {workers:>7}"
            )
            for g in view.get("groups", ()):
                # A stream's groups: depth is the group's lag, in flight its pending entries,
                # dead what it dead-lettered, oldest the age of its oldest pending entry.
                click.echo(
                    f"{'  group ' + g.group:{w}} {g.lag:8} {g.pending:7} {g.dead:6} "
                    f"{'':7} {g.rate_in:8.2f} {g.rate_out:8.2f} "
                    f"{seconds_text(g.oldest_pending_age):>8}"
                )
    if any("groups" in view for view in views):
        click.echo("(a stream's group: depth is its lag, flight its pending entries)")


def identities(kind: str, c: dict[str, int]) -> list[tuple[str, int, int]]:
    """The accounting identities of a kind as (statement, left side, right side)."""
    if kind == "pool":
        terminal = ("processed", "failed", "evicted", "lost", "dead", "purged", "depth")
        return [
            ("offered == accepted + rejected", c["offered"], c["accepted"] + c["rejected"]),
            (
                "accepted == processed + failed + evicted + lost + dead + purged + depth "
                "+ in_flight",
                c["accepted"],
                sum(c[n] for n in terminal) + c["in_flight"],
            ),
        ]
    if kind == "stream":
        return [
            (
                "published + requeued - trimmed == length",
                c["published"] + c["requeued"] - c["trimmed"],
                c["length"],
            )
        ]
    if kind == "bucket":
        parts = ("processed", "evicted", "purged", "dead", "depth", "in_flight")
        return [
            (
                "enqueued == processed + evicted + purged + dead + depth + in_flight",
                c["enqueued"],
                sum(c[n] for n in parts),
            )
        ]
    if kind == "unique":
        # A takeover (a worker taking its call's queued lock) is granted without the first
        # grant ending: no identity ties the counters together.
        return []
    return [
        (
            "resources == free + leased + expired",
            c["resources"],
            c["free"] + c["leased"] + c["expired"],
        )
    ]


@structure_command((*WORK_KINDS, "lease", "unique"), "Print the counters as JSON.")
def stats(ctx: click.Context, ops: Operations, target: Target, as_json: bool) -> None:
    """Every counter of a structure, with its accounting identities checked (exit 1 if off)."""
    stats = target.structure.stats()
    counters = stats if isinstance(stats, dict) else stats.as_dict()
    groups = {g.group: g.as_dict() for g in ops.groups(target)} if target.kind == "stream" else {}
    checks = identities(target.kind, counters)
    if as_json:
        data = {"counters": counters, "identities_hold": all(a == b for _, a, b in checks)}
        click.echo(json.dumps({**data, "groups": groups} if groups else data, indent=2))
    else:
        click.echo(target.id)
        for key in sorted(counters):
            click.echo(f"  {key:16} {counters[key]}")
        for group, values in groups.items():
            click.echo(f"  group {group}")
            for key, value in values.items():
                if key not in ("group", "exists"):
                    click.echo(f"    {key:18} {'-' if value is None else value}")
        for statement, left, right in checks:
            verdict = "ok" if left == right else f"MISMATCH ({left} != {right})"
            click.echo(f"  check: {statement}: {verdict}")
    if any(left != right for _, left, right in checks):
        if target.kind == "bucket" and not as_json:
            click.echo("  (a dead letter requeued into a full key is counted as rejected)")
        ctx.exit(1)


@redqueue.command()
@click.argument("name")
@click.option("--limit", default=20, show_default=True, help="How many, from the oldest.")
@click.pass_context
@cli_errors
def dead(ctx: click.Context, name: str, limit: int) -> None:
    """List a structure's dead letters: payload, receives, last error."""
    letters = open_target(ctx, name)[1].structure.dead_letters(0, limit - 1)
    if not letters:
        click.echo("no dead letters")
    for letter in letters:
        key = f" key={letter.key}" if letter.key is not None else ""
        click.echo(
            f"receives={letter.receives}{key} error={letter.error!r} payload={letter.payload!r}"
        )


@redqueue.command()
@click.argument("bucket")
@click.option("--top", default=20, show_default=True, help="How many keys.")
@click.option("--search", default="", help="Only keys whose name contains this text.")
@click.option("--paused", "view", flag_value="paused", help="Only the paused keys, until when.")
@click.option(
    "--overrides",
    "view",
    flag_value="overrides",
    help="The bucket's limits and the keys whose rate or cost budget was set apart.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the keys as JSON.")
@click.pass_context
@cli_errors
def keys(
    ctx: click.Context, bucket: str, top: int, search: str, view: str | None, as_json: bool
) -> None:
    """A bucket's busiest keys: depth, in flight, rate, next eligible, paused (or only the
    paused keys, or the per-key overrides)."""
    if view and search:
        raise click.UsageError(f"--search lists the busiest keys; it does not apply to --{view}")
    ops, target = open_target(ctx, bucket, ("bucket",))
    if view == "paused":
        show_paused(ops.paused(target, top), as_json)
        return
    if view == "overrides":
        show_overrides(ops.overrides(target, top), as_json)
        return
    rows = ops.keys(target, top, search)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no keys")
        return
    click.echo(
        f"{'key':40} {'depth':>8} {'flight':>7} {'rate/s':>10} {'burst':>6} "
        f"{'next eligible':13} paused"
    )
    for row in rows:
        rate = f"{row['rate']:g}" + ("" if row["custom_rate"] else "*")
        click.echo(
            f"{row['key']:40} {row['depth']:8} {row['in_flight']:7} {rate:>10} "
            f"{row['burst']:6g} {clock(row['next_eligible']):13} "
            f"{pause_text(row['paused'], row['paused_until'])}"
        )
    click.echo("(* the bucket's default rate; --overrides lists the keys with their own)")


def clock(when: float | None) -> str:
    return "-" if when is None else time.strftime("%H:%M:%S", time.localtime(when))


def pause_text(paused: bool, until: float | None) -> str:
    if not paused:
        return "-"
    return "until resumed" if until is None else f"until {clock(until)}"


def show_paused(figures: PausedView, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    rows = figures["paused"]
    shown = f", the {len(rows)} soonest to end shown" if len(rows) < figures["paused_count"] else ""
    click.echo(f"{figures['paused_count']} key(s) paused{shown}")
    for row in rows:
        click.echo(f"  {row['key']:40} {pause_text(True, row['until'])}")


def show_overrides(figures: OverridesView, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    d = figures["defaults"]
    limits = [f"rate {d['rate']:g}/s", f"burst {d['burst']:g}"]
    if d["concurrency"]:
        limits.append(f"concurrency {d['concurrency']} per key")
    if d["cost_rate"] is not None:
        limits.append(f"cost {d['cost_rate']:g}/s (burst {d['cost_burst']:g})")
    click.echo("every key: " + ", ".join(limits))
    rows = figures["overrides"]
    if not rows:
        click.echo("no key has a rate or cost budget of its own")
        return
    shown = f" ({len(rows)} of {figures['count']} shown)" if len(rows) < figures["count"] else ""
    click.echo(f"keys with their own limits{shown}:")
    click.echo(
        f"  {'key':40} {'rate/s':>10} {'burst':>6} {'cost/s':>10} {'burst':>6} {'in flight':>9}"
    )
    for row in rows:
        cells = [
            "-" if row.get(name) is None else f"{row[name]:g}"
            for name in ("rate", "burst", "cost_rate", "cost_burst", "concurrency")
        ]
        click.echo(
            f"  {row['key']:40} {cells[0]:>10} {cells[1]:>6} {cells[2]:>10} {cells[3]:>6} "
            f"{cells[4]:>9}"
        )


@redqueue.command()
@click.argument("bucket")
@click.option("--top", default=10, show_default=True, help="How many keys in each list.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.pass_context
@cli_errors
def noisy(ctx: click.Context, bucket: str, top: int, as_json: bool) -> None:
    """Noisy neighbours: the busiest keys (their share of the last minute's releases), the
    longest-waiting keys (age of their oldest call) and the paused keys."""
    ops, target = open_target(ctx, bucket, ("bucket",))
    figures = ops.noisy(target, top)
    if as_json:
        click.echo(json.dumps(figures, indent=2))
        return
    click.echo(f"busiest (last minute):   {'releases':>9} {'share':>7}")
    for row in figures["busiest"] or [{"key": "-", "releases": 0, "share": 0}]:
        click.echo(f"  {row['key']:38} {row['releases']:9g} {row['share']:7.1%}")
    click.echo("longest waiting:         oldest call (s)")
    for row in figures["longest_waiting"] or [{"key": "-", "oldest_age": 0}]:
        click.echo(f"  {row['key']:38} {row['oldest_age']:9.1f}")
    click.echo(f"paused ({figures['paused_count']}):")
    for paused in figures["paused"]:
        until = paused["until"]
        left = (
            "until resumed"
            if until is None
            else time.strftime("until %H:%M:%S", time.localtime(until))
        )
        click.echo(f"  {paused['key']:38} {left}")


@structure_command(("lease",), "Print as JSON.")
def leases(ctx: click.Context, ops: Operations, target: Target, as_json: bool) -> None:
    """Leased resources: each resource, its acquisitions, free or held and its lease's expiry."""
    rows = ops.resources(target)
    if as_json:
        click.echo(json.dumps({"stats": target.structure.stats().as_dict(), "resources": rows}))
        return
    s = target.structure.stats()
    click.echo(
        f"{target.id}: {s.free} free, {s.leased} held, {s.expired} expired of {s.resources}; "
        f"{s.acquired} acquired, {s.released} released, {s.reclaimed} reclaimed"
    )
    for row in rows:
        detail = "" if row["state"] == "free" else f" expires in {row['expires_in']:.1f}s"
        click.echo(f"  {row['resource']:40} {row['acquisitions']:8} {row['state']}{detail}")


TIMES: Final = ("since", "until")


def _clock(at: float | None) -> str:
    return "-" if at is None else time.strftime("%H:%M:%S", time.localtime(at))


def unique_summary(s: dict[str, int]) -> str:
    """One line of a unique-lock table's counters."""
    return (
        f"{s['held']} held; {s['acquired']} acquired, {s['refused']} refused, "
        f"{s['released']} released, {s['expired']} expired, {s['handed_back']} handed back"
    )


@structure_command(("unique",), "Print as JSON.")
def unique(ctx: click.Context, ops: Operations, target: Target, as_json: bool) -> None:
    """A unique-lock table: its held keys (who holds each, since when, until when; the soonest
    to run out first), and its counters (refused: duplicates refused)."""
    rows = ops.unique_keys(target)
    stats = target.structure.stats().as_dict()
    if as_json:
        click.echo(json.dumps({"stats": stats, "held": rows}))
        return
    click.echo(f"{target.id}: {unique_summary(stats)}")
    if rows:
        click.echo(f"  {'key':30} {'task id':36} {'phase':7} {'since':8} {'until':8} who")
    for row in rows:
        since, until = (time.strftime("%H:%M:%S", time.localtime(row[t])) for t in TIMES)
        state = "" if row["state"] == "held" else " (expired: its holder died)"
        click.echo(
            f"  {row['key']:30} {row['task_id']:36} {row['phase']:7} {since:8} {until:8} "
            f"{row['who']}{state}"
        )


@redqueue.command()
@click.option("--top-keys", default=10, show_default=True, help="Per-key series per bucket.")
@click.pass_context
@cli_errors
def metrics(ctx: click.Context, top_keys: int) -> None:
    """Print Prometheus metrics (text format), e.g. for node_exporter's textfile collector."""
    from .metrics import render

    body, _ = render(open_ops(ctx), top_keys)
    click.echo(body.decode(), nl=False)


@redqueue.command()
@click.option("--interval", default=2.0, show_default=True, help="Seconds between refreshes.")
@click.option("--iterations", type=int, default=None, help="Stop after this many frames.")
@click.pass_context
@cli_errors
def top(ctx: click.Context, interval: float, iterations: int | None) -> None:
    """A live view of every structure, redrawn in place; Ctrl-C to leave."""
    from .top import run_top

    run_top(open_ops(ctx), interval, iterations)


@redqueue.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=5566, show_default=True, help="Port (0 picks a free one).")
@click.option(
    "--token",
    envvar="REDQUEUE_DASHBOARD_TOKEN",
    default=None,
    help="Unlocks actions (default: redqueue_dashboard_token; none: read-only).",
)
@click.option("--refresh", default=2.0, show_default=True, help="Seconds between refreshes.")
@click.pass_context
@cli_errors
def dashboard(ctx: click.Context, host: str, port: int, token: str | None, refresh: float) -> None:
    """Serve the dashboard: live figures, history, keys, dead letters, leases, /metrics."""
    from .dashboard import LOOPBACK_NAMES, dashboard_app, make_dashboard_server

    # Bound to loopback, only loopback names are expected in Host (see Dashboard).
    hosts = LOOPBACK_NAMES if host in ("127.0.0.1", "localhost", "::1") else None
    app = dashboard_app(app_of(ctx), token=token, refresh=refresh, allowed_hosts=hosts)
    server = make_dashboard_server(app, host, port)
    bound_host, bound_port = server.server_address[:2]
    mode = "actions need the token" if app.token else "read-only (no token)"
    click.echo(f"redqueue dashboard on http://{bound_host!s}:{bound_port}/ ({mode})", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@structure_command(("pool", "bucket"), "Print as JSON.")
def debounced(ctx: click.Context, ops: Operations, target: Target, as_json: bool) -> None:
    """A debouncing pool's or bucket's dedupe ids holding a call (the soonest due first): since
    when (its first call), due when, and how many calls merged so far (the latest arguments
    win)."""
    rows = ops.debounced_keys(target)
    debounce = target.structure.settings().get("debounce", 0)
    if as_json:
        click.echo(json.dumps({"debounce": debounce, "waiting": rows}))
        return
    window = f"debounce {debounce:g}s" if debounce else "no debounce"
    click.echo(f"{target.id}: {len(rows)} debounced keys waiting ({window})")
    if rows:
        click.echo(f"  {'key':30} {'since':8} {'due':8} {'due in':>8} calls")
    for row in rows:
        click.echo(
            f"  {row['key']:30} {_clock(row['since']):8} {_clock(row['due']):8} "
            f"{row['due_in']:>7.1f}s {row['calls']}"
        )


# The commands that change things live beside this module; importing it registers them (the
# entry point names this module's group).
from . import cli_actions  # noqa: E402, F401
