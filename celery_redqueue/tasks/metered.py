"""BucketTask's options for metered APIs (``bucket_cost``, ``bucket_cost_rate``,
``bucket_total_rate``, ``bucket_concurrency``): their checks at declaration, a call's cost at
the call site, and the cost a body reports (``self.report_cost(n)``). The structure side is
`celery_redqueue.structures.bucket`; see docs/metered-apis.md."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigurationError, KeyBackoff, RedQueueError
from ..structures.bucket_types import LimitOptions, Limits
from .options import check_key_parameter, function_or_name

if TYPE_CHECKING:
    from ..structures.bucket import LeakyBucket
    from ..structures.bucket_types import Reservation

logger = logging.getLogger("celery_redqueue.tasks.bucket")

#: The task option behind each Limits parameter, so errors name what the user wrote.
LIMIT_OPTION_NAMES = {
    "ordered": "bucket_ordered",
    "concurrency": "bucket_concurrency",
    "cost_rate": "bucket_cost_rate",
    "cost_burst": "bucket_cost_burst",
    "total_rate": "bucket_total_rate",
    "total_burst": "bucket_total_burst",
    "margin": "bucket_margin",
    "priority_bound": "bucket_priority_bound",
}


class MeteredOptions:
    """BucketTask's options for metered APIs (a base of BucketTask; see docs/metered-apis.md)."""

    #: A call's cost in units (tokens, points): the name of one of the body's arguments, or a
    #: callable on the call's arguments. Needs bucket_cost_rate.
    bucket_cost: Callable[..., float] | str | None = None
    #: Units per key per period ("90000/m"), metered beside bucket_rate: a call goes only when
    #: both allow it. A call costing more than one period allows is refused at the call site.
    bucket_cost_rate: str | float | None = None
    #: Units a key may release at once beyond its schedule after a pause (the GCRA burst
    #: allowance: its cost schedule may lag ``now`` by this many units' time).
    bucket_cost_burst: float = 0
    #: Calls per period over all keys together ("1000/s"), each key still fair below it; a
    #: sharded bucket splits it evenly between its shards.
    bucket_total_rate: str | float | None = None
    #: Calls over all keys beyond the total rate after a pause.
    bucket_total_burst: float = 0
    #: Most calls of one key in flight at once across all workers (reservations count; a dead
    #: worker's frees its slot when reaped). bucket_ordered is 1 with order. A drain job runs
    #: one body at a time, so bucket_drain_concurrency follows it unless set (and is refused
    #: when set lower: one key could never reach it).
    bucket_concurrency: int | None = None
    #: Seconds by which the delays between a release and its arrival at the upstream may differ
    #: (worker pick-up, the network): every rate of the bucket (bucket_rate, bucket_cost_rate,
    #: bucket_total_rate, set_rate) is spaced over its period plus this, so that the upstream
    #: sees at most the rate in every sliding window of its period. 0: releases are exact.
    bucket_margin: float = 0.0
    #: Priority tiers (seconds, None: off): a call's ``apply_async(priority=0..9)`` is its tier,
    #: higher first within its key and across keys (each key still at its own limits), and a
    #: call of a lower tier waits at most this long beside higher ones before it goes first.
    #: Off, ``priority=`` is the drain job's broker priority, as for any redqueue task.
    bucket_priority_bound: float | None = None

    if TYPE_CHECKING:  # provided by BucketTask
        name: str
        typing: bool
        bucket: LeakyBucket
        bucket_ordered: bool
        bucket_drain_concurrency: int

        @property
        def _local(self) -> threading.local: ...

        def _named_key(
            self,
            name: str,
            args: Sequence[object],
            kwargs: Mapping[str, object],
            checked: bool,
        ) -> object: ...

    def report_cost(self, units: float) -> None:
        """Inside the body: the call's actual cost (tokens used, known only from the response);
        its key's budget is corrected by the difference from the estimate at its commit."""
        if getattr(self._local, "reservation", None) is None:
            raise RedQueueError(
                f"{self.name}: report_cost() is for the body of a stored call (inside a drain)"
            )
        self.bucket.limits.check_cost(units, f"{self.name}: report_cost", reported=True)
        self._local.reported_cost = float(units)

    def _call_cost(
        self, args: Sequence[object] | None, kwargs: Mapping[str, object] | None
    ) -> float | None:
        """The cost of one call (None: the task has no bucket_cost), checked at the call site:
        a cost one period can never allow is refused, nothing stored."""
        spec = self.bucket_cost
        if spec is None:
            return None
        try:
            if isinstance(spec, str):
                cost = self._named_key(spec, args or (), kwargs or {}, bool(self.typing))
            else:
                cost = spec(*(args or ()), **(kwargs or {}))
        except Exception as exc:
            raise RedQueueError(f"{self.name}: bucket_cost failed on this call: {exc!r}") from exc
        limits: Limits = self.bucket.limits
        return limits.check_cost(cost, self.name)

    def _back_off(self, reservation: Reservation, exc: KeyBackoff) -> None:
        """The body raised KeyBackoff: pause its key and put the call back (not a failure)."""
        cost = exc.cost if exc.cost is not None else self._local.reported_cost
        logger.info("%s: key %r backs off for %.1fs", self.name, reservation.key, exc.seconds)
        self.bucket.backoff(reservation, exc.seconds, cost=cost)


def limit_options(cls: MeteredOptions | type[MeteredOptions]) -> LimitOptions:
    """The LeakyBucket keyword arguments of a task's metered options."""
    return {
        "concurrency": cls.bucket_concurrency,
        "cost_rate": cls.bucket_cost_rate,
        "cost_burst": cls.bucket_cost_burst,
        "total_rate": cls.bucket_total_rate,
        "total_burst": cls.bucket_total_burst,
        "margin": cls.bucket_margin,
        "priority_bound": cls.bucket_priority_bound,
    }


#: Set on a task class whose bucket_drain_concurrency was set here, from bucket_concurrency.
_FOLLOWS = "_redqueue_drains_follow_concurrency"


def drains_follow_concurrency(cls: type[MeteredOptions]) -> None:
    """``bucket_concurrency=N`` needs N drain jobs for one key to reach N (each runs one body at
    a time): ``bucket_drain_concurrency`` left at its default follows it; set lower, the pair is
    refused, naming the fix. A class that inherits a value set here follows again."""
    wanted = cls.bucket_concurrency
    if not wanted or wanted <= 1:
        return
    owner = next(k for k in cls.__mro__ if "bucket_drain_concurrency" in k.__dict__)
    explicit = "redqueue_kind" not in owner.__dict__ and not owner.__dict__.get(_FOLLOWS)
    if not explicit:
        cls.bucket_drain_concurrency = wanted
        setattr(cls, _FOLLOWS, True)
    elif cls.bucket_drain_concurrency < wanted:
        raise ConfigurationError(
            f"bucket_concurrency={wanted} with bucket_drain_concurrency="
            f"{cls.bucket_drain_concurrency}: a drain job runs one body at a time, so one key "
            f"would never have more than {cls.bucket_drain_concurrency} in flight; set "
            f"bucket_drain_concurrency to at least {wanted}, or leave it unset (it then "
            "follows bucket_concurrency)"
        )


def check_metered_options(cls: type[MeteredOptions]) -> Limits:
    """Refuse bad metered options at declaration, naming the option; returns the limits."""
    limits = Limits.build(
        ordered=cls.bucket_ordered,
        **limit_options(cls),
        names=lambda name, default: LIMIT_OPTION_NAMES.get(name, default),
    )
    drains_follow_concurrency(cls)
    function_or_name(cls, "bucket_cost")
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
