"""Call ids and per-call results: what a receipt's id leads to (docs/call-paths.md, "Receipts,
ids and per-call results").

With the kind's ``*_results`` option on, the id travels with the stored call and the body's
outcome is stored in the app's result backend under it; a refused call gets
[`CallRefusedError`][celery_redqueue.CallRefusedError] at once, and a call counted lost
[`CallLostError`][celery_redqueue.CallLostError] (`store_lost`). Off (the default), nothing is
stored per call (a result is one more backend write per call) and ``get()`` returns None.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from celery import states
from celery.backends.base import DisabledBackend
from celery.result import AsyncResult

from ..errors import CallLostError, CallRefusedError
from ..structures.receipts import Receipt

if TYPE_CHECKING:
    from celery import Celery
    from celery.backends.base import Backend

    from .options import DrainSettings


class ResultTask(Protocol):
    """What per-call results need of a task (a pooled or bucket task)."""

    name: str
    backend: Backend
    __dict__: dict[str, object]

    @property
    def app(self) -> Celery: ...

    @property
    def redqueue_results(self) -> bool: ...

    @property
    def drain_settings(self) -> DrainSettings: ...


logger = logging.getLogger(__name__)

#: Key of the stored call's metadata in its envelope ``[args, kwargs, meta]``.
ID_FIELD = "id"


class NoResult:
    """The outcome side of a receipt when per-call results are off: nothing is stored.

    ``backend`` is Celery's DisabledBackend, so tools that check for a result backend (Flower)
    see none; ``get()`` returns None at once rather than wait for a result that never comes.
    """

    def __init__(self, app: Celery, call_id: str, kept: bool) -> None:
        self.id = self.task_id = call_id
        self.backend = DisabledBackend(app)
        #: "STORED" for a call the structure kept, "REFUSED" for one it did not.
        self.state = self.status = "STORED" if kept else "REFUSED"
        self.result: None = None
        self.traceback: str | None = None

    def get(self, *args: object, **kwargs: object) -> None:
        return None

    def ready(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<NoResult {self.id} {self.state}>"


#: Reads a call's outcome by its id: from the result backend, or nothing stored (`NoResult`).
OutcomeReader = Callable[[str], "AsyncResult[object] | NoResult"]
#: What `outcome_reader` caches on a task: the app and setting it was built for, then the
#: readers of a refused call and of a kept one.
_Readers = tuple["Celery", bool, OutcomeReader, OutcomeReader]


def outcome_reader(task: ResultTask, kept: bool, results: bool) -> OutcomeReader:
    """What a receipt of ``task`` reads its outcome from, by call id (``results``: the task's
    per-call results are on). Every stored call gets one: they are built once per task and
    setting, not per call, and read nothing until the receipt's outcome is asked for."""
    app = task.app
    # Only this function writes the entry, always a _Readers.
    cached = cast("_Readers | None", task.__dict__.get("_redqueue_readers"))
    if cached is None or cached[0] is not app or cached[1] != results:
        if results:
            read: OutcomeReader = lambda call_id: AsyncResult(  # noqa: E731
                call_id, app=app, backend=task.backend
            )
            cached = (app, results, read, read)
        else:
            cached = (
                app,
                results,
                partial(NoResult, app, kept=False),
                partial(NoResult, app, kept=True),
            )
        task.__dict__["_redqueue_readers"] = cached
    return cached[3] if kept else cached[2]


def with_id(call: list[object], call_id: str | None) -> list[object]:
    """A call as stored, ``[args, kwargs]`` or ``[args, kwargs, meta]``, carrying its id in
    ``meta`` (shared with the trace context, see `tracing`) when one is given."""
    if call_id is not None:
        if len(call) == 3:
            # A third element is the meta dict `tracing.stamp` appended to this new call.
            call[2] = dict(cast("dict[str, str]", call[2]), **{ID_FIELD: call_id})
        else:
            call.append({ID_FIELD: call_id})
    return call


def call_meta(payload: object) -> dict[str, str] | None:
    """The metadata of a stored call ``[args, kwargs, meta]`` (its id, its caller's trace
    context), None for ``[args, kwargs]``."""
    if isinstance(payload, list | tuple) and len(payload) == 3 and isinstance(payload[2], dict):
        return payload[2]
    return None


def call_id_of(payload: object) -> str | None:
    """The id a stored call carries (None without one: results were off when it was stored)."""
    value = (call_meta(payload) or {}).get(ID_FIELD)
    return value if isinstance(value, str) else None


def store_success(task: ResultTask, call_id: str | None, value: object) -> None:
    """Store a body's return value under its call's id (nothing for a call without one)."""
    if call_id is not None:
        _storing(task, call_id, lambda: task.backend.store_result(call_id, value, states.SUCCESS))


def store_failure(task: ResultTask, call_id: str | None, exc: BaseException) -> None:
    """Store the exception a call ended with (it will not be tried again)."""
    if call_id is not None:
        _storing(
            task,
            call_id,
            # celery-types narrows ``exc`` to Exception; Celery stores any BaseException.
            lambda: task.backend.mark_as_failure(call_id, exc),  # type: ignore[arg-type]
        )


def store_lost(task: ResultTask, payloads: Iterable[object], why: str) -> None:
    """Tell the waiters of calls counted lost (``why``): a CallLostError is each one's result,
    unless it stored one already (in an at-most-once batch whose worker died, the calls before
    the one it died in ran and stored theirs)."""
    backend = task.backend

    def tell(call_id: str) -> None:
        if backend.get_state(call_id) not in states.READY_STATES:
            lost = CallLostError(f"{task.name}: the call was lost: {why}")
            backend.mark_as_failure(call_id, lost)

    for payload in payloads:
        call_id = call_id_of(payload)
        if call_id is not None:
            _storing(task, call_id, partial(tell, call_id))


#: How long a result store is tried again over connection errors before it is given up (s).
STORE_PATIENCE = 10.0

#: Set once a store gave up over connection errors, cleared by the next store that succeeds:
#: while it is set, stores are tried once, so a backend outage costs a worker one patience,
#: not one per call (a drain of 100 calls would otherwise wait 100 x 10 s).
_backend_down = False


def _storing(task: ResultTask, call_id: str, store: Callable[[], object]) -> None:
    # The call ran (or failed for good) whatever the backend says: a backend that cannot take
    # its result must not turn a done call into a failed or retried one. A store is safe to run
    # twice (it sets the call's one key), so a connection error is tried again for a while:
    # Celery's Redis backend retries its SET but not the GET before it, and a waiter whose
    # result is never stored waits forever (bench/torture.py, client-kill, found it). An error
    # Celery's own `result_backend_always_retry` loop covers (it covers the GET too) was tried
    # again there already: none here.
    global _backend_down
    backend = task.backend
    deadline = time.monotonic() + STORE_PATIENCE
    pause = 0.05
    while True:
        try:
            store()
            _backend_down = False
            return
        except Exception as exc:
            celery_retries = bool(backend.exception_safe_to_retry(exc))
            safe = celery_retries or isinstance(exc, _connection_errors(backend))
            patient = not _backend_down and not (
                celery_retries and getattr(backend, "always_retry", False)
            )
            if not (patient and safe) or time.monotonic() + pause > deadline:
                _backend_down = _backend_down or safe
                logger.warning(
                    "%s: could not store the result of call %s: %s", task.name, call_id, exc
                )
                return
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _connection_errors(backend: Backend) -> tuple[type[BaseException], ...]:
    """The backend's connection errors, which a store may try again besides what the backend
    says is safe to retry: Celery's Redis backend says which errors are safe only from 5.5 on
    (celery/celery#9614); before, it calls none safe, though these (redis-py's and the
    socket's) are."""
    errors: tuple[type[BaseException], ...] = getattr(backend, "connection_errors", ())
    return errors


def named_receipt(task: ResultTask, receipt: Receipt, call_id: str) -> Receipt:
    """``receipt`` carrying its call's id; a refused call's result is stored at once when
    per-call results are on, and so is that of the call it evicted (nobody waits on its id
    forever)."""
    results = task.drain_settings.results
    named = receipt.named(call_id, outcome_reader(task, receipt.kept or receipt.delayed, results))
    if results and receipt.evicted_calls:
        store_lost(
            task, receipt.evicted_calls, "evicted: a later call took its place in the full pool"
        )
    if results and not named:  # (a delayed call is truthy: held, not refused)
        why = "a duplicate of a call seen within the dedupe window" if named.duplicate else "full"
        refused = CallRefusedError(f"{task.name}: the call was not stored ({why})")
        task.backend.mark_as_failure(call_id, refused)
    return named
