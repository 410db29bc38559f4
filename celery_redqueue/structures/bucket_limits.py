"""A bucket's limits for metered APIs, beside each key's call rate: a cost budget per key (units
per period), a total rate over all keys, a concurrency limit per key, pauses (an upstream's
429, or by hand), and the noisy-neighbour figures. [`LeakyBucket`][celery_redqueue.LeakyBucket]
mixes this in; the scripts' side is ``lua/bucket_limits_at.lua`` and its includes. See
docs/metered-apis.md.

Costs follow a GCRA schedule per key on the server clock, like the call rate: a call goes once
``now >= tat - burst * interval`` (``interval``: ms per unit), then ``tat = max(tat, now) + cost *
interval``. Releases are paced, and in every sliding window of the period a key's releases hold
at most the budget plus the burst plus one call's cost (the window's last). The body may report
the actual cost; an excess moves the schedule on at its commit, a refund moves it back only while
the call is its key's latest release (after a later one, the windows it opened hold their budget
already).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, InvalidArgumentError
from ..redis.client import redis_errors, server_time
from ..redis.keys import StructureKeys
from ..redis.lua import read_atomic
from ..validation import seconds
from . import sharding
from .bucket_types import KeyStats, _check_burst, _check_key, parse_rate, spaced_interval

_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)")


def rate_budget(rate: str | float, option: str = "rate") -> tuple[float, float]:
    """``(interval ms per unit, units per period)`` of a rate: ``"90000/m"`` is 90,000 units a
    minute, so one call may cost at most 90,000 (plus the burst)."""
    try:
        interval = parse_rate(rate)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{option}: {exc}") from None
    if isinstance(rate, str):
        match = _COUNT.match(rate)
        assert match is not None  # parse_rate accepted it
        return interval, float(match.group(1))
    return interval, float(rate)


@dataclass(frozen=True)
class Limits:
    """The limits a bucket passes to its scripts (ARGV[3], ``lua/bucket_keys.lua``)."""

    #: Most calls of one key in flight at once (0: no limit; 1: an ordered bucket).
    concurrency: int = 0
    #: Milliseconds per unit of cost (0: calls have no cost), burst in units, largest cost.
    cost_interval_ms: float = 0.0
    cost_burst: float = 0.0
    cost_max: float = 0.0
    #: Milliseconds between releases over all keys (0: no total rate), and its burst.
    total_interval_ms: float = 0.0
    total_burst: float = 0.0
    #: Seconds added to every rate's period (bucket_margin): the jitter between release and
    #: arrival at the upstream that the schedules absorb. The intervals above include it.
    margin: float = 0.0

    @classmethod
    def build(
        cls,
        *,
        ordered: bool,
        concurrency: int | None,
        cost_rate: str | float | None,
        cost_burst: float,
        total_rate: str | float | None,
        total_burst: float,
        margin: float = 0.0,
        names: Callable[[str, str], str] = lambda name, default: default,
    ) -> Limits:
        """Check the options (``names`` gives the caller's name of each) and build them."""
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigurationError(
                f"{names('concurrency', 'concurrency')} must be an integer >= 1 or None, "
                f"got {concurrency!r}"
            )
        if ordered and concurrency not in (None, 1):
            raise ConfigurationError(
                f"{names('ordered', 'ordered')} is {names('concurrency', 'concurrency')}=1 with "
                f"order; it cannot be combined with {concurrency}"
            )
        _check_burst(cost_burst, names("cost_burst", "cost_burst"))
        _check_burst(total_burst, names("total_burst", "total_burst"))
        margin = seconds(names("margin", "margin"), margin)
        cost_interval = cost_max = total_interval = 0.0
        if cost_rate is not None:
            cost_interval, per_period = rate_budget(cost_rate, names("cost_rate", "cost_rate"))
            cost_max = per_period + float(cost_burst)
            cost_interval = spaced_interval(cost_rate, margin)
        if total_rate is not None:
            rate_budget(total_rate, names("total_rate", "total_rate"))
            total_interval = spaced_interval(total_rate, margin)
        return cls(
            concurrency=1 if ordered else concurrency or 0,
            cost_interval_ms=cost_interval,
            cost_burst=float(cost_burst),
            cost_max=cost_max,
            total_interval_ms=total_interval,
            total_burst=float(total_burst),
            margin=margin,
        )

    def spec(self) -> str:
        """ARGV[3]: the concurrency alone when nothing else is set (what an ordered flag was)."""
        if not (self.cost_interval_ms or self.total_interval_ms):
            return str(self.concurrency)
        parts = (
            self.cost_interval_ms,
            self.cost_burst,
            self.cost_max,
            self.total_interval_ms,
            self.total_burst,
        )
        return " ".join([str(self.concurrency), *(repr(float(p)) for p in parts)])

    def share(self, shards: int) -> Limits:
        """One shard's limits when a bucket is spread over ``shards``: the total rate and its
        burst are split evenly (each shard meters its part alone, with no extra round trip)."""
        if not self.total_interval_ms or shards <= 1:
            return self
        return Limits(
            self.concurrency,
            self.cost_interval_ms,
            self.cost_burst,
            self.cost_max,
            self.total_interval_ms * shards,
            self.total_burst / shards,
            self.margin,
        )

    def check_cost(self, cost: Any, where: str = "bucket", *, reported: bool = False) -> float:
        """A call's cost, checked: a number >= 0 that one period's budget can cover (a reported
        cost is what happened: any number >= 0)."""
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not cost >= 0:
            raise InvalidArgumentError(f"{where}: a cost must be a number >= 0, got {cost!r}")
        if not math.isfinite(cost):
            raise InvalidArgumentError(f"{where}: a cost must be finite, got {cost!r}")
        if self.cost_max and cost > self.cost_max and not reported:
            raise InvalidArgumentError(
                f"{where}: a call costing {cost:g} can never be released: the cost rate allows "
                f"{self.cost_max:g} units in one period (burst included)"
            )
        return float(cost)


#: The bucket's release counters the scripts keep (bucket_reserve.lua counts them,
#: bucket_upkeep.lua rolls the minute): this minute's releases are the receives since
#: ``releases_base``.
_MINUTE_FIELDS = ("releases_minute", "receives", "releases_base", "releases_prev")


def _last_minute(
    now: float,
    current: list[tuple[str, float]],
    previous: list[tuple[str, float]],
    totals: list[Any],
) -> dict[str, tuple[float, float]]:
    """Releases over about the last minute per key, and their share of the bucket's: this
    minute's count plus the previous minute's weighted by the part of it still inside the last
    60 s. The scripts roll the counters only on a release, so the stored "current" minute may be
    the previous one (or older: then nothing counts)."""
    minute, receives, base, total_prev = (float(t or 0) for t in totals)
    total_now = receives - base
    this_minute = now // 60
    if totals[0] is None or minute < this_minute - 1:
        return {}
    if minute < this_minute:  # nothing released yet this minute
        current, previous, total_now, total_prev = [], current, 0.0, total_now
    weight = 1.0 - (now % 60.0) / 60.0
    counts: dict[str, float] = {}
    for name, n in current:
        counts[name] = counts.get(name, 0.0) + n
    for name, n in previous:
        counts[name] = counts.get(name, 0.0) + n * weight
    total = total_now + total_prev * weight
    return {k: (round(n, 3), round(n / total, 4) if total else 0.0) for k, n in counts.items()}


@dataclass(frozen=True)
class KeyLoad:
    """One row of the noisy-neighbour figures: a key, its releases over about the last minute
    and their share of the bucket's, and the age of its oldest waiting call."""

    key: str
    releases: float
    share: float
    oldest_age: float | None = None


class BucketLimits:
    """The metered-API operations of a bucket (mixed into LeakyBucket, which provides
    ``client``, ``keys``, ``limits`` and ``_run``)."""

    client: Any
    keys: StructureKeys
    limits: Limits
    default_interval_ms: float
    default_burst: float
    #: Called when an action here (resume) needs a drain job; the task glue sets it.
    drain_sender: Callable[[], object] | None = None

    def _run(self, name: str, args: list[Any], keys: Any = None) -> Any:
        raise NotImplementedError

    @sharding.on_key
    def set_cost_rate(self, key: str, rate: str | float, burst: float | None = None) -> None:
        """Give a key a cost budget of its own (``"40000/m"``), seen by every process; the
        bucket needs a ``cost_rate`` of its own for costs to be metered at all."""
        if not self.limits.cost_interval_ms:
            raise ConfigurationError("set_cost_rate needs a bucket with a cost_rate")
        _, per_period = rate_budget(rate)
        interval = spaced_interval(rate, self.limits.margin)
        burst = self.limits.cost_burst if burst is None else burst
        _check_burst(burst)
        spec = f"{interval!r} {float(burst)!r} {per_period + float(burst)!r}"
        with redis_errors("setting a cost rate"):
            self.client.hset(self.keys("rates"), f"{_check_key(key)}\0cost", spec)

    @sharding.on_key
    def set_weight(self, key: str, weight: float | None) -> None:
        """Give ``key`` a share of releases under contention (a total rate, or fewer drain jobs
        than busy keys) in proportion to ``weight``: a number >= 1, where every other key has 1
        (None: 1 again). Deficit round robin: the key releases ``weight`` calls a turn where a
        key of weight 1 releases one, each still within its own limits; a fraction carries over
        to its next turn. Takes effect at its next release, for every process."""
        if weight is not None and (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not 1 <= weight < math.inf
        ):
            raise ConfigurationError(f"a weight is a finite number >= 1 (or None), got {weight!r}")
        key = _check_key(key)
        with redis_errors("setting a weight"):
            if weight is None:
                self.client.hdel(self.keys("rates"), f"{key}\0weight")
            else:
                self.client.hset(self.keys("rates"), f"{key}\0weight", repr(float(weight)))

    @sharding.on_key
    def set_concurrency(self, key: str, limit: int | None) -> bool:
        """Set how many calls of ``key`` may be in flight at once across all workers, at runtime
        (None: the bucket's own ``concurrency`` again), as BullMQ Pro's setGroupConcurrency.
        Raised, the key's waiting calls may go at once (a drain job is sent through
        `drain_sender`); lowered, calls in flight finish and the key releases none until it is
        under the limit. Returns whether the limit changed."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ConfigurationError(f"a concurrency is an integer >= 1 (or None), got {limit!r}")
        if self.limits.concurrency == 1 and getattr(self, "ordered", False):
            raise ConfigurationError(
                "set_concurrency on an ordered bucket: its keys release one call at a time to "
                "keep their order"
            )
        drains = getattr(self, "max_drains", 1)
        if limit is not None and limit > drains:
            raise ConfigurationError(
                f"set_concurrency({key!r}, {limit}): the bucket runs at most {drains} drain "
                f"jobs at once (bucket_drain_concurrency), each one body at a time, so the key "
                f"could never have {limit} in flight; raise bucket_drain_concurrency first"
            )
        args = [_check_key(key), "" if limit is None else str(limit)]
        changed, send = self._run("bucket_set_concurrency", args)
        if send and self.drain_sender is not None:
            self.drain_sender()
        return bool(changed)

    @sharding.on_key
    def pause(self, key: str, seconds: float | None = None) -> bool:
        """Release nothing of ``key`` for ``seconds`` (None: until `resume()`), in every
        process; the key keeps accepting calls. A pause never shortens a longer one. Returns
        whether the pause changed."""
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0
        ):
            raise ConfigurationError(f"a pause lasts > 0 seconds (or None), got {seconds!r}")
        ms = "" if seconds is None else repr(float(seconds) * 1000.0)
        changed, _ = self._run("bucket_pause", ["pause", _check_key(key), ms])
        return bool(changed)

    @sharding.on_key
    def resume(self, key: str) -> bool:
        """End a key's pause (by hand or a backoff); False when it was not paused. Sends a drain
        job through `drain_sender` when the key has work and none is running."""
        changed, send = self._run("bucket_pause", ["resume", _check_key(key), ""])
        if send and self.drain_sender is not None:
            self.drain_sender()
        return bool(changed)

    @sharding.ranked(lambda row: (row[1], row[0]))
    def paused(self, limit: int = 100) -> list[tuple[str, float]]:
        """Keys paused now and until when (server seconds; ``inf``: until resumed), soonest
        first, at most ``limit``."""
        now = self._server_now()
        with redis_errors(f"reading pauses of {self.keys.base}"):
            rows = self.client.zrangebyscore(
                self.keys("paused"), now * 1000.0, "+inf", start=0, num=limit, withscores=True
            )
        return [(name.decode(), float(score) / 1000.0) for name, score in rows]

    @sharding.on_every(sum)
    def paused_count(self) -> int:
        """How many keys are paused now (one number for metrics, whatever the keys)."""
        now = self._server_now()
        with redis_errors(f"reading pauses of {self.keys.base}"):
            return int(self.client.zcount(self.keys("paused"), now * 1000.0, "+inf"))

    @sharding.ranked(lambda row: (-row.releases, row.key))  # a share is of its shard's releases
    def busiest(self, top: int = 10) -> list[KeyLoad]:
        """The keys with the most releases over about the last minute (this minute's count and
        the previous minute's, weighted by how much of it is still inside the last 60 s)."""
        now = self._server_now()
        with redis_errors(f"reading releases of {self.keys.base}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zrevrange(self.keys("releases"), 0, top - 1, withscores=True)
            pipe.zrevrange(self.keys("releases_prev"), 0, top - 1, withscores=True)
            pipe.hmget(self.keys("stats"), _MINUTE_FIELDS)
            current, previous, totals = pipe.execute()
        loads = _last_minute(
            now,
            [(n.decode(), float(v)) for n, v in current],
            [(n.decode(), float(v)) for n, v in previous],
            totals,
        )
        rows = sorted(loads.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
        return [KeyLoad(k, n, share) for k, (n, share) in rows]

    @sharding.on_key
    def key_stats(self, key: str) -> KeyStats:
        """One key's figures in one read-only script (consistent, and works at maxmemory): its
        queue, rate and in-flight calls, its pause and backoffs, its cost budget, its oldest
        waiting call and its share of the last minute's releases."""
        _check_key(key)
        now = self._server_now()
        fields = [f"{key}\0{c}" for c in ("in_flight", "processed", "dead", "backoffs")]
        with redis_errors(f"reading stats of {self.keys.base}"):
            head, tail, counters, ready, rates, paused, age, cur, prev, totals = read_atomic(
                self.client,
                [
                    ("HGET", self.keys("heads"), (key,)),
                    ("HGET", self.keys("tails"), (key,)),
                    ("HMGET", self.keys("keystats"), fields),
                    ("ZSCORE", self.keys("ready"), (key,)),
                    ("HMGET", self.keys("rates"), (key, f"{key}\0cost")),
                    ("ZSCORE", self.keys("paused"), (key,)),
                    ("ZSCORE", self.keys("ages"), (key,)),
                    ("ZSCORE", self.keys("releases"), (key,)),
                    ("ZSCORE", self.keys("releases_prev"), (key,)),
                    ("HMGET", self.keys("stats"), _MINUTE_FIELDS),
                ],
            )
        in_flight, processed, dead, backoffs = (int(c or 0) for c in counters)
        rate, cost_rate = rates
        if rate:
            interval_ms, burst = (float(x) for x in rate.split())
        else:
            interval_ms, burst = self.default_interval_ms, self.default_burst
        cost_interval, cost_burst = self.limits.cost_interval_ms, self.limits.cost_burst
        if cost_rate and cost_interval:
            cost_interval, cost_burst = (float(x) for x in cost_rate.split()[:2])
        till = None if paused is None else float(paused) / 1000.0
        releases, share = _last_minute(
            now, [(key, float(cur or 0))], [(key, float(prev or 0))], totals
        ).get(key, (0.0, 0.0))
        depth = int(tail or 0) - int(head or 0)
        return KeyStats(
            key=key,
            depth=depth,
            in_flight=in_flight,
            processed=processed,
            dead=dead,
            next_eligible=None if ready is None else float(ready) / 1000.0,
            interval=interval_ms / 1000.0,
            burst=burst,
            paused_until=till if till is not None and till > now else None,
            backoffs=backoffs,
            oldest_age=round(now - float(age) / 1000.0, 3) if age and depth > 0 else None,
            releases_last_minute=releases,
            release_share=share,
            cost_interval=cost_interval or None,
            cost_burst=cost_burst,
        )

    @sharding.ranked(lambda row: (-(row.oldest_age or 0), row.key))
    def longest_waiting(self, top: int = 10) -> list[KeyLoad]:
        """The keys whose oldest waiting call has waited longest (the ages index: bounded)."""
        now = self._server_now()
        with redis_errors(f"reading ages of {self.keys.base}"):
            rows = self.client.zrange(self.keys("ages"), 0, top - 1, withscores=True)
        return [KeyLoad(n.decode(), 0.0, 0.0, round(now - s / 1000.0, 3)) for n, s in rows]

    def _server_now(self) -> float:
        """The Redis server's clock (seconds): every figure is measured against it."""
        with redis_errors("reading the server clock"):
            return server_time(self.client)
