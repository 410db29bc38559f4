"""BucketTask's options for metered APIs (``bucket_cost``, ``bucket_cost_rate``,
``bucket_total_rate``, ``bucket_concurrency``): their checks at declaration, a call's cost at
the call site, and the cost a body reports (``self.report_cost(n)``). The structure side is
:mod:`celery_redqueue.structures.bucket_limits`; see docs/metered-apis.md."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError, RedQueueError
from ..structures.bucket_limits import Limits
from .options import check_key_parameter

#: The task option behind each Limits parameter, so errors name what the user wrote.
LIMIT_OPTION_NAMES = {
    "ordered": "bucket_ordered",
    "concurrency": "bucket_concurrency",
    "cost_rate": "bucket_cost_rate",
    "cost_burst": "bucket_cost_burst",
    "total_rate": "bucket_total_rate",
    "total_burst": "bucket_total_burst",
}


def limit_options(cls: Any) -> dict[str, Any]:
    """The LeakyBucket keyword arguments of a task's metered options."""
    return {
        "concurrency": cls.bucket_concurrency,
        "cost_rate": cls.bucket_cost_rate,
        "cost_burst": cls.bucket_cost_burst,
        "total_rate": cls.bucket_total_rate,
        "total_burst": cls.bucket_total_burst,
    }


def check_metered_options(cls: Any) -> Limits:
    """Refuse bad metered options at declaration, naming the option; returns the limits."""
    limits = Limits.build(
        ordered=cls.bucket_ordered,
        **limit_options(cls),
        names=lambda name, default: LIMIT_OPTION_NAMES.get(name, default),
    )
    cost = cls.__dict__.get("bucket_cost")
    if cost is not None:
        if not (isinstance(cost, str) or callable(cost)):
            raise ConfigurationError(
                f"bucket_cost must be a callable or an argument name, got {cost!r}"
            )
        if callable(cost) and not isinstance(cost, staticmethod):
            cls.bucket_cost = staticmethod(cost)  # a plain function would become a method
    if (cls.bucket_cost is None) != (cls.bucket_cost_rate is None):
        raise ConfigurationError(
            "bucket_cost and bucket_cost_rate go together: bucket_cost gives each call its "
            "units, bucket_cost_rate the budget of units per key"
        )
    if "run" in cls.__dict__ and isinstance(cls.bucket_cost, str):
        try:
            check_key_parameter(cls.bucket_cost, cls.__dict__["run"])
        except ConfigurationError as exc:
            raise ConfigurationError(str(exc).replace("bucket_key=", "bucket_cost=", 1)) from None
    return limits


def call_cost(task: Any, args: Any, kwargs: Any) -> float | None:
    """The cost of one call (None: the task has no bucket_cost), checked at the call site: a
    cost one period can never allow is refused, nothing stored."""
    spec = task.bucket_cost
    if spec is None:
        return None
    try:
        if isinstance(spec, str):
            cost = task._named_key(spec, args or (), kwargs or {}, bool(task.typing))
        else:
            cost = spec(*(args or ()), **(kwargs or {}))
    except Exception as exc:
        raise RedQueueError(f"{task.name}: bucket_cost failed on this call: {exc!r}") from exc
    limits: Limits = task.bucket.limits
    return limits.check_cost(cost, task.name)


def report_cost(task: Any, units: float) -> None:
    """Record the actual cost of the call running in this thread (sent with its commit)."""
    if getattr(task._local, "reservation", None) is None:
        raise RedQueueError(
            f"{task.name}: report_cost() is for the body of a stored call (inside a drain)"
        )
    task.bucket.limits.check_cost(units, f"{task.name}: report_cost", reported=True)
    task._local.reported_cost = float(units)
