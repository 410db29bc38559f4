"""By-name calls: a message with arguments for a pooled or bucket task is stored, not run.

The worker that receives it stores the call exactly as ``.delay()`` would and acknowledges the
message only after the store returned (the task is ``acks_late``). What is counted,
dead-lettered or sent again (`STORE_ATTEMPTS_HEADER`), why a copy of a message is stored once
(`MESSAGE_DEDUPE_PREFIX`) and what the message's result is: docs/call-paths.md, "By-name calls".
An argument-less message is a drain job, as before.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, cast

from celery.exceptions import Ignore, Reject

from ..errors import RedisFullError, RedisUnavailableError, RedQueueError
from ..privates import exec_options

if TYPE_CHECKING:
    from ..structures.receipts import Receipt
    from .producing import ProducerTask

logger = logging.getLogger(__name__)

#: Message header naming a by-name call for producer-side dedupe (``dedupe_id=`` of a call).
DEDUPE_HEADER = "redqueue_dedupe_id"
#: Message header counting the stores a by-name call has waited for (Redis was unavailable).
STORE_ATTEMPTS_HEADER = "redqueue_store_attempts"
#: Longest countdown before a by-name call whose store failed is tried again.
MAX_STORE_BACKOFF = 60.0
#: Prefix of the dedupe id a by-name call without one of its own is stored under (then the
#: message's id): it keeps message ids apart from the ids a dedupe key function returns.
MESSAGE_DEDUPE_PREFIX = "message:"


def receipt_dict(receipt: Receipt) -> dict[str, object]:
    """A receipt as JSON-friendly fields (the by-name message's own result)."""
    return {
        f.name: getattr(receipt, f.name)
        for f in dataclasses.fields(receipt)
        if f.init and f.name != "outcome"
    }


def store_by_name(
    task: ProducerTask, args: tuple[object, ...], kwargs: dict[str, object]
) -> dict[str, object]:
    """Store the call a message carries; what the message's task returns (see module)."""
    request = task.request
    call_id = cast("str", request.id)  # a message's request has its id
    options: dict[str, object] = {}
    if request.eta:  # the worker held the message until then; a skewed clock still waits
        options["eta"] = request.eta
    if getattr(request, DEDUPE_HEADER, None) is not None:
        options["dedupe_id"] = getattr(request, DEDUPE_HEADER)
    try:
        prepared, delay, dedupe_id = task._prepare(args, kwargs, options, call_id)
    except (TypeError, ValueError, RedQueueError) as exc:
        return _bury_message(task, args, kwargs, exc)
    message_dedupe = f"{MESSAGE_DEDUPE_PREFIX}{call_id}"
    try:
        stored = task._store(prepared, delay, dedupe_id or message_dedupe)
    except (RedisUnavailableError, RedisFullError) as exc:
        # Nothing (or, after a lost reply, possibly the call: its copy is then refused by
        # the message's dedupe id) was stored; the broker keeps the call until Redis is back.
        return _store_later(task, args, kwargs, exc)
    except RedQueueError as exc:
        return _bury_message(task, args, kwargs, exc)  # it would fail again every time
    if stored.duplicate and dedupe_id is None:
        logger.info("%s: by-name call %s was stored already (a copy)", task.name, call_id)
        if task.redqueue_results:
            raise Ignore()  # the first copy's call stores its outcome under the id
        return dict(receipt_dict(stored), id=call_id)
    # A refused call's result is stored by _after_add when results are on.
    receipt = task._after_add(stored, None, call_id)
    if not receipt:
        logger.info("%s: by-name call %s refused by the structure (counted)", task.name, call_id)
    if task.redqueue_results:
        raise Ignore()  # the body's outcome, not this message's, is stored under the id
    return receipt_dict(receipt)


def _bury_message(
    task: ProducerTask, args: tuple[object, ...], kwargs: dict[str, object], exc: BaseException
) -> dict[str, object]:
    reason = f"by-name call not stored: {type(exc).__name__}: {exc}"
    logger.error("%s: %s (dead-lettered)", task.name, reason)
    try:
        payload = task.structure.encode([list(args), dict(kwargs)])
    except Exception:
        payload = repr((args, kwargs)).encode()
    try:
        task.structure.bury_unstored(payload, reason)
    except (RedisUnavailableError, RedisFullError) as bury_exc:
        return _store_later(task, args, kwargs, bury_exc)  # buried once Redis is back
    if task.redqueue_results:
        from .results import store_failure

        store_failure(task, task.request.id, RedQueueError(reason))
        raise Ignore()
    return {"stored": False, "dead_lettered": True, "error": reason, "id": task.request.id}


def _store_later(
    task: ProducerTask, args: tuple[object, ...], kwargs: dict[str, object], exc: RedQueueError
) -> dict[str, object]:
    request = task.request
    attempts = int(getattr(request, STORE_ATTEMPTS_HEADER, 0) or 0) + 1
    countdown = min(MAX_STORE_BACKOFF, 2.0 ** min(attempts, 10))
    logger.warning(
        "%s: by-name call %s not stored (%s); trying again in %.0f s",
        task.name,
        request.id,
        exc,
        countdown,
    )
    headers = {STORE_ATTEMPTS_HEADER: attempts}
    if getattr(request, DEDUPE_HEADER, None) is not None:
        headers[DEDUPE_HEADER] = getattr(request, DEDUPE_HEADER)
    options = dict(exec_options(task), countdown=countdown, headers=headers)
    try:
        task.app.send_task(task.name, args, kwargs, task_id=request.id, **options)
    except Exception as send_exc:
        # Neither Redis nor the broker takes it: keep this message (returned to its queue).
        raise Reject(send_exc, requeue=True) from send_exc
    if task.redqueue_results:
        raise Ignore()  # the body's outcome is stored under the id once the call is in
    return {"stored": False, "retry_in": countdown, "error": f"{type(exc).__name__}: {exc}"}
