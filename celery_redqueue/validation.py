"""Checks of option and argument values, shared by structures and tasks.

Every check takes the name the caller knows the value by (a structure says ``capacity``, a task
says ``pool_size``) and raises [`ConfigurationError`][celery_redqueue.ConfigurationError] naming it
(a call's argument: [`InvalidArgumentError`][celery_redqueue.InvalidArgumentError]).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeGuard

from .errors import ConfigurationError, InvalidArgumentError

#: Longest ``countdown``/``eta`` a call may ask for, seconds (365 days). A delayed call waits in
#: Redis and its wake-up drain job in the broker; beyond a year is almost surely a unit mistake
#: (ms for s), and far beyond it the broker's own date arithmetic overflows.
MAX_DELAY = 365 * 24 * 3600.0


def _is_number(value: object) -> TypeGuard[int | float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def seconds(name: str, value: object, *, positive: bool = False) -> float:
    """A duration: finite seconds, >= 0 (or > 0 when ``positive``)."""
    if not _is_number(value) or value < 0 or (positive and value == 0):
        what = "positive seconds" if positive else "seconds >= 0"
        raise ConfigurationError(f"{name} must be {what}, got {value!r}")
    return float(value)


def delay(name: str, value: object) -> float:
    """A call's delay in seconds (``countdown``, or ``eta`` minus now), clamped at 0.

    A moment in the past means "now" (an eta that just passed, a small negative countdown), but
    not one more than `MAX_DELAY` ago; NaN, infinities and delays beyond
    `MAX_DELAY` are refused with [`InvalidArgumentError`][celery_redqueue.InvalidArgumentError]
    before anything is stored.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{name} must be seconds, got {value!r}")
    if not math.isfinite(value) or abs(value) > MAX_DELAY:
        raise InvalidArgumentError(
            f"{name} must be finite seconds within {MAX_DELAY:.0f} (365 days) of now, got {value!r}"
        )
    return max(float(value), 0.0)


def optional_seconds(name: str, value: object) -> float | None:
    """Positive seconds, or None (the feature is off)."""
    if value is None:
        return None
    if not _is_number(value) or value <= 0:
        raise ConfigurationError(f"{name} must be positive seconds or None, got {value!r}")
    return float(value)


def positive_int(name: str, value: object, *, optional: bool = False) -> int | None:
    """A count: an integer >= 1 (or None when ``optional``)."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        extra = " or None" if optional else ""
        raise ConfigurationError(f"{name} must be a positive integer{extra}, got {value!r}")
    return value


def count(name: str, value: object) -> int:
    """A count that may be zero: an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def boolean(name: str, value: object) -> bool:
    """True or False, nothing truthy."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r}")
    return value


def one_of(name: str, value: object, choices: Iterable[str]) -> str:
    """One of a fixed set of words."""
    allowed = tuple(choices)
    if value not in allowed:
        raise ConfigurationError(f"{name} must be one of {allowed}, got {value!r}")
    return str(value)


def function_option(cls: type, name: str) -> None:
    """A function given as a class option is checked, and kept from becoming a bound method."""
    value = cls.__dict__.get(name)
    if value is None or isinstance(value, staticmethod):
        return
    if not callable(value):
        raise ConfigurationError(f"{name} must be a callable, got {value!r}")
    setattr(cls, name, staticmethod(value))
