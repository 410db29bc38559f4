"""Backpressure figures: how deep a structure is, how fast work comes and goes, and what it
would take to keep up. One call, bounded Redis work (a few hash reads, no scan of the items).

Rates come from per-second counters kept by the structure's scripts (tick.lua: one field per
second, pruned after two minutes), so "per second" means "averaged over the last minute". The
same scripts keep per-minute counters for an hour, read in the same call as `History`:
the last hour, minute by minute.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import CorruptDataError
from ..redis.client import redis_errors
from ..redis.lua import script
from ..redis.server import server_warnings
from .receipts import Record

if TYPE_CHECKING:
    from ..redis.client import Client
    from ..redis.keys import StructureKeys

WINDOW = 60
#: Minutes of history kept by the per-minute counters.
HOUR = 60


@dataclass(frozen=True)
class History(Record):
    """The last minute second by second and the last hour minute by minute, oldest first.

    Counts are per slot (items offered / finished in that second or minute); ``depth`` is the
    deepest depth seen by a reading in that minute, None for a minute in which nobody looked.
    """

    #: Server time (Unix seconds) where each of the 60 seconds starts.
    second_starts: list[int]
    seconds_in: list[float]
    seconds_out: list[float]
    #: Server time (Unix seconds) where each of the 60 minutes starts.
    minute_starts: list[int]
    minutes_in: list[float]
    minutes_out: list[float]
    minutes_depth: list[float | None]


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
    #: Everything shed: rejected, evicted, lost (and a bucket's duplicates, a stream's trimmed).
    shed: int
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
    #: The stats hash as read in the same call (every counter of the kind, by its own name).
    counters: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)
    #: The last minute and the last hour, read in the same call.
    history: History | None = field(default=None, repr=False, compare=False)
    #: What in Redis's configuration can lose calls (an eviction policy, persistence off);
    #: see `server_warnings()`.
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The figures only (counters and history have their own ``as_dict``)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("counters", "history")}


def _slots(flow: Mapping[bytes, bytes]) -> list[tuple[str, bool, int, float]]:
    """Each flow field as (kind, is_minute, stamp, value): "<kind>:<second>" and
    "<kind>:m<minute>" (roll_flow.lua). Fields of another shape are skipped."""
    slots = []
    for name, value in flow.items():
        kind, _, slot = name.decode(errors="replace").partition(":")
        minute = slot.startswith("m")
        try:
            stamp, amount = int(slot[1:] if minute else slot), float(value)
        except ValueError:
            continue
        slots.append((kind, minute, stamp, amount))
    return slots


def parse_counters(where: str, flat: Mapping[bytes, bytes]) -> dict[str, int]:
    """A stats hash's fields as integers; a field that is not an integer (written by another
    program, or corrupted) raises [`CorruptDataError`][celery_redqueue.CorruptDataError] naming
    ``where`` (the hash's key) and the field, rather than a bare ``ValueError`` from deep inside
    ``stats()``."""
    counters: dict[str, int] = {}
    for name, value in flat.items():
        text = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        try:
            counters[text] = int(value)
        except (TypeError, ValueError):
            raise CorruptDataError(
                f"{where}: counter field {text!r} holds {value!r}, not an integer"
            ) from None
    return counters


def unfold(counters: Mapping[str, int]) -> dict[str, int]:
    """Counters with each folded field added to every counter it names: the hot scripts bump
    one field "offered+accepted+depth" where three HINCRBYs would say the same thing."""
    out: dict[str, int] = {}
    for name, value in counters.items():
        for part in name.split("+"):
            out[part] = out.get(part, 0) + value
    return out


def ring_sums(flow: Mapping[bytes, bytes], now_ms: float) -> dict[str, float]:
    """Sum each kind's per-second slots that fall within the last minute."""
    now_sec = int(now_ms // 1000)
    sums: dict[str, float] = {}
    for kind, minute, stamp, amount in _slots(flow):
        if not minute and now_sec - WINDOW < stamp <= now_sec:
            sums[kind] = sums.get(kind, 0.0) + amount
    return sums


def ring_history(flow: Mapping[bytes, bytes], now_ms: float) -> History:
    """Lay the flow fields out as series ending at the current second and minute (fields
    outside the window, not yet pruned, are not shown). A minute counts its minute field plus
    its second fields not yet rolled into it (roll_flow.lua)."""
    now_sec = int(now_ms // 1000)
    now_min = now_sec // 60
    per_second: dict[tuple[str, int], float] = {}
    per_minute: dict[tuple[str, int], float] = {}
    for kind, minute, stamp, amount in _slots(flow):
        if not minute:
            per_second[kind, stamp] = amount
            stamp //= 60
        per_minute[kind, stamp] = per_minute.get((kind, stamp), 0.0) + amount
    seconds = list(range(now_sec - WINDOW + 1, now_sec + 1))
    minutes = list(range(now_min - HOUR + 1, now_min + 1))
    return History(
        second_starts=seconds,
        seconds_in=[per_second.get(("in", s), 0.0) for s in seconds],
        seconds_out=[per_second.get(("out", s), 0.0) for s in seconds],
        minute_starts=[m * 60 for m in minutes],
        minutes_in=[per_minute.get(("in", m), 0.0) for m in minutes],
        minutes_out=[per_minute.get(("out", m), 0.0) for m in minutes],
        minutes_depth=[per_minute.get(("depth", m)) for m in minutes],
    )


def read_flow(
    client: Client, stats_key: str, flow_key: str, ages_key: str, depth_field: str = ""
) -> tuple[dict[str, int], dict[bytes, bytes], float | None, float]:
    """Counters, the flow fields, oldest offer time (ms) and the server time (ms), read in one
    script on the structure's node so they agree with each other. With ``depth_field``, the
    script also records the depth it saw in this minute's history slot."""
    stats, flow, oldest, now = script("read_flow")(
        client, [stats_key, flow_key, ages_key], [depth_field]
    )
    counters = unfold(
        parse_counters(stats_key, {stats[i]: stats[i + 1] for i in range(0, len(stats), 2)})
    )
    flow_map = {flow[i]: flow[i + 1] for i in range(0, len(flow), 2)}
    return counters, flow_map, (float(oldest) if oldest else None), float(now)


def compute(
    *,
    depth: int,
    in_flight: int,
    dead: int,
    delayed: int,
    offered: int,
    processed: int,
    shed: int,
    sums: dict[str, float],
    oldest_ms: float | None,
    now_ms: float,
    counters: Mapping[str, int] | None = None,
    history: History | None = None,
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
        shed=shed,
        rate_in=rate_in,
        rate_out=rate_out,
        oldest_age=max(now_ms - oldest_ms, 0.0) / 1000 if oldest_ms is not None else None,
        drain_eta=(depth + in_flight) / rate_out if rate_out > 0 else (0.0 if not depth else None),
        seconds_per_item=per_item,
        workers_needed=rate_in * per_item if per_item is not None else None,
        counters=dict(counters or {}),
        history=history,
        warnings=warnings,
    )


def structure_figures(
    client: Client,
    keys: Sequence[StructureKeys],
    *,
    depth: str,
    offered: tuple[str, ...],
    shed: tuple[str, ...],
) -> Figures:
    """Figures of one structure, read from each of its shards (``keys``: its own, or a sharded
    structure's shards: counters, rates and history summed, the oldest waiting call of any);
    the arguments name the counters that mean depth, offered and shed in its stats hash
    (pools and buckets count those under different names)."""
    counters: dict[str, int] = {}
    sums: dict[str, float] = {}
    oldest: list[float] = []
    histories = []
    now = 0.0
    for shard in keys:
        with redis_errors(f"reading figures of {shard.base}"):
            got, flow, first, at = read_flow(
                client, shard("stats"), shard("flow"), shard("ages"), depth
            )
        for name, value in got.items():
            counters[name] = counters.get(name, 0) + value
        for kind, amount in ring_sums(flow, at).items():
            sums[kind] = sums.get(kind, 0.0) + amount
        oldest += [first] if first is not None else []
        histories.append(ring_history(flow, at))
        now = max(now, at)

    def total(names: tuple[str, ...]) -> int:
        return sum(counters.get(name, 0) for name in names)

    return compute(
        depth=counters.get(depth, 0),
        in_flight=counters.get("in_flight", 0),
        dead=counters.get("dead", 0),
        delayed=counters.get("delayed", 0),
        offered=total(offered),
        processed=counters.get("processed", 0),
        shed=total(shed),
        sums=sums,
        oldest_ms=min(oldest) if oldest else None,
        now_ms=now,
        counters=counters,
        history=histories[0] if len(histories) == 1 else _sum_histories(histories),
        warnings=server_warnings(client),
    )


def _sum_histories(histories: list[History]) -> History:
    def add(name: str) -> list[float]:
        series = [getattr(h, name) for h in histories]
        return [sum(values) for values in zip(*series, strict=True)]

    depths = [
        None if all(v is None for v in values) else sum(v or 0 for v in values)
        for values in zip(*(h.minutes_depth for h in histories), strict=True)
    ]
    return dataclasses.replace(
        histories[0],
        seconds_in=add("seconds_in"),
        seconds_out=add("seconds_out"),
        minutes_in=add("minutes_in"),
        minutes_out=add("minutes_out"),
        minutes_depth=depths,
    )
