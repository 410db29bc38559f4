"""A bucket's keys as operators see them (`Operations.keys`, `paused`, `overrides`): the
busiest keys with their depth, rate and pause, the paused keys, and the keys whose limits were
set apart from the bucket's. Every read is bounded (a window of the next eligible keys, a
bounded HSCAN), never a scan of all keys."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypedDict

import redis
from redis.cluster import RedisCluster

from ..redis.client import redis_errors, server_time
from ..structures.bucket import LeakyBucket
from ..structures.bucket_types import tier_queues

#: Keys of a bucket looked at to find its busiest ones: the next eligible this many.
KEY_WINDOW = 1000
#: Most calls a keys search makes to HSCAN (each looks at about 1000 keys).
SEARCH_SCANS = 10


class KeyRow(TypedDict):
    """One key of a bucket (`key_rows`)."""

    key: str
    #: Calls waiting, over the key's priority tiers.
    depth: int
    in_flight: int
    #: Calls per second, and the burst: the key's own (``custom_rate``) or the bucket's.
    rate: float
    burst: float
    custom_rate: bool
    next_eligible: float | None
    paused: bool
    #: When the pause ends; None with ``paused``: until resumed.
    paused_until: float | None


class PausedRow(TypedDict):
    key: str
    #: When the pause ends; None: until resumed.
    until: float | None


class PausedView(TypedDict):
    paused: list[PausedRow]
    paused_count: int


class DefaultLimits(TypedDict):
    rate: float
    burst: float
    concurrency: int | None
    cost_rate: float | None
    cost_burst: float | None


class OverridesView(TypedDict):
    defaults: DefaultLimits
    #: Each key's limits set apart from the bucket's, only those set: ``key`` and some of
    #: ``rate``, ``burst``, ``cost_rate``, ``cost_burst``, ``concurrency``, ``weight``.
    overrides: list[dict[str, str | float]]
    #: Keys with an override, all of them (``overrides`` holds at most ``top``).
    count: int


def key_rows(bucket: LeakyBucket, top: int, query: str) -> list[KeyRow]:
    """One plain bucket's (or shard's) deepest keys among the next `KEY_WINDOW` eligible, or
    those whose name contains ``query``: depth, in flight, rate, next eligible, pause."""
    with redis_errors(f"reading keys of {bucket.keys.base}"):
        if query:
            names = _search(bucket, query, top)
            scores = _pipe(bucket.client, [("zscore", bucket.keys("ready"), n) for n in names])
            ready = dict(zip(names, scores, strict=True))
        else:
            window = bucket.client.zrange(bucket.keys("ready"), 0, KEY_WINDOW - 1, withscores=True)
            names = [name.decode() for name, _ in window]
            ready = {name.decode(): score for name, score in window}
            # A key paused until resumed leaves the eligible order: list it all the same.
            held = bucket.client.zrangebyscore(
                bucket.keys("paused"), "+inf", "+inf", start=0, num=top
            )
            names += [n for n in (name.decode() for name in held) if n not in ready]
        if not names:
            return []
        tiered = bool(bucket.limits.priority_bound_ms)
        queues = [q for n in names for q in tier_queues(n, tiered)]
        per_key = len(queues) // len(names)  # a key's queues (its tiers': tier_queues)
        heads, tails, rates, flights, pauses = _pipe(
            bucket.client,
            [
                ("hmget", bucket.keys("heads"), queues),
                ("hmget", bucket.keys("tails"), queues),
                ("hmget", bucket.keys("rates"), names),
                ("hmget", bucket.keys("keystats"), [f"{n}\0in_flight" for n in names]),
                ("zmscore", bucket.keys("paused"), names),
            ],
        )
        # The zset holds when each pause ends, ended ones too: compare with the server's now.
        now = server_time(bucket.client) if any(pauses) else 0.0
    rows: list[KeyRow] = []
    for i, name in enumerate(names):
        if rates[i]:
            interval_ms, burst = (float(x) for x in rates[i].split())
        else:
            interval_ms, burst = bucket.default_interval_ms, bucket.default_burst
        eligible = ready.get(name)
        rows.append(
            {
                "key": name,
                "depth": sum(
                    int(t or 0) - int(h or 0)
                    for h, t in zip(
                        heads[i * per_key : (i + 1) * per_key],
                        tails[i * per_key : (i + 1) * per_key],
                        strict=True,
                    )
                ),
                "in_flight": int(flights[i] or 0),
                "rate": round(1000.0 / interval_ms, 6),
                "burst": burst,
                "custom_rate": bool(rates[i]),
                "next_eligible": None if eligible is None else float(eligible) / 1000.0,
                # paused with paused_until None: until resumed.
                "paused": pauses[i] is not None and float(pauses[i]) / 1000.0 > now,
                "paused_until": _pause_end(pauses[i], now),
            }
        )
    rows.sort(key=lambda row: (-int(row["depth"]), -int(row["in_flight"]), str(row["key"])))
    return rows[:top]


def paused(bucket: LeakyBucket, top: int = 100) -> PausedView:
    """A bucket's paused keys, soonest to end first (at most ``top``; ``until`` None: until
    resumed), and how many are paused in all."""
    rows: list[PausedRow] = [
        {"key": key, "until": None if math.isinf(until) else until}
        for key, until in bucket.paused(top)
    ]
    return {"paused": rows, "paused_count": bucket.paused_count()}


def overrides(bucket: LeakyBucket, top: int = 100) -> OverridesView:
    """A bucket's limits, and the keys whose rate, cost budget or concurrency was set apart from
    them (``set_rate``, ``set_cost_rate``, ``set_concurrency``): at most ``top`` keys, found by a
    bounded HSCAN of the per-key limits (one field per override: it reads overrides, not keys)."""
    keys: dict[str, dict[str, str | float]] = {}
    for shard in bucket.shards or [bucket]:
        with redis_errors(f"reading rates of {shard.keys.base}"):
            cursor = 0
            for _ in range(SEARCH_SCANS):
                cursor, page = shard.client.hscan(shard.keys("rates"), cursor, count=1000)
                for field, spec in page.items():
                    name, _, what = field.decode().partition("\0")
                    row = keys.setdefault(name, {"key": name})
                    if what == "conc":  # set_concurrency: one integer
                        row["concurrency"] = int(spec)
                        continue
                    if what == "weight":  # set_weight: one number
                        row["weight"] = float(spec)
                        continue
                    interval_ms, burst = (float(x) for x in spec.split()[:2])
                    prefix = "cost_" if what == "cost" else ""
                    row[f"{prefix}rate"] = round(1000.0 / interval_ms, 6)
                    row[f"{prefix}burst"] = burst
                if not cursor:
                    break
    limits = bucket.limits
    defaults: DefaultLimits = {
        "rate": round(1000.0 / bucket.default_interval_ms, 6),
        "burst": bucket.default_burst,
        "concurrency": limits.concurrency or None,
        "cost_rate": round(1000.0 / limits.cost_interval_ms, 6)
        if limits.cost_interval_ms
        else None,
        "cost_burst": limits.cost_burst if limits.cost_interval_ms else None,
    }
    rows = [keys[name] for name in sorted(keys)][:top]
    return {"defaults": defaults, "overrides": rows, "count": len(keys)}


def _pipe(
    client: redis.Redis | RedisCluster, calls: Sequence[tuple[str, str, object]]
) -> list[Any]:
    """Each call's reply, in order (one round trip); a reply's type is its command's."""
    pipe = client.pipeline(transaction=False)
    for method, key, arg in calls:
        getattr(pipe, method)(key, arg)
    return list(pipe.execute())


def _search(bucket: LeakyBucket, query: str, limit: int) -> list[str]:
    pattern = "*" + "".join(f"\\{c}" if c in "*?[]\\" else c for c in query) + "*"
    found: list[str] = []
    cursor = 0
    for _ in range(SEARCH_SCANS):
        cursor, page = bucket.client.hscan(bucket.keys("tails"), cursor, match=pattern, count=1000)
        # A key's tier queues and tier mask ("key NUL ...": tier_queues) name the key itself.
        found.extend(name.decode().partition("\0")[0] for name in page)
        if not cursor or len(set(found)) >= limit:
            break
    return sorted(set(found))[:limit]


def _pause_end(score: float | None, now: float) -> float | None:
    """When a key's pause (its score, ms) ends, in epoch seconds; None when the key is not
    paused or is paused until resumed (JSON has no infinity)."""
    if score is None or math.isinf(float(score)) or float(score) / 1000.0 <= now:
        return None
    return float(score) / 1000.0
