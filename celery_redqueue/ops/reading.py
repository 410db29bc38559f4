"""What every operator tool (CLI, ``top``, metrics, dashboard) reads and does, in one place.

Structures are found through the registry, so only the app's settings are needed, not the
modules that define the tasks. Reading costs a bounded number of round trips per structure
(the registry, then one figures script each), never a scan of the items: per-key and
per-resource views read a bounded window. A failure in one structure is reported on that
structure and never stops the others.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict, cast

import redis
from celery import Celery
from redis.cluster import RedisCluster

from ..errors import ConfigurationError, RedQueueError
from ..redis.client import redis_errors, server_time
from ..redis.serializers import Serializer, get_serializer
from ..redis.server import server_warnings
from ..structures.base import Structure
from ..structures.bucket import LeakyBucket
from ..structures.catalog import open_structure, registered
from ..structures.deadletters import DeadLetter, parse_dead_letter
from ..structures.figures import Figures, History
from ..structures.leases import LeasedResources
from ..structures.pool import CappedPool
from ..structures.receipts import Record
from ..structures.streams import EventStream, GroupFigures
from ..structures.unique import UniqueLocks
from ..tasks.config import get_config
from ..tasks.stream_app import stream_tasks
from ..tasks.wire import DRAIN_HEADER
from . import bucket_views

if TYPE_CHECKING:
    from ..privates import AnyTask
    from ..tasks.stream import StreamTask

#: Most resources of one LeasedResources listed (the least recently freed and soonest to expire).
RESOURCE_WINDOW = 200
#: Seconds the registry listing is reused before it is read again.
REGISTRY_TTL = 5.0
#: Most groups of one stream shown (and exported as metrics), the most behind first.
GROUP_WINDOW = 50

#: The stats counters that identify why work was shed, by kind (Prometheus ``reason`` label).
SHED_REASONS = {
    "pool": CappedPool.figure_names[2],  # the counters its figures count as shed
    "bucket": LeakyBucket.figure_names[2],
    "stream": ("trimmed",),
}

#: The kinds that hold work: they have dead letters and are drained by tasks.
WORK_KINDS = ("pool", "bucket", "stream")
#: Every kind an operator can name (``kind:name``).
KINDS = (*WORK_KINDS, "lease", "unique")
#: Most held keys of one unique-lock table listed (the soonest to run out first).
UNIQUE_WINDOW = 100
#: The figures in seconds a view rounds to the millisecond.
ROUNDED = ("oldest_age", "drain_eta", "seconds_per_item", "workers_needed")


#: What a registered structure opens as: a pool, bucket or stream (a `Structure`), a
#: LeasedResources or a UniqueLocks.
Opened = Structure | LeasedResources | UniqueLocks


@dataclass(frozen=True)
class Target:
    """One registered structure, opened."""

    #: ``kind:name``, the id the CLI and the dashboard use.
    id: str
    kind: str
    name: str
    #: A CappedPool, LeakyBucket, EventStream, LeasedResources or UniqueLocks by ``kind``.
    #: Left untyped: callers choose its methods by ``kind``, which mypy cannot follow (the
    #: union of the five classes would need an isinstance check at each use).
    structure: Any
    #: Why the structure could not be opened from its recorded settings (then it is None).
    problem: str | None = None


def json_default(value: object) -> object:
    """``json.dumps``'s ``default`` for views: the structures' figure records (`Figures`,
    `History`, `GroupFigures`) as their ``as_dict()``, anything else as its ``str``."""
    if isinstance(value, Figures | Record):
        return value.as_dict()
    return str(value)


def payload_text(payload: object) -> str:
    """A dead letter's payload as text for display (JSON where it can be, else repr)."""
    if isinstance(payload, bytes):
        return repr(payload)
    try:
        return json.dumps(payload, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(payload)


class LetterView(TypedDict):
    """One dead letter as the dashboard shows it (`letter_view`)."""

    payload: str
    receives: int
    error: str
    at: float
    count: int
    key: str | None
    #: The stored entry, base64: what `requeue` and `purge` take back.
    ref: str


class DeadPage(TypedDict):
    total: int
    start: int
    letters: list[LetterView]


class HeldView(TypedDict):
    """One held key of a unique-lock table (`Operations.unique_keys`)."""

    key: str
    task_id: str
    who: str
    phase: str
    since: float
    until: float
    expires_in: float
    state: str
    fence: int


class DebouncedView(TypedDict):
    """One dedupe id holding a debounced call (`Operations.debounced_keys`)."""

    key: str
    since: float | None
    due: float
    due_in: float
    calls: int


class ResourceView(TypedDict, total=False):
    """One resource of a LeasedResources (`Operations.resources`): a held one has the
    ``expires_*`` fields, a free one ``free_since``."""

    resource: str
    state: str
    expires_at: float
    expires_in: float
    free_since: float | None
    acquisitions: int


class _ViewBase(TypedDict):
    id: str
    kind: str
    name: str


class View(_ViewBase, total=False):
    """One structure's view (`Operations.view`): ``error`` when it could not be read, else
    ``leases`` (a LeasedResources), ``unique`` and ``held`` (a unique-lock table) or the
    figures (a pool, bucket or stream; a stream's groups too). The dashboard's detail adds the
    rest. The figures, history and groups are the structures' own records: `json_default`
    turns them into JSON, so a field added to a record shows up with no list here to edit."""

    error: str | None
    leases: dict[str, int]
    unique: dict[str, int]
    held: list[HeldView]
    groups: list[GroupFigures]
    figures: Figures
    counters: dict[str, int]
    history: History | None
    settings: dict[str, object]
    # The dashboard's detail (`Dashboard._detail`):
    resources: list[ResourceView]
    dead_letters: DeadPage
    can_drain: bool
    debounced: list[DebouncedView]
    keys: list[bucket_views.KeyRow]
    noisy: Noisy


class Overview(TypedDict):
    prefix: str
    time: float
    structures: list[View]
    warnings: list[str]


class Noisy(bucket_views.PausedView):
    """A bucket's noisy-neighbour figures (`Operations.noisy`): `KeyLoad` rows by name."""

    busiest: list[dict[str, object]]
    longest_waiting: list[dict[str, object]]


def letter_view(letter: DeadLetter) -> LetterView:
    return {
        "payload": payload_text(letter.payload),
        "receives": letter.receives,
        "error": letter.error,
        "at": letter.at,
        "count": letter.count,
        "key": letter.key,
        "ref": base64.b64encode(letter.raw).decode(),
    }


class Operations:
    """Figures, listings and actions over every structure of one prefix.

    Args:
        client: a Redis client for the structures' server.
        prefix: the key prefix (``redqueue_key_prefix``).
        serializer: how payloads are stored (for dead letters).
        celery_app: the app, when drain jobs may be sent ("drain now", after a requeue).
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        prefix: str,
        serializer: str | Serializer | None = None,
        celery_app: Celery | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.serializer = get_serializer(serializer)
        self.celery_app = celery_app
        self._targets: list[Target] = []
        self._read_at = -REGISTRY_TTL
        self._modules_imported = False

    @classmethod
    def from_app(cls, app: Celery) -> Operations:
        """Operations over the structures of a Celery app's ``redqueue_*`` settings."""
        config = get_config(app)
        return cls(config.client(), config.key_prefix, config.serializer, app)

    # Finding structures

    def targets(self, fresh: bool = False) -> list[Target]:
        """Every registered structure, opened (the listing is reused for a few seconds)."""
        if fresh or time.monotonic() - self._read_at > REGISTRY_TTL:
            found = []
            for kind, name, settings in registered(self.client, self.prefix):
                structure: Opened | None
                if kind == LeasedResources.kind:
                    # It is listed already: reading must not write.
                    structure = LeasedResources(
                        self.client, name, prefix=self.prefix, register=False
                    )
                elif kind == UniqueLocks.kind:
                    structure = UniqueLocks(self.client, name, prefix=self.prefix, register=False)
                else:
                    try:
                        structure = open_structure(self.client, self.prefix, kind, name, settings)
                    except (RedQueueError, TypeError, ValueError) as exc:
                        # Settings this version cannot read: shown with the reason, not hidden.
                        problem = f"cannot open from its recorded settings: {exc}"
                        found.append(Target(f"{kind}:{name}", kind, name, None, problem))
                        continue
                    if structure is None:
                        continue  # a kind this version does not know
                    structure.serializer = self.serializer
                found.append(Target(f"{kind}:{name}", kind, name, structure))
            self._targets, self._read_at = found, time.monotonic()
        return self._targets

    def find(self, name: str, kinds: Sequence[str] = KINDS) -> Target:
        """The structure with this id (``pool:x``) or bare name, or else the one whose name
        ends in ``.name`` (``record`` for ``proj.tasks.record``: task names are long);
        ConfigurationError if none, or if the suffix fits several (naming them)."""
        kind, _, bare = name.partition(":") if name.partition(":")[0] in KINDS else ("", "", name)
        for fresh in (False, True):
            found = [t for t in self.targets(fresh=fresh) if t.kind in kinds]
            if kind:
                found = [t for t in found if t.kind == kind]
            exact = [t for t in found if bare == t.name]
            # A dotted suffix: whole parts of the name, so "cord" never matches "record".
            chosen = exact or [t for t in found if t.name.endswith(f".{bare}")]
            if len(chosen) > 1:
                ids = ", ".join(sorted(t.id for t in chosen))
                raise ConfigurationError(f"{name!r} could name any of {ids}: give the full name")
            if chosen:
                target = chosen[0]
                if target.structure is None:
                    raise ConfigurationError(f"{target.id}: {target.problem}")
                return target
        wanted = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 2 else kinds)
        raise ConfigurationError(f"no {wanted} named {name!r} (see: celery redqueue list)")

    # Reading

    def view(self, target: Target, history: bool = True) -> View:
        """One structure's live figures (one round trip): plain data and the structures'
        records, for ``json.dumps(view, default=json_default)``; with ``history``, the last
        minute and hour too (read in the same call)."""
        base: View = {"id": target.id, "kind": target.kind, "name": target.name}
        if target.structure is None:
            base["error"] = target.problem
            return base
        try:
            if target.kind == LeasedResources.kind:
                base["leases"] = target.structure.stats().as_dict()
                return base
            if target.kind == UniqueLocks.kind:
                base["unique"] = target.structure.stats().as_dict()
                base["held"] = self.unique_keys(target)
                return base
            if target.kind == EventStream.kind:
                groups = self.groups(target)
                base["groups"] = groups
                figures = target.structure.figures(groups)
            else:
                figures = target.structure.figures()
        except (RedQueueError, redis.exceptions.RedisError) as exc:
            # One broken structure (a key of the wrong type, say) must not hide the others.
            base["error"] = f"{type(exc).__name__}: {exc}"
            return base
        seconds = {name: getattr(figures, name) for name in ROUNDED}
        figures = replace(
            figures, **{name: round(v, 3) for name, v in seconds.items() if v is not None}
        )
        base.update(
            {
                "figures": figures,
                "counters": dict(figures.counters),
                "history": figures.history if history else None,
                "settings": target.structure.settings(),
            }
        )
        return base

    def overview(self, history: bool = False) -> Overview:
        """Every structure's view (``history`` adds each one's), and the server's warnings."""
        views = [self.view(target, history) for target in self.targets()]
        try:
            # Read again on every overview: an operator who just fixed a setting sees it go.
            warnings = list(server_warnings(self.client, refresh=True))
        except RedQueueError as exc:
            warnings = [str(exc)]
        return {
            "prefix": self.prefix,
            "time": time.time(),
            "structures": views,
            "warnings": warnings,
        }

    def groups(self, target: Target) -> list[GroupFigures]:
        """A stream's groups' figures (one script each), the most behind first; at most
        `GROUP_WINDOW` of them (groups are declared by code, so normally a few)."""
        stream = target.structure
        if not isinstance(stream, EventStream):
            raise ConfigurationError(f"{target.id} is not a stream: it has no groups")
        found = [stream.group_figures(name) for name in stream.groups()]
        found.sort(key=lambda f: (-f.lag, -f.pending, f.group))
        return found[:GROUP_WINDOW]

    def dead_letters(self, target: Target, start: int = 0, count: int = 50) -> DeadPage:
        """A page of dead letters from the oldest, with the list's length."""
        structure = target.structure
        with redis_errors("reading dead letters"):
            if isinstance(structure, CappedPool | LeakyBucket):  # of every shard, merged
                total, raw = structure.dead_page(start, count)
            else:
                pipe = self.client.pipeline(transaction=False)
                pipe.llen(structure.keys("dead"))
                pipe.lrange(structure.keys("dead"), start, start + count - 1)
                total, raw = pipe.execute()
        return {"total": int(total), "start": start, "letters": [self._letter(e) for e in raw]}

    def _letter(self, raw: bytes) -> LetterView:
        try:
            return letter_view(parse_dead_letter(raw, self.serializer))
        except (ValueError, TypeError, AttributeError):
            # A letter whose metadata cannot be read is still shown (and can be purged).
            letter = DeadLetter(raw, 0, "unreadable dead-letter entry", 0.0, raw=raw)
            return letter_view(letter)

    def keys(self, target: Target, top: int = 20, query: str = "") -> list[bucket_views.KeyRow]:
        """A bucket's busiest keys (deepest among the next `bucket_views.KEY_WINDOW`
        eligible), or the keys whose name contains ``query`` (found by a bounded HSCAN), with
        their pause. A sharded bucket's rows are those of every shard, merged."""
        bucket = self._bucket(target)
        shards = bucket.shards or [bucket]
        rows = [row for shard in shards for row in bucket_views.key_rows(shard, top, query)]
        rows.sort(key=lambda row: (-int(row["depth"]), -int(row["in_flight"]), row["key"]))
        return rows[:top]

    def paused(self, target: Target, top: int = 100) -> bucket_views.PausedView:
        """A bucket's paused keys, soonest to end first (at most ``top``; ``until`` None: until
        resumed), and how many are paused in all."""
        return bucket_views.paused(self._bucket(target), top)

    def overrides(self, target: Target, top: int = 100) -> bucket_views.OverridesView:
        """A bucket's limits, and the keys whose rate or cost budget was set apart from them
        (``set_rate``, ``set_cost_rate``), at most ``top`` (a bounded scan of the overrides)."""
        return bucket_views.overrides(self._bucket(target), top)

    def resources(self, target: Target) -> list[ResourceView]:
        """A LeasedResources' resources: held ones by expiry, then free ones by when freed."""
        resources = target.structure
        if not isinstance(resources, LeasedResources):
            raise ConfigurationError(f"{target.id} is not a LeasedResources")
        with redis_errors(f"reading {resources.keys.base}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zrange(resources.keys("leased"), 0, RESOURCE_WINDOW - 1, withscores=True)
            pipe.zrange(resources.keys("free"), 0, RESOURCE_WINDOW - 1, withscores=True)
            leased, free = pipe.execute()
            now = server_time(self.client)  # apart: a cluster pipeline refuses TIME
            names = [name for name, _ in leased] + [name for name, _ in free]
            uses = self.client.hmget(resources.keys("uses"), names) if names else []
        rows: list[ResourceView] = [
            {
                "resource": name.decode(),
                "state": "held" if score / 1000.0 > now else "expired",
                "expires_at": score / 1000.0,
                "expires_in": round(score / 1000.0 - now, 3),
            }
            for name, score in leased
        ]
        rows += [
            {"resource": name.decode(), "state": "free", "free_since": score / 1000.0 or None}
            for name, score in free
        ]
        for row, count in zip(rows, uses, strict=True):
            row["acquisitions"] = int(count or 0)
        return rows

    def unique_keys(self, target: Target, top: int = UNIQUE_WINDOW) -> list[HeldView]:
        """A unique-lock table's held keys, the soonest to run out first (at most ``top``): who
        holds each (task id, ``host:pid``, queued or running), since when and until when; a
        key whose lease ran out (its holder died) shows ``state`` ``expired`` until the next
        acquire of the key forgets it."""
        locks = target.structure
        if not isinstance(locks, UniqueLocks):
            raise ConfigurationError(f"{target.id} is not a unique-lock table")
        held = locks.held(top)
        now = server_time(self.client)
        return [
            {
                "key": h.key,
                "task_id": h.task_id,
                "who": h.who,
                "phase": h.phase,
                "since": h.since,
                "until": h.until,
                "expires_in": round(h.until - now, 3),
                "state": "held" if h.until > now else "expired",
                "fence": h.fence,
            }
            for h in held
        ]

    def debounced_keys(self, target: Target, top: int = UNIQUE_WINDOW) -> list[DebouncedView]:
        """A debouncing pool's or bucket's dedupe ids holding a call, the soonest due first (at
        most ``top``; read-only, bounded: see `debounce.debounced`): since when (its first
        call), due when, and how many calls it merges so far."""
        structure = target.structure
        if not isinstance(structure, CappedPool | LeakyBucket):
            raise ConfigurationError(f"{target.id} is not a pool or a bucket: it debounces nothing")
        held = structure.debounced(top)
        now = server_time(self.client)
        return [
            {
                "key": h.key,
                "since": h.since,
                "due": h.due,
                "due_in": round(h.due - now, 3),
                "calls": h.calls,
            }
            for h in held
        ]

    # Acting

    def _letters(self, refs: Sequence[str] | None) -> list[DeadLetter] | None:
        if refs is None:
            return None
        try:
            raws = [base64.b64decode(ref, validate=True) for ref in refs]
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"not a dead-letter reference: {exc}") from None
        return [DeadLetter(None, 0, "", 0.0, raw=raw) for raw in raws]

    def requeue(self, target: Target, refs: Sequence[str] | None = None, limit: int = -1) -> str:
        """Requeue the letters named by ``refs`` (from `dead_letters()`), or the oldest
        ``limit`` (-1: all); sends a drain job when the app has the structure's task."""
        count = int(target.structure.requeue_dead(self._letters(refs), limit=limit))
        sent = self.send_drain(target) if count else None
        return f"requeued {count}" + ("" if sent is None else f"; {sent}")

    def purge(self, target: Target, refs: Sequence[str] | None = None, limit: int = -1) -> str:
        """Delete dead letters (counted as purged): the ``refs`` given, or the oldest ``limit``."""
        return f"purged {int(target.structure.purge_dead(self._letters(refs), limit=limit))}"

    def drain_tasks(self, target: Target, groups: Sequence[str] | None = None) -> list[AnyTask]:
        """The app's tasks that drain ``target``: the task of a pool's or bucket's name, a
        stream's task per group (only those of ``groups`` if given); empty without an app."""
        app = self.celery_app
        if app is None or target.kind not in WORK_KINDS:
            return []
        if not self._modules_imported:  # once: the dashboard asks on every refresh
            app.loader.import_default_modules()
            self._modules_imported = True
        if target.kind == EventStream.kind:
            tasks = stream_tasks(app, target.name)
            return [t for t in tasks if groups is None or t.group in groups]
        task = app.tasks.get(target.name)
        return [] if task is None else [task]

    def drain_task(self, target: Target) -> AnyTask | None:
        """The app's (first) task that drains ``target``, or None."""
        return next(iter(self.drain_tasks(target)), None)

    def send_drain(self, target: Target, groups: Sequence[str] | None = None) -> str:
        """Send a drain job now (a stream: one per group, or per group of ``groups``); says
        what happened."""
        tasks = self.drain_tasks(target, groups)
        if not tasks:
            return "no task of this app drains it; beat's drain will pick it up"
        for task in tasks:
            if hasattr(task, "send_drain"):
                task.send_drain()
            else:
                # drain_tasks() finds tasks only with an app.
                cast(Celery, self.celery_app).send_task(
                    task.name, (), {}, headers={DRAIN_HEADER: 1}
                )
        if target.kind == EventStream.kind:
            groups_sent = ", ".join(cast("StreamTask", t).group for t in tasks)
            return f"drain jobs sent ({groups_sent})"
        return "drain job sent"

    def set_rate(self, target: Target, key: str, rate: str, burst: float | None = None) -> str:
        self._bucket(target).set_rate(key, rate, burst)
        return f"rate of {key!r} set to {rate}" + ("" if burst is None else f" (burst {burst:g})")

    def set_concurrency(self, target: Target, key: str, limit: int | None) -> str:
        """Set one key's concurrency limit (None: the bucket's own again)."""
        changed = self._bucket(target).set_concurrency(key, limit)
        what = "the bucket's own" if limit is None else str(limit)
        return f"concurrency of {key!r} set to {what}" + ("" if changed else " (unchanged)")

    def _bucket(self, target: Target) -> LeakyBucket:
        bucket = target.structure
        if not isinstance(bucket, LeakyBucket):
            raise ConfigurationError(f"{target.id} is not a bucket: it has no keys")
        return bucket

    def pause(self, target: Target, key: str, seconds: float | None = None) -> str:
        """Pause one key of a bucket (None: until resumed); it keeps accepting calls."""
        changed = self._bucket(target).pause(key, seconds)
        span = "until resumed" if seconds is None else f"for {seconds:g} s"
        return f"{key!r} paused {span}" + ("" if changed else " (a longer pause was kept)")

    def resume(self, target: Target, key: str) -> str:
        """End a key's pause and send a drain job for its waiting calls."""
        if not self._bucket(target).resume(key):
            return f"{key!r} was not paused"
        return f"{key!r} resumed; {self.send_drain(target)}"

    def noisy(self, target: Target, top: int = 10) -> Noisy:
        """A bucket's noisy-neighbour figures: the busiest keys (share of the last minute's
        releases), the longest-waiting keys (age of their oldest call), the paused keys; each
        a bounded top-N read."""
        bucket = self._bucket(target)
        return {
            "busiest": [row.__dict__ for row in bucket.busiest(top)],
            "longest_waiting": [row.__dict__ for row in bucket.longest_waiting(top)],
            **self.paused(target, top),
        }
