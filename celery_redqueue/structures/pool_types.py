"""What a CappedPool hands back (results, batches, counters) and its option checks (shared
with PoolTask). Re-exported by `pool`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..validation import one_of, positive_int
from .receipts import QueueCounters

POLICIES = ("sample", "newest", "reject")
DELIVERIES = ("at_most_once", "at_least_once")


@dataclass(frozen=True)
class PoolItem:
    """One popped entry: the payload and how many calls it stands for (1 unless coalescing)."""

    payload: Any
    count: int = 1
    #: Times this entry has been handed out, this time included (at-least-once redelivery).
    receives: int = 1
    #: The entry's id (what the processed-guard records).
    id: str = ""


@dataclass
class PoolBatch:
    """Entries popped in one atomic step; acknowledge them with ``pool.ack(batch)``."""

    id: str
    items: list[PoolItem]
    #: Calls still waiting in the pool right after this pop.
    remaining: int = 0
    #: The pool is deep enough that one more drain job should be sent to share the work.
    fan_out: bool = False
    #: Entries whose payload could not be decoded: (id, count, raw); ack dead-letters them.
    undecodable: list[tuple[str, int, bytes]] = field(default_factory=list)
    #: Why each undecodable entry could not be decoded, by id.
    errors: dict[str, str] = field(default_factory=dict)
    #: Only delayed calls remain: the first is due in this many seconds (else None).
    wait: float | None = None
    #: With ``wait``: no drain job is scheduled for then yet; the caller should send one with
    #: that countdown (the pop released the drain flag, so calls due now send their own).
    schedule: bool = False
    #: Entries that could not be parsed, dead-lettered by this pop (counted in ``dead``).
    malformed: int = 0
    #: Empty, and the drain flag was kept because the pop asked to linger.
    lingering: bool = False
    #: Empty only because the processed-guard skipped what was popped; more waits.
    pop_again: bool = False
    #: Set by ``pool.ack``: retried calls wait and no drain job holds the pool; send one.
    drain_needed: bool = False

    @property
    def calls(self) -> int:
        return sum(item.count for item in self.items) + sum(c for _, c, _ in self.undecodable)

    def __len__(self) -> int:
        return len(self.items) + len(self.undecodable)

    def __bool__(self) -> bool:
        return len(self) > 0


#: PoolStats fields read straight from the stats hash under the same name.
COUNTERS = (
    "offered",
    "accepted",
    "rejected",
    "evicted",
    "processed",
    "failed",
    "in_flight",
    "lost",
    "dead",
    "purged",
    "delayed",
    "duplicates",
    "retried",
    "redelivered",
    "guard_skipped",
    "late",
)


@dataclass(frozen=True, kw_only=True)
class PoolStats(QueueCounters):
    """A consistent snapshot of one pool's counters (read in one MULTI/EXEC); the counters
    every queue kind keeps are `QueueCounters`'."""

    offered: int
    accepted: int
    rejected: int
    evicted: int
    failed: int
    entries: int
    lost: int
    capacity: int
    drains_pending: int


def validate_pool_options(
    *, capacity: Any, policy: Any, max_drains: Any = 1, names: Mapping[str, str] | None = None
) -> None:
    """Shared by CappedPool and PoolTask; ``names`` maps each parameter to the caller's name
    for it (PoolTask says ``pool_size`` where CappedPool says ``capacity``)."""
    name = (names or {}).get
    positive_int(name("capacity", "capacity"), capacity)
    one_of(name("policy", "policy"), policy, POLICIES)
    positive_int(name("max_drains", "max_drains"), max_drains)
