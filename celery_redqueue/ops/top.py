"""``celery -A proj redqueue top``: every structure's figures, redrawn in place like ``top``."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

from .reading import Operations, Overview

#: Move the cursor home and clear what follows: the frame is redrawn over the last one.
HOME, CLEAR_BELOW = "\x1b[H", "\x1b[J"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spark(values: list[float], width: int = 20) -> str:
    """The last ``width`` values as a one-line bar chart."""
    bars = " ▁▂▃▄▅▆▇█"
    tail = values[-width:]
    top = max(tail, default=0) or 1
    return "".join(bars[round(v / top * (len(bars) - 1))] for v in tail)


def frame(overview: Overview, width: int = 120) -> list[str]:
    """The lines of one frame (pure: the figures in, text out)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(overview["time"]))
    lines = [f"redqueue top - {stamp} - prefix {overview['prefix']} - Ctrl-C to leave", ""]
    lines += [f"! {warning}" for warning in overview["warnings"]]
    # The name column is as wide as the longest name (at most 40): with the usual short names a
    # row and its sparkline fit in 120 columns beside the shed column.
    named = [v["id"] for v in overview["structures"]]
    named += ["  group " + g.group for v in overview["structures"] for g in v.get("groups", ())]
    w = min(40, max([len("structure"), *map(len, named)]))
    header = (
        f"{'structure':{w}} {'depth':>8} {'flight':>7} {'dead':>6} {'shed':>7} {'in/s':>8} "
        f"{'out/s':>8} {'oldest':>8} {'drain':>8} {'workers':>7}  in, last minute"
    )
    lines += [header, "-" * min(len(header) + 8, width)]
    for view in overview["structures"]:
        name = view["id"] if len(view["id"]) <= w else "…" + view["id"][1 - w :]
        if "error" in view:
            lines.append(f"{name:{w}} {view['error']}")
        elif "leases" in view:
            stats = view["leases"]
            lines.append(
                f"{name:{w}} {stats['free']:>5} free {stats['leased']:>5} held "
                f"{stats['expired']:>4} expired {stats['acquired']:>8} leases"
            )
        elif "unique" in view:
            stats = view["unique"]
            lines.append(
                f"{name:{w}} {stats['held']:>5} held {stats['refused']:>8} refused "
                f"{stats['expired']:>5} expired (unique keys)"
            )
        else:
            f = view["figures"]
            history = view.get("history")
            spark = _spark(history.seconds_in) if history else ""
            # shed: a pool's rejected + evicted + lost, a bucket's rejected + evicted
            # + duplicates, a stream's trimmed); `stats NAME` has the split.
            lines.append(
                f"{name:{w}} {f.depth:8} {f.in_flight:7} {f.dead:6} {f.shed:7} "
                f"{f.rate_in:8.2f} {f.rate_out:8.2f} {_secs(f.oldest_age):>8} "
                f"{_secs(f.drain_eta):>8} {_num(f.workers_needed):>7}  {spark}"
            )
            for g in view.get("groups", ()):  # a stream: its groups' lag and pending entries
                lines.append(
                    f"{'  group ' + g.group:{w}} {g.lag:8} {g.pending:7} {g.dead:6} "
                    f"{'':7} {g.rate_in:8.2f} {g.rate_out:8.2f} "
                    f"{_secs(g.oldest_pending_age):>8}"
                )
    if not overview["structures"]:
        lines.append("no structures registered under this prefix yet")
    return [line[:width] for line in lines]


def run_top(
    ops: Operations,
    interval: float = 2.0,
    iterations: int | None = None,
    out: TextIO | None = None,
) -> None:
    """Redraw the frame every ``interval`` seconds until Ctrl-C (or ``iterations`` frames)."""
    stream = out or sys.stdout
    done = 0
    try:
        while iterations is None or done < iterations:
            if done:
                time.sleep(interval)
            # A terminal that reports 0 columns (a new pty, some `docker exec -t`) gets the
            # fallback on Python 3.11+ but 0 on 3.10, which cut every line to nothing.
            width = shutil.get_terminal_size((120, 40)).columns or 120
            text = "\n".join(frame(ops.overview(history=True), width))
            stream.write(f"{HOME}{text}\n{CLEAR_BELOW}")
            stream.flush()
            done += 1
    except KeyboardInterrupt:
        stream.write("\n")
