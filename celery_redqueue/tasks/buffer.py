"""Buffered producers: calls made inside a ``with buffer():`` block are stored on exit, in one
round trip per task and thousand calls.

The rules (a call is checked at ``delay()``; its receipt is read after the block; buffers
belong to the thread and asyncio task that opened them, and nest; an exception leaving the
block discards its calls unless ``flush_on_error``; a failed store's receipts raise its error;
eager mode runs calls at once) are in docs/guides/pool.md, "Buffered producers", each tested.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from ..errors import ConfigurationError, ReceiptNotReadyError, RedQueueError
from .results import named_receipt

if TYPE_CHECKING:
    from ..structures.receipts import Receipt
    from .producing import ProducerTask

#: Calls held for one delay: (prepared call, dedupe id, its pending receipt).
_Held = list[tuple[object, "str | None", "BufferedReceipt"]]

#: Open buffers of this thread or asyncio task, innermost last.
open_buffers: ContextVar[tuple[CallBuffer, ...]] = ContextVar("redqueue_buffers", default=())

_PENDING, _STORED, _DISCARDED, _FAILED = "pending", "stored", "discarded", "failed"


class BufferedReceipt:
    """The receipt of a buffered call: the stored call's receipt once its buffer has flushed.

    Attribute reads (``receipt.kept``, ``receipt.drain_needed``...) and ``bool(receipt)`` are
    passed to the pool's [`Receipt`][celery_redqueue.Receipt] or the bucket's
    [`Receipt`][celery_redqueue.Receipt]; before the flush they raise
    [`ReceiptNotReadyError`][celery_redqueue.ReceiptNotReadyError].
    """

    __slots__ = ("_error", "_result", "_state", "id", "task_name")

    def __init__(self, task_name: str, call_id: str = "") -> None:
        self.task_name = task_name
        #: The call's id, known before the flush (the stored receipt carries it too).
        self.id = call_id
        self._state = _PENDING
        self._result: Receipt | None = None
        self._error: BaseException | None = None

    @property
    def ready(self) -> bool:
        """True once the call was stored (its receipt can be read)."""
        return self._state == _STORED

    @property
    def result(self) -> Receipt:
        """The stored call's receipt (Receipt or Receipt)."""
        if self._state == _STORED:
            return cast("Receipt", self._result)  # flush() set it with the state
        if self._state == _PENDING:
            raise ReceiptNotReadyError(
                f"{self.task_name}: this call is buffered and is stored when its buffer block "
                "exits; read its receipt after the block"
            )
        if self._state == _DISCARDED:
            raise ReceiptNotReadyError(
                f"{self.task_name}: this call was discarded, not stored: an exception left its "
                "buffer block (use buffer(flush_on_error=True) to store such calls)"
            )
        raise ReceiptNotReadyError(
            f"{self.task_name}: this call was not stored: {self._error}"
        ) from self._error

    # Untyped on purpose: it forwards every attribute of the stored receipt.
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.result, name)

    def __bool__(self) -> bool:
        return bool(self.result)

    def __repr__(self) -> str:
        if self._state == _STORED:
            return f"<BufferedReceipt {self._result!r}>"
        return f"<BufferedReceipt {self.task_name} {self._state}>"


class CallBuffer:
    """One open ``buffer()`` block: the calls it holds, grouped by task and delay.

    Use [`buffer()`][celery_redqueue.buffer] or ``task.buffer()`` to make one.
    """

    def __init__(self, tasks: Iterable[object] = (), *, flush_on_error: bool = False) -> None:
        names = []
        for task in tasks:
            name = getattr(task, "name", None)
            if not isinstance(name, str) or not hasattr(task, "structure"):
                raise ConfigurationError(f"buffer() takes pooled or bucket tasks, got {task!r}")
            names.append(name)
        self._names = frozenset(names)
        self.flush_on_error = bool(flush_on_error)
        # task name -> (task, {delay: [(prepared, dedupe_id, receipt), ...]})
        self._calls: dict[str, tuple[ProducerTask, dict[float, _Held]]] = {}
        self._closed = False
        self._token: Token[tuple[CallBuffer, ...]] | None = None

    def covers(self, task: ProducerTask) -> bool:
        """True if this open block takes ``task``'s calls."""
        return not self._closed and (not self._names or task.name in self._names)

    def __len__(self) -> int:
        return sum(len(c) for _, groups in self._calls.values() for c in groups.values())

    def add(
        self,
        task: ProducerTask,
        prepared: object,
        delay: float,
        dedupe_id: str | None,
        call_id: str = "",
    ) -> BufferedReceipt:
        """Hold one checked, serialized call; returns its pending receipt."""
        receipt = BufferedReceipt(task.name, call_id)
        held = self._calls.get(task.name)
        if held is None:  # (not setdefault: this runs per call, and would build a tuple each)
            held = self._calls[task.name] = (task, {})
        calls = held[1].get(delay)
        if calls is None:
            calls = held[1][delay] = []
        calls.append((prepared, dedupe_id, receipt))
        return receipt

    def flush(self) -> None:
        """Store every held call now: one round trip per task, delay and thousand calls.

        Called when the block exits; may be called inside the block too (e.g. every N rows
        of a long loop). Sends each task the drain jobs its calls asked for.
        """
        calls, self._calls = self._calls, {}
        failure: BaseException | None = None
        for task, groups in calls.values():
            drain_needed, wakes = False, []
            try:
                for delay, entries in groups.items():
                    size = task.structure.store_chunk
                    for start in range(0, len(entries), size):
                        chunk = entries[start : start + size]
                        results = task.structure.store_encoded(
                            [p for p, _, _ in chunk],
                            delay=delay,
                            dedupe_ids=[d for _, d, _ in chunk],
                        )
                        for (_, _, receipt), result in zip(chunk, results, strict=True):
                            if receipt.id:
                                result = named_receipt(task, result, receipt.id)
                            receipt._state, receipt._result = _STORED, result
                            drain_needed = drain_needed or result.drain_needed
                            if result.wake_in is not None:
                                wakes.append(result.wake_in)
            except RedQueueError as exc:
                failure = failure or exc
                _mark(groups, _FAILED, exc)
            if drain_needed or wakes:
                task.send_wanted_drains(drain_needed, min(wakes) if wakes else None)
        if failure is not None:
            raise failure

    def discard(self) -> int:
        """Drop every held call (their receipts say so); returns how many."""
        calls, self._calls = self._calls, {}
        return sum(_mark(groups, _DISCARDED, None) for _, groups in calls.values())

    def __enter__(self) -> CallBuffer:
        if self._token is not None or self._closed:
            raise ConfigurationError("a buffer() block cannot be entered twice")
        self._token = open_buffers.set((*open_buffers.get(), self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed = True
        open_buffers.reset(cast("Token[tuple[CallBuffer, ...]]", self._token))  # __enter__ set it
        if exc_type is None or self.flush_on_error:
            self.flush()
        else:
            self.discard()


def buffer(*tasks: object, flush_on_error: bool = False) -> CallBuffer:
    """Collect the calls of ``tasks`` (no tasks: every pooled and bucket task) made in this
    thread inside the ``with`` block, and store them when it exits.

    Example:

        with buffer(record, fetch) as held:
            for row in rows:
                record.delay(row)
        # here every call is stored; len(held) was the number of calls held

    Args:
        tasks: The tasks to buffer; none means every redqueue task.
        flush_on_error: Store the held calls even when an exception leaves the block
            (default: discard them).
    """
    return CallBuffer(tasks, flush_on_error=flush_on_error)


def buffered_call(
    task: ProducerTask, prepared: object, delay: float, dedupe_id: str | None, call_id: str = ""
) -> BufferedReceipt | None:
    """The hook of ``apply_async``: hold the call in the innermost open buffer covering
    ``task`` and return its receipt, or return None (no buffer: store it now)."""
    for held in reversed(open_buffers.get()):
        if held.covers(task):
            return held.add(task, prepared, delay, dedupe_id, call_id)
    return None


def _mark(groups: dict[float, _Held], state: str, error: BaseException | None) -> int:
    """Give every not-yet-stored receipt of ``groups`` its final state; returns how many."""
    marked = 0
    for entries in groups.values():
        for _, _, receipt in entries:
            if receipt._state == _PENDING:
                receipt._state, receipt._error = state, error
                marked += 1
    return marked
