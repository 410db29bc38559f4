"""What crosses the wire per popped call: reading a ``pool_pop`` reply into a `PoolBatch`, and
the arguments of its ``pool_ack`` (and the lost calls a ``pool_reap`` or ``pool_add`` replies).

A drain runs this for every call it takes, so it is written for that: the reply lists each
entry's member once (``id:payload``), with counts and receives only where they are not 1 (see
lua/pool_reply_entries.lua); an ack names only the calls that did not succeed. Used by `pool`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ..redis.lua import AGAIN, LATER, LINGER
from .pool_types import PoolBatch, PoolItem
from .receipts import Receipt

logger = logging.getLogger(__name__)

_new, _set = object.__new__, object.__setattr__


def _item(payload: Any, count: int, receives: int, entry_id: str) -> PoolItem:
    """``PoolItem(...)`` without the call through the dataclass's ``__init__`` (a quarter of
    the cost, once per popped call). Set field by field, never through ``__dict__``: that would
    give every item a dict object of its own, and a batch's items live long enough for the
    garbage collector to promote them, which makes its full collections come sooner."""
    item = _new(PoolItem)
    _set(item, "payload", payload)
    _set(item, "count", count)
    _set(item, "receives", receives)
    _set(item, "id", entry_id)
    return item


def read_pop(
    reply: list[Any], batch_id: str, loads: Callable[[bytes], Any], coalesce: bool, name: str
) -> PoolBatch:
    """The batch a ``pool_pop`` reply describes; payloads that cannot be decoded are listed in
    ``undecodable`` (``ack`` dead-letters them) with the reason in ``errors``."""
    status, fan_out, remaining, wait_ms, schedule, malformed, k = reply[:7]
    batch = PoolBatch(
        id=batch_id,
        items=[],
        fan_out=bool(fan_out),
        remaining=int(remaining),
        wait=int(wait_ms) / 1000.0 if status == LATER else None,
        schedule=bool(schedule),
        malformed=int(malformed),
        lingering=status == LINGER,
        pop_again=status == AGAIN,
    )
    if batch.malformed:
        logger.warning("%s: %d malformed entries dead-lettered by a pop", name, batch.malformed)
    if not k:
        return batch
    members = reply[7 : 7 + k]
    extras = reply[7 + k :]
    if coalesce:
        parts = [(member, b"", member) for member in members]
    else:
        parts = [member.partition(b":") for member in members]
    if not extras:
        # The common case: fresh calls, one each. Any decoding error takes the path below.
        try:
            batch.items = [_item(loads(raw), 1, 1, head.decode()) for head, _, raw in parts]
            return batch
        except Exception:
            pass
    special = {extras[j] - 1: (extras[j + 1], extras[j + 2]) for j in range(0, len(extras), 3)}
    for index, (head, _, raw) in enumerate(parts):
        count, receives = special.get(index, (1, 1))
        # Lossless: a coalescing pool's id is its payload, binary with msgpack or pickle, and
        # ack_args encodes it back to the very member the ack must find.
        entry_id = head.decode(errors="surrogateescape")
        try:
            payload = loads(raw)
        except Exception as exc:
            # It can never succeed: ack() dead-letters it at once, with the reason.
            logger.warning(
                "%s: entry %r is undecodable (%s); it will be dead-lettered", name, entry_id, exc
            )
            batch.undecodable.append((entry_id, int(count), raw))
            batch.errors[entry_id] = f"undecodable payload: {type(exc).__name__}: {exc}"
        else:
            batch.items.append(_item(payload, int(count), int(receives), entry_id))
    return batch


def decodable(raws: Sequence[bytes], loads: Callable[[bytes], Any], name: str) -> tuple[Any, ...]:
    """The payloads among ``raws`` (a reap's lost calls) that decode: one that does not is
    logged, and has no id to tell its waiter by."""
    payloads = []
    for raw in raws:
        try:
            payloads.append(loads(raw))
        except Exception as exc:
            logger.warning("%s: a lost call's payload is undecodable: %s", name, exc)
    return tuple(payloads)


def name_victims(results: list[Receipt], victims: Sequence[bytes], pool: Any) -> list[Receipt]:
    """``results`` (of a ``pool_add`` reply) with each evicting call's receipt naming the call
    it pushed out (``evicted_calls``): the reply lists the members after the statuses, one per
    call that evicted, in order."""
    victims_left = iter(victims)
    for index, result in enumerate(results):
        member = next(victims_left, None) if result.evicted else None
        if member is not None:
            raw = member if pool.coalesce else member.partition(b":")[2]
            named = decodable([raw], pool.serializer.loads, pool.keys.base)
            results[index] = dataclasses.replace(result, evicted_calls=named)
    return results


def _member_id(entry_id: str) -> bytes:
    """The id's bytes as stored (read_pop decoded them with ``surrogateescape``)."""
    return entry_id.encode("utf-8", "surrogateescape")


def ack_args(
    batch: PoolBatch,
    failures: Mapping[int, str],
    guard: bool,
    retry_in: Mapping[int, float] | None = None,
    dead: Collection[int] = (),
    again: str = "",
) -> list[Any]:
    """After the batch's id and settings: the calls it holds, then each call that did not
    succeed (id, count, error text, and what becomes of it: ``@`` and its retry delay in ms,
    ``d`` to dead-letter it, ``!`` and the raw payload to bury now, or ``again``, the delivery
    mode's rule: ``@0`` back now, or nothing: failed), then, for the processed ``guard``, the
    ids of those that did."""
    items = batch.items
    retry_in = retry_in or {}
    args: list[Any] = [batch.calls, len(failures) + len(batch.undecodable)]
    for index, error in failures.items():
        item = items[index]
        delay = retry_in.get(index)
        mark = "d" if index in dead else again if delay is None else f"@{max(int(delay * 1000), 0)}"
        args += (_member_id(item.id), item.count, str(error)[:4000] or "failed", mark)
    for entry_id, count, raw in batch.undecodable:
        reason = batch.errors.get(entry_id, "undecodable payload")[:4000]
        args += (_member_id(entry_id), count, reason, b"!" + raw)
    if guard:
        args += [item.id for index, item in enumerate(items) if index not in failures]
    return args
