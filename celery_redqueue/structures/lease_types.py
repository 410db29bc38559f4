"""What a LeasedResources hands back (a Lease, its figures) and how its arguments are checked.
Re-exported by `leases`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, ReservationError
from .receipts import Record

if TYPE_CHECKING:
    from ..redis.client import Client
    from ..redis.lua import KeyOrArg


@dataclass(frozen=True)
class Lease:
    """Proof that one holder leases one resource; pass it to ``release`` and ``renew``."""

    #: The key base of the structure that granted it (``prefix:{lease:name}``, or a unique
    #: table's): a lease only works with its own structure.
    base: str
    #: The leased resource's name.
    resource: str
    #: Unique to this acquisition; only its holder can release or renew.
    token: str
    #: When the lease runs out, Unix seconds by the Redis server's clock.
    expires_at: float
    #: Fencing token: larger than that of every earlier lease of this resource. Pass it with
    #: each write to the guarded store, which keeps the largest it has seen and refuses writes
    #: carrying a smaller one: a holder that lost its lease while paused can then do no harm.
    fence: int = 0
    #: ``time.monotonic()`` by which the lease surely still holds (the moment its acquire or
    #: last renew was sent, plus its ttl): this process's own clock, so no clock skew with the
    #: Redis server. Past it, treat the resource as lost.
    local_deadline: float = field(default=0.0, compare=False)

    def remaining(self) -> float:
        """Seconds the lease surely still holds by this process's clock (<= 0: lost)."""
        return self.local_deadline - time.monotonic()


@dataclass(frozen=True)
class LeaseStats(Record):
    """One consistent snapshot of a LeasedResources (read by one script)."""

    #: Resources it has.
    resources: int
    #: Resources free to lease now.
    free: int
    #: Resources under a lease that has not run out.
    leased: int
    #: Leases that ran out but were not reclaimed yet (the next acquire will).
    expired: int
    #: Leases ever granted.
    acquired: int
    #: Leases released by their holder in time.
    released: int
    #: Leases that ran out and were taken back (expired and reclaimed).
    reclaimed: int
    #: Successful renewals.
    renewed: int
    #: Acquire attempts that found nothing free.
    missed: int


def _seconds(value: object, what: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigurationError(f"{what} must be a number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or math.isinf(value):
        kind = "non-negative" if allow_zero else "positive"
        raise ConfigurationError(f"{what} must be {kind} finite seconds, got {value!r}")
    return float(value)


def _ttl_ms(ttl: object) -> int:
    return max(1, round(_seconds(ttl, "ttl") * 1000))


def _names(resources: Iterable[str]) -> list[str]:
    if isinstance(resources, str | bytes):
        raise ConfigurationError(
            f"resources must be an iterable of names, not one string: {resources!r}"
        )
    names = list(resources)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"resource names must be non-empty strings, got {name!r}")
    return names


def _socket_timeout(client: Client) -> float | None:
    """The client's socket timeout in seconds, where redis-py tells it (not on a cluster)."""
    connection_pool = getattr(client, "connection_pool", None)
    value = getattr(connection_pool, "connection_kwargs", {}).get("socket_timeout")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_owned(lease: object, base: str, what: str) -> None:
    """Refuse anything but a `Lease` of the structure ``base`` (a LeasedResources' lease, a unique
    table's lock: ``what``)."""
    if not isinstance(lease, Lease):
        raise ReservationError(f"expected a Lease, got {lease!r}")
    if lease.base != base:
        raise ReservationError(f"{what} of {lease.base} does not belong to {base}")


def renewed(
    run: Callable[[str, list[KeyOrArg]], int], name: str, lease: Lease, ttl: float
) -> Lease | None:
    """Renew ``lease`` to ``ttl`` seconds from now with script ``name`` (run by the structure's
    ``_run``; it answers the new expiry in ms, or 0 when the lease is no longer held): the
    updated lease, or None (the holder must stop)."""
    ttl_ms = _ttl_ms(ttl)
    sent = time.monotonic()
    expiry_ms = int(run(name, [lease.resource, lease.token, ttl_ms]))
    if expiry_ms <= 0:
        return None
    return replace(lease, expires_at=expiry_ms / 1000, local_deadline=sent + ttl_ms / 1000)
