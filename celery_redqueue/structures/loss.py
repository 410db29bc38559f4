"""Loss made visible: detect a Redis that restarted and lost its data (the settings that can
lose data are warned about by `server_warnings()`). After a restart without persistence every
counter starts again at 0, so the accounting identities still "hold" while queued calls are gone.

* `check_for_loss()`: compares each registered structure's totals with the snapshot last
  seen (kept in process memory and in ``<prefix>:health``); when Redis's run id changed and a
  structure's counters went backwards or vanished, returns a `Loss` per structure that
  says what was last seen, and when. The Celery glue calls it at worker start and from the
  reaper, and logs what it finds.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from ..errors import RedQueueError
from ..redis.client import redis_errors
from ..redis.keys import normalize_prefix
from .catalog import open_entry, registry_entries

if TYPE_CHECKING:
    from ..redis.client import Client

logger = logging.getLogger(__name__)

#: Totals kept per structure; ``offered`` and ``processed`` only ever grow while Redis keeps
#: its data, the others say how much was held.
TOTALS = ("offered", "processed", "shed", "depth", "in_flight", "delayed", "dead")
#: Also kept: calls offered in the minute before the reading (the inflow it saw).
INFLOW = "offered_last_minute"

_lock = threading.Lock()
_snapshots: dict[tuple[str, str], Snapshot] = {}


@dataclass(frozen=True)
class Snapshot:
    """Totals of every registered structure of one prefix, as last seen."""

    #: Redis's run id (changes at every restart); None where INFO is refused.
    run_id: str | None
    #: Unix time of the reading.
    seen_at: float
    #: ``"kind:name"`` -> counter -> value.
    totals: dict[str, dict[str, int]]

    def to_json(self) -> str:
        return json.dumps(
            {"run_id": self.run_id, "seen_at": self.seen_at, "totals": self.totals},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> Snapshot | None:
        try:
            data = json.loads(raw)
            return cls(data["run_id"], float(data["seen_at"]), dict(data["totals"]))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Loss:
    """A structure whose data Redis lost: what was last seen, and what is there now."""

    structure: str
    #: Unix time at which ``before`` was read.
    seen_at: float
    before: dict[str, int]
    #: None when the structure is gone altogether.
    after: dict[str, int] | None
    old_run_id: str | None
    new_run_id: str | None
    #: Unix time at which the new run started (None where INFO is refused).
    restarted_at: float | None = None

    @property
    def held(self) -> int:
        """Calls it held when last seen (waiting, in flight, delayed, dead). Not a bound of
        what was lost: calls stored after that reading died with the old run, and nobody
        outside Redis counted them; calls finished after it were not lost."""
        return sum(self.before.get(k, 0) for k in ("depth", "in_flight", "delayed", "dead"))

    @property
    def unseen_seconds(self) -> float | None:
        """Seconds between the last reading and the restart: the calls stored in them are
        not known to anyone."""
        if self.restarted_at is None:
            return None
        return max(self.restarted_at - self.seen_at, 0.0)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.seen_at))
        last = ", ".join(f"{k}={v}" for k, v in sorted(self.before.items()))
        now = (
            "it is gone"
            if self.after is None
            else "now " + ", ".join(f"{k}={v}" for k, v in sorted(self.after.items()))
        )
        gap = self.unseen_seconds
        after_seen = (
            "calls stored after that reading are not known"
            if gap is None
            else f"calls stored in the {gap:.0f} s between that reading and the restart are not "
            f"known (it had seen {self.before.get(INFLOW, 0)} offered in a minute)"
        )
        return (
            f"{self.structure}: Redis restarted (run id {self.old_run_id} -> {self.new_run_id}) "
            f"and lost its data: {self.held} calls held when last seen, at {when}, were lost "
            f"unless they finished before the restart, and {after_seen}; last seen with {last}; "
            f"{now}"
        )


def current_totals(client: Client, prefix: str) -> tuple[dict[str, dict[str, int]], set[str]]:
    """Totals of every registered structure that has figures, and the names of those that
    could not be read (left out of the comparison: unreadable is not lost)."""
    totals: dict[str, dict[str, int]] = {}
    unreadable: set[str] = set()
    for entry in registry_entries(client, prefix):
        name = f"{entry.kind}:{entry.name}"
        try:
            structure = open_entry(client, prefix, entry)
            if structure is None or not hasattr(structure, "figures"):
                continue
            figures = structure.figures()
        except RedQueueError as exc:
            logger.debug("redqueue: no figures for %s: %s", name, exc)
            unreadable.add(name)
            continue
        totals[name] = {k: int(getattr(figures, k)) for k in TOTALS}
        totals[name][INFLOW] = round(figures.rate_in * 60)
    return totals, unreadable


def _run(client: Client) -> tuple[str | None, float | None]:
    """Redis's run id and when (Unix time) that run started; None, None where INFO is
    refused."""
    try:
        info = client.info("server")
    except redis.exceptions.ResponseError:
        return None, None
    if not isinstance(info, dict) or not info.get("run_id"):
        return None, None
    uptime = info.get("uptime_in_seconds")
    started = time.time() - float(uptime) if isinstance(uptime, int | float) else None
    return str(info["run_id"]), started


def health_key(prefix: str) -> str:
    """Where the last snapshot of a prefix is kept in Redis."""
    return f"{normalize_prefix(prefix)}:health"


def check_for_loss(client: Client, prefix: str) -> list[Loss]:
    """Compare every structure's totals with the last snapshot, record the new one, and
    return the structures Redis lost data of (its run id changed and their counters went
    backwards or vanished).

    The snapshot is kept in this process and in ``<prefix>:health``: a restart without
    persistence loses the latter, so the process that saw the figures before is the one that
    can tell (a worker running the reaper, a long-lived CLI). Raises RedisUnavailableError
    when Redis cannot be read.
    """
    prefix = normalize_prefix(prefix)
    memory_key = (repr(client), prefix)  # redis-py's repr names host, port and db
    with redis_errors("checking for data loss"):
        run_id, started = _run(client)
        stored_raw = client.get(health_key(prefix))
    totals, unreadable = current_totals(client, prefix)
    stored = Snapshot.from_json(stored_raw) if stored_raw else None
    remembered = _snapshots.get(memory_key)
    # A snapshot of another run is compared first, even when a newer one of this run exists:
    # a process that never saw the old run may have written the new run's snapshot already,
    # and this process's memory of the old run is then the only witness of the loss.
    candidates = [s for s in (stored, remembered) if s is not None]
    older_runs = [s for s in candidates if s.run_id is not None and s.run_id != run_id]
    previous = max(older_runs or candidates, key=lambda s: s.seen_at) if candidates else None
    current = Snapshot(run_id, time.time(), totals)
    with _lock:
        _snapshots[memory_key] = current
    try:
        with redis_errors("recording the health snapshot"):
            client.set(health_key(prefix), current.to_json())
    except RedQueueError as exc:
        # A full Redis refuses the write; the process keeps the snapshot meanwhile.
        logger.debug("redqueue: health snapshot not stored: %s", exc)
    if previous is None or previous.run_id == run_id or previous.run_id is None:
        return []
    losses = []
    for name, before in sorted(previous.totals.items()):
        if name in unreadable:
            continue
        after = totals.get(name)
        went_back = after is None or any(
            after.get(k, 0) < before.get(k, 0) for k in ("offered", "processed")
        )
        if went_back and (after is not None or any(before.values())):
            losses.append(
                Loss(name, previous.seen_at, before, after, previous.run_id, run_id, started)
            )
    return losses
