"""Celery's retry contract for stored calls: one implementation for every kind (pools in both
delivery modes, per-call and batch bodies, buckets and streams; docs/semantics.md, "Retries").

A stored call runs inside a drain job, so Celery's own machinery (the ``autoretry_for`` wrapper,
``Task.retry`` sending a new message) cannot apply: the drain calls the body without the wrapper
(`RedQueueTask._body`) and asks `judge()` what a raised exception means. The answer is the
Celery rule, with the call's ``receives`` standing for ``request.retries + 1``:

* ``self.retry(countdown=, eta=, exc=, max_retries=)`` (`StoredRetry`): another try after that
  delay (``default_retry_delay`` when neither is given), within ``max_retries``;
* an exception in ``autoretry_for`` and not in ``dont_autoretry_for``: another try after Celery's
  backoff (``retry_backoff``, ``retry_backoff_max``, ``retry_jitter``; else
  ``retry_kwargs['countdown']`` or ``default_retry_delay``), within ``max_retries``;
* any other exception: the kind's own rule: final (buckets, at-most-once pools), or handed out
  again after the kind's redelivery delay (at-least-once pools: at once; streams:
  ``stream_retry_delay``), spaced by ``retry_backoff`` when set;
* every retry also stays within the kind's ``*_max_receives``: whichever limit runs out first
  ends the call (dead-lettered, or counted failed on an at-most-once pool).

A retry is logged as Celery logs one (INFO, ``Task name[id] retry: Retry in 2s: exc``, no
traceback); a final failure at ERROR with its traceback.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, SupportsFloat

from celery.exceptions import MaxRetriesExceededError, Retry
from celery.utils.time import get_exponential_backoff_interval, maybe_make_aware
from kombu.utils.encoding import safe_repr

if TYPE_CHECKING:
    from ..privates import AnyTask


class StoredRetry(Retry):
    """What ``self.retry()`` raises inside a stored call: Celery's `Retry` plus the call's own
    ``max_retries`` override, for the drain to apply (`judge`)."""

    def __init__(
        self,
        exc: Exception | None = None,
        when: float | datetime | None = None,
        max_retries: int | None = None,
    ) -> None:
        # celery-types types ``when`` as numbers.Real, which mypy does not take a float for.
        super().__init__(exc=exc, when=when)  # type: ignore[arg-type]
        self.max_retries = max_retries


@dataclass(frozen=True)
class Verdict:
    """What becomes of a call whose body raised."""

    #: It is handed out again (after ``delay``); else it is done (dead-lettered, or failed).
    retry: bool
    #: Seconds before it is handed out again (0 with no retry).
    delay: float
    #: What the call failed with: the dead letter's and the result's error.
    error: BaseException
    #: A retry Celery would make (INFO), rather than a failure handed out again (WARNING).
    celery_retry: bool = False
    #: Why a call that Celery would retry is done: ``max_retries`` or ``max_receives`` ran out.
    ran_out: str = ""

    def log(self, logger: logging.Logger, name: str, call: str, receives: int) -> None:
        """Log as Celery does: a retry at INFO without a traceback, a failure at ERROR with
        one. Call only inside the ``except`` block of the failure (its traceback)."""
        error = self.error
        if self.retry and self.celery_retry:
            logger.info(
                "Task %s[%s] retry: Retry in %gs: %s", name, call, self.delay, safe_repr(error)
            )
        elif self.retry:
            logger.warning(
                "Task %s[%s] failed on receive %d, handed out again in %gs: %s",
                name,
                call,
                receives,
                self.delay,
                safe_repr(error),
                exc_info=error,
            )
        else:
            logger.error(
                "Task %s[%s] failed after %d receive(s)%s: %s",
                name,
                call,
                receives,
                f" ({self.ran_out} ran out)" if self.ran_out else "",
                safe_repr(error),
                exc_info=error,
            )


def backoff(base: float, retries: int, maximum: float, jitter: bool) -> float:
    """Celery's exponential backoff (``base * 2**retries``, at most ``maximum``, full jitter):
    Celery's own helper for whole seconds, the same rule in fractional seconds otherwise (its
    helper draws jitter with ``randrange``)."""
    if float(base).is_integer() and float(maximum).is_integer():
        return float(get_exponential_backoff_interval(int(base), retries, int(maximum), jitter))
    delay = min(float(maximum), base * 2**retries)
    return random.uniform(0, delay) if jitter else delay


def seconds_until(task: AnyTask, when: SupportsFloat | datetime) -> float:
    """``self.retry``'s ``countdown`` (seconds) or ``eta`` (a datetime; naive in the app's
    timezone, as Celery reads it) as seconds from now, never negative."""
    if isinstance(when, datetime):
        aware: datetime = maybe_make_aware(when, task.app.timezone)
        return max(float((aware - task.app.now()).total_seconds()), 0.0)
    return max(float(when), 0.0)


def judge(
    task: AnyTask,
    exc: BaseException,
    receives: int,
    max_receives: int,
    *,
    redeliver: float | None,
) -> Verdict:
    """What becomes of a call whose body raised ``exc`` on its ``receives``-th hand-out (see
    the module docstring). ``redeliver``: the kind's delay for an exception Celery would not
    retry (None: such a call is done)."""
    if isinstance(exc, Retry):
        limit = getattr(exc, "max_retries", None)
        limit = task.max_retries if limit is None else limit
        if exc.when is not None:
            delay = seconds_until(task, exc.when)
        else:
            delay = float(task.default_retry_delay or 0)
        error: BaseException = exc.exc if exc.exc is not None else exc
        if limit is not None and receives > limit and exc.exc is None:
            error = MaxRetriesExceededError(f"Can't retry {task.name}: max_retries={limit}")
        return _within(limit, receives, max_receives, delay, error)
    dont = tuple(getattr(task, "dont_autoretry_for", ()) or ())
    if dont and isinstance(exc, dont):
        return Verdict(False, 0.0, exc)
    autoretry = tuple(getattr(task, "autoretry_for", ()) or ())
    retry_backoff = getattr(task, "retry_backoff", False)
    maximum = float(getattr(task, "retry_backoff_max", 600))
    jitter = bool(getattr(task, "retry_jitter", True))
    if autoretry and isinstance(exc, autoretry):
        kwargs = dict(getattr(task, "retry_kwargs", None) or {})
        limit = kwargs.get("max_retries", task.max_retries)
        if retry_backoff:
            factor = int(max(1.0, float(retry_backoff)))  # as celery.app.autoretry reads it
            delay = backoff(factor, receives - 1, maximum, jitter)
        else:
            countdown = kwargs.get("countdown")
            delay = float(task.default_retry_delay if countdown is None else countdown or 0)
        return _within(limit, receives, max_receives, delay, exc)
    if redeliver is None or receives >= max_receives:
        return Verdict(False, 0.0, exc)
    if retry_backoff:
        base = redeliver if retry_backoff is True else float(retry_backoff)
        redeliver = backoff(base, receives - 1, maximum, jitter)
    return Verdict(True, redeliver, exc)


def _within(
    limit: int | None, receives: int, max_receives: int, delay: float, error: BaseException
) -> Verdict:
    """A Celery retry, unless ``max_retries`` (``limit``) or the kind's ``max_receives`` ran
    out: ``receives`` is Celery's ``request.retries + 1``, which Celery compares with
    ``max_retries``; a call handed out ``max_receives`` times is never handed out again."""
    if limit is not None and receives > limit:
        return Verdict(False, 0.0, error, celery_retry=True, ran_out="max_retries")
    if receives >= max_receives:
        return Verdict(False, 0.0, error, celery_retry=True, ran_out="max_receives")
    return Verdict(True, delay, error, celery_retry=True)
