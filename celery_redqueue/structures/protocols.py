"""The public seam between the Celery glue and the structures.

The glue (``tasks/``) stores calls through `Producer` and works a structure through
`Drained`; pools and buckets implement both (`Stored`, structurally: no structure inherits
them) and wait on their wake signal (`Sharded.listen`), streams implement `Drained`. Nothing
in the glue touches a private name of a structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..redis.keys import StructureKeys
from ..redis.lua import KeyOrArg
from ..redis.serializers import Serializer
from .figures import Figures
from .receipts import ReapResult, Receipt

if TYPE_CHECKING:
    from ..redis.client import Client

ItemT = TypeVar("ItemT", contravariant=True)
T = TypeVar("T")


@runtime_checkable
class Producer(Protocol[ItemT]):
    """Where a producer stores encoded calls: a pool takes ``bytes``, a bucket
    ``(key, bytes)`` pairs."""

    #: Most calls one `store_encoded()` takes: one round trip, one bounded script.
    store_chunk: int

    def encode(self, payload: object) -> bytes:
        """Serialize one payload as it will be stored (raises SerializationError)."""
        ...

    def store_encoded(
        self,
        encoded: Sequence[ItemT],
        *,
        delay: float = 0.0,
        dedupe_ids: Sequence[str | None] | None = None,
    ) -> list[Receipt]:
        """Store up to `store_chunk` encoded calls in one round trip; at most one
        receipt asks for a drain job."""
        ...

    def release_drain(self, *, flag: bool = True, wake: bool = False) -> None:
        """Give the drain flag back when the drain job it announced could not be sent."""
        ...


@runtime_checkable
class Drained(Protocol):
    """What every structure behind a task offers its drain, reaper, heartbeat and tools."""

    client: Client
    keys: StructureKeys
    serializer: Serializer

    def settings(self) -> dict[str, object]: ...

    def reap(self) -> ReapResult: ...

    def figures(self) -> Figures: ...

    # ``letters`` stays untyped until tasks/base.py's requeue_dead (which passes on its
    # caller's ``object``) names DeadLetter too.
    def requeue_dead(self, letters: Any = None, limit: int = -1) -> int: ...


class Stored(Producer[ItemT], Drained, Protocol[ItemT]):
    """A structure calls are stored in and drained from (pools, buckets and their sharded
    forms): what a producing task holds."""

    def bury_unstored(self, payload: bytes, error: str) -> None: ...


class Renewable(Protocol):
    """What the worker's heartbeat renews while bodies run: a pool's batches or a bucket's
    reservations and its drain flag (a sharded structure is held through its shards: its
    ``heartbeat_shards``)."""

    client: Client
    keys: StructureKeys

    def heartbeat_interval(self) -> float:
        """Seconds between renewals: a third of the shortest timeout they push back."""
        ...

    def renew(self, item_ids: Sequence[str]) -> list[str]:
        """Push back the held ids' deadlines and the drain flag; returns the ids not held."""
        ...

    def renew_call(self, item_ids: Sequence[str]) -> tuple[str, list[str], list[KeyOrArg]]:
        """The script, keys and arguments of `renew`, for a pipeline of several."""
        ...


def in_chunks(
    store: Callable[[Sequence[T]], list[Receipt]], items: Sequence[T], size: int
) -> list[Receipt]:
    """``store`` applied to ``items`` ``size`` at a time: the one chunking loop of every
    ``*_many`` call (each chunk one round trip, every script call bounded)."""
    receipts: list[Receipt] = []
    for start in range(0, len(items), size):
        receipts.extend(store(items[start : start + size]))
    return receipts
