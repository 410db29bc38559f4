"""Gathering: whether a drain should pop a pool now or let a batch fill first.

A ``pool_batch`` body that writes to a database wants batches, not single calls: "every 10 s or
every 100 calls". `PoolGathering.gather()` answers, in one atomic read, whether the pool
holds ``min_calls`` or its oldest call has waited ``wait`` seconds (pop now), or how long the
drain should let calls gather. When it says wait, it holds the drain flag until then (calls
arriving meanwhile send no drain job) and marks the wake-up, so that of all the drains that ask
(a call's, beat's) one schedules the next look.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gather:
    """A gather answer: ``wait`` 0 means pop now; else look again in ``wait`` seconds, sending
    a drain job with that countdown when ``schedule`` (none is scheduled for then yet)."""

    wait: float = 0.0
    schedule: bool = False


class PoolGathering:
    """Mixin of [`CappedPool`][celery_redqueue.CappedPool]."""

    def _run(self, name: str, args: list[Any], keys: Any = None) -> Any:
        raise NotImplementedError

    def gather(self, min_calls: int, wait: float, *, check_every: float | None = None) -> Gather:
        """Pop now, or how long to let calls gather (see the module).

        ``check_every`` (default: a quarter of ``wait``) bounds how long before the drain looks
        again, so a batch that reaches ``min_calls`` early does not wait out the whole ``wait``.
        """
        wait_ms = int(wait * 1000)
        if wait_ms <= 0:
            return Gather()
        check_ms = max(int((check_every if check_every is not None else wait / 4) * 1000), 1)
        reply = self._run("pool_gather", [min_calls, wait_ms, check_ms])
        return Gather(int(reply[0]) / 1000.0, bool(reply[1]))
