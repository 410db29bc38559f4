"""LeaseKeeper: keeps a lease renewed while its holder works, and reports every loss at once.

A lease alone cannot guarantee that only one holder uses a resource at a time: a holder paused
(GC, swap, SIGSTOP, a VM migration) past its lease's end wakes up believing it still holds it.
The keeper narrows the window (it declares the lease lost at the lease's local deadline when no
renewal succeeded, without waiting for Redis); the fencing token (``Lease.fence``) closes it,
when the guarded store refuses writes that carry a token lower than one it has seen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..errors import RedQueueError
from ..validation import seconds

if TYPE_CHECKING:  # leases.py imports this module
    from .leases import Lease

logger = logging.getLogger("celery_redqueue.structures.leases")

#: What a [`LeaseKeeper`][celery_redqueue.LeaseKeeper] calls, once, when its lease is lost:
#: ``(lease, reason)``.
LostCallback = Callable[["Lease", str], None]


class Leasing(Protocol):
    """What holds the leases a keeper renews: a LeasedResources, or a UniqueLocks table."""

    def renew(self, lease: Lease, ttl: float) -> Lease | None: ...

    def release(self, lease: Lease) -> bool: ...


class LeaseKeeper:
    """Renews a lease from a daemon thread every ``ttl / 3`` seconds until stopped, and says
    as soon as the lease is lost.

    The lease counts as lost, ``lost`` becomes True and ``on_lost(lease, reason)`` is called
    once (from the keeper's thread, or from the thread that noticed), whenever:

    * a renewal finds it no longer held (it ran out, say after a long pause of the process);
    * no renewal succeeded before its local deadline (``Lease.local_deadline``; Redis stalled
      or unreachable): the keeper cannot prove it still holds the lease, so it does not wait
      for Redis to say so;
    * `release()` finds it no longer held.

    Check ``lost`` right before each use of the resource. That still leaves a window (a pause
    between the check and the use): give writes the lease's fencing token (``lease.fence``)
    and let the store refuse stale ones; see docs/guides/leases.md.

    Example:

        keeper = LeaseKeeper(resources, lease, ttl=30, on_lost=lambda lease, why: abort.set())
        keeper.start()
        try:
            long_job(lease.resource, fence=lease.fence, still_held=lambda: not keeper.lost)
        finally:
            keeper.release()
    """

    def __init__(
        self,
        leasing: Leasing,
        lease: Lease,
        ttl: float,
        *,
        on_lost: LostCallback | None = None,
    ) -> None:
        self.leasing = leasing
        self.ttl = seconds("ttl", ttl, positive=True)
        self.interval = self.ttl / 3
        self.on_lost = on_lost
        self._lease = lease
        self._lost_reason: str | None = None
        self._released = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"redqueue-lease-{lease.resource}", daemon=True
        )

    @property
    def lease(self) -> Lease:
        """The lease as last renewed."""
        return self._lease

    @property
    def lost(self) -> bool:
        """The lease is no longer held, or can no longer be shown to be: stop using the
        resource. Also True once the local deadline passed without a renewal, even before the
        keeper's thread wakes up to notice."""
        if self._lost_reason is None and not self._released and self._lease.remaining() <= 0:
            self._mark_lost("no renewal succeeded before its local deadline")
        return self._lost_reason is not None

    @property
    def lost_reason(self) -> str | None:
        """Why the lease was declared lost (None while held)."""
        return self._lost_reason

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Lease:
        """Stop renewing (waits briefly for a renewal in progress); returns the latest lease."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            # Bounded: a renewal stuck on a dead connection must not hold up the caller; if it
            # completes after the release it finds the token gone and changes nothing.
            self._thread.join(timeout=10)
        return self._lease

    def release(self) -> bool:
        """Stop renewing and give the resource back. False when the lease was no longer held,
        which also marks it lost (``on_lost`` is called if nothing reported the loss yet).

        Raises a RedQueueError when Redis cannot be reached (the lease then runs out by itself).
        """
        lease = self.stop()
        released = self.leasing.release(lease)
        if released:
            with self._lock:
                self._released = self._lost_reason is None
        else:
            self._mark_lost("release found it no longer held")
        return released

    def _mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._lost_reason is not None or self._released:
                return
            self._lost_reason = reason
        logger.warning(
            "%s: lease on %r (fence %d) lost: %s; another holder may have it now",
            self.leasing,
            self._lease.resource,
            self._lease.fence,
            reason,
        )
        if self.on_lost is not None:
            try:
                self.on_lost(self._lease, reason)
            except Exception:
                logger.exception("%s: the on_lost callback failed", self.leasing)

    def _run(self) -> None:
        while True:
            # Wake for the next renewal, or at the local deadline if that comes first.
            pause = max(min(self.interval, self._lease.remaining()), 0.0)
            if self._stop.wait(pause) or self.lost:
                return
            try:
                renewed = self.leasing.renew(self._lease, self.ttl)
            except RedQueueError:
                logger.exception(
                    "%s: renewing lease on %r failed", self.leasing, self._lease.resource
                )
                continue
            if renewed is None:
                self._mark_lost("a renewal found it no longer held")
                return
            with self._lock:
                if self._lost_reason is None:
                    self._lease = renewed
