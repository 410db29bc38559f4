"""What a bucket offers producers: checking, encoding and enqueueing calls, one or many, over
[`LeakyBucket`][celery_redqueue.LeakyBucket]'s `store_encoded`. Re-exported by `bucket`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import InvalidArgumentError
from .bucket_limits import Limits
from .bucket_types import EncodedCall, _check_key
from .protocols import Producer, in_chunks
from .receipts import Receipt

#: Items one enqueue_many round trip carries.
ENQUEUE_CHUNK = 1000


def _cost_arg(call: EncodedCall) -> str:
    """The cost a script receives for a call: '' when it has none."""
    return repr(call[2]) if len(call) > 2 and call[2] is not None else ""


class BucketProducer(Producer[EncodedCall]):
    """What a bucket offers producers on top of `Producer` (a mixin of
    [`LeakyBucket`][celery_redqueue.LeakyBucket])."""

    store_chunk = ENQUEUE_CHUNK
    limits: Limits

    def encoded_call(self, key: str, payload: Any, cost: float | None = None) -> EncodedCall:
        """A call checked and encoded for ``store_encoded``: ``(key, data)``, or
        ``(key, data, cost)`` on a bucket with a cost rate (InvalidArgumentError for a cost no
        period can allow, or a cost on a bucket without a cost rate)."""
        if cost is None:
            return (_check_key(key), self.encode(payload))
        if not self.limits.cost_interval_ms:
            raise InvalidArgumentError("a call's cost needs a bucket with a cost_rate")
        return (_check_key(key), self.encode(payload), self.limits.check_cost(cost))

    def enqueue(
        self,
        key: str,
        payload: Any,
        *,
        delay: float = 0.0,
        dedupe_id: str | None = None,
        cost: float | None = None,
    ) -> Receipt:
        """Append ``payload`` to ``key``'s queue; one round trip.

        ``delay`` holds the item for that many seconds before it joins its key's queue (its
        reservation clock starts only when it is released); ``dedupe_id`` refuses the item if
        the same id was seen within ``dedupe_window``; ``cost``: its units, on a bucket with a
        ``cost_rate`` (1 when not given).
        """
        encoded = [self.encoded_call(key, payload, cost)]
        return self.store_encoded(encoded, delay=delay, dedupe_ids=[dedupe_id])[0]

    def enqueue_many(
        self, items: Iterable[tuple[str, Any] | tuple[str, Any, float]], *, delay: float = 0.0
    ) -> list[Receipt]:
        """Append many ``(key, payload)`` pairs (or ``(key, payload, cost)``); every one is
        checked before any is stored."""
        encoded = [self.encoded_call(*item) for item in items]
        store = self.store_encoded
        return in_chunks(lambda chunk: store(chunk, delay=delay), encoded, ENQUEUE_CHUNK)
