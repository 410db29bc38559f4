"""Backpressure figures: how deep a structure is, how fast work comes and goes, and what it
would take to keep up. One call, bounded Redis work (a few hash reads, no scan of the items).

Rates come from per-second counters kept in a ring of 60 slots by the structure's scripts, so
"per second" means "averaged over the last minute".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..redis.client import redis_errors
from ..redis.lua import script
from .health import server_warnings

WINDOW = 60


@dataclass(frozen=True)
class Figures:
    """What an operator asks of a queue: how far behind is it, and when will it catch up?"""

    #: Items (calls) waiting to be handed out.
    depth: int
    #: Handed out and not yet finished.
    in_flight: int
    #: In the dead-letter list.
    dead: int
    #: Held until due (countdown/eta).
    delayed: int
    #: Counters since the structure was created.
    offered: int
    processed: int
    #: Refused, evicted, dropped or lost: everything shed.
    dropped: int
    #: Items offered per second over the last minute.
    rate_in: float
    #: Items finished (processed, failed or dead-lettered) per second over the last minute.
    rate_out: float
    #: Seconds the oldest waiting item has waited; None when nothing waits.
    oldest_age: float | None
    #: Seconds to empty the structure at the current out-rate; None when nothing goes out.
    drain_eta: float | None
    #: Average seconds a body took over the last minute; None without data.
    seconds_per_item: float | None
    #: Worker processes needed to keep up with the in-rate at that time per item.
    workers_needed: float | None
    #: What in Redis's configuration can lose calls (an eviction policy, persistence off);
    #: see :func:`~celery_redqueue.structures.health.server_warnings`.
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ring_sums(flow: dict[bytes, bytes], now_ms: float) -> dict[str, float]:
    """Sum each kind's per-second slots that fall within the last minute."""
    now_sec = int(now_ms // 1000)
    sums: dict[str, float] = {}
    for field, value in flow.items():
        kind = field.decode().split(":", 1)[0]
        sec_text, amount = value.decode().split(" ")
        if now_sec - WINDOW < int(sec_text) <= now_sec:
            sums[kind] = sums.get(kind, 0.0) + float(amount)
    return sums


def read_flow(
    client: Any, stats_key: str, flow_key: str, ages_key: str
) -> tuple[dict[str, int], dict[str, float], float | None, float]:
    """Counters, last-minute sums, oldest offer time (ms) and the server time (ms), read in one
    script on the structure's node so they agree with each other."""
    stats, flow, oldest, now = script("read_flow")(client, [stats_key, flow_key, ages_key], [])
    now_ms = float(now)
    counters = {stats[i].decode(): int(stats[i + 1]) for i in range(0, len(stats), 2)}
    flow_map = {flow[i]: flow[i + 1] for i in range(0, len(flow), 2)}
    return counters, ring_sums(flow_map, now_ms), (float(oldest) if oldest else None), now_ms


def compute(
    *,
    depth: int,
    in_flight: int,
    dead: int,
    delayed: int,
    offered: int,
    processed: int,
    dropped: int,
    sums: dict[str, float],
    oldest_ms: float | None,
    now_ms: float,
    warnings: tuple[str, ...] = (),
) -> Figures:
    rate_in = sums.get("in", 0.0) / WINDOW
    rate_out = sums.get("out", 0.0) / WINDOW
    done = sums.get("done", 0.0)
    per_item = sums.get("busy", 0.0) / done if done else None
    return Figures(
        depth=depth,
        in_flight=in_flight,
        dead=dead,
        delayed=delayed,
        offered=offered,
        processed=processed,
        dropped=dropped,
        rate_in=rate_in,
        rate_out=rate_out,
        oldest_age=max(now_ms - oldest_ms, 0.0) / 1000 if oldest_ms is not None else None,
        drain_eta=(depth + in_flight) / rate_out if rate_out > 0 else (0.0 if not depth else None),
        seconds_per_item=per_item,
        workers_needed=rate_in * per_item if per_item is not None else None,
        warnings=warnings,
    )


def structure_figures(
    client: Any,
    keys: Any,
    *,
    depth: str,
    offered: tuple[str, ...],
    dropped: tuple[str, ...],
) -> Figures:
    """Figures of one structure; the arguments name the counters that mean depth, offered and
    dropped in its stats hash (pools and buckets count those under different names)."""
    with redis_errors(f"reading figures of {keys.base}"):
        counters, sums, oldest, now = read_flow(client, keys("stats"), keys("flow"), keys("ages"))

    def total(names: tuple[str, ...]) -> int:
        return sum(counters.get(name, 0) for name in names)

    return compute(
        depth=counters.get(depth, 0),
        in_flight=counters.get("in_flight", 0),
        dead=counters.get("dead", 0),
        delayed=counters.get("delayed", 0),
        offered=total(offered),
        processed=counters.get("processed", 0),
        dropped=total(dropped),
        sums=sums,
        oldest_ms=oldest,
        now_ms=now,
        warnings=server_warnings(client),
    )
