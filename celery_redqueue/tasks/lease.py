"""Celery glue for leased resources: tasks that run only while holding one of N named resources
(`LeaseTask`, `lease_task`, `leased_resources`; docs/guides/leases.md)."""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import random
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

from celery import Task

if TYPE_CHECKING:
    from celery import Celery

    from ..privates import AnyTask

from ..errors import ConfigurationError, NoFreeResourceError, RedQueueError
from ..privates import push_request_of_calls
from ..redis.keys import validate_name
from ..structures.lease_keeper import LeaseKeeper
from ..structures.leases import Lease, LeasedResources
from ..validation import boolean, count, seconds
from .config import get_config
from .decorators import decorate_task
from .options import check_option_names, check_structure_name, warn_if_task_cls_dropped

logger = logging.getLogger(__name__)

_registry_lock = threading.Lock()
#: Each app's LeasedResources and declared resources (kept here, not as an attribute on the app).
_registries: weakref.WeakKeyDictionary[Celery, _LeaseRegistry] = weakref.WeakKeyDictionary()

#: The lease task whose call holds a lease in this context (one lease per call).
_LEASING: contextvars.ContextVar[LeaseTask | None] = contextvars.ContextVar(
    "redqueue_leasing", default=None
)


@dataclass
class _LeaseRegistry:
    """Per app: resources declared for each name, and each process's LeasedResources."""

    declared: dict[str, list[str]] = field(default_factory=dict)
    opened: dict[tuple[int, str], LeasedResources] = field(default_factory=dict)


def leased_resources(
    app: Celery, name: str, resources: Iterable[str] | None = None
) -> LeasedResources:
    """The app's [`LeasedResources`][celery_redqueue.LeasedResources] called ``name``; declares
    ``resources`` for it.

    Uses the app's ``redqueue_*`` settings (URL, key prefix). Declaring does no I/O: every
    process adds the declared names (idempotently) on its first use of the structure, so calling
    this at module level next to the app is safe and workers forked later know the names too.
    Each process gets its own object; within one process, every call returns the same one.

    Example:

        devices = leased_resources(app, "phones", [f"phone-{i}" for i in range(8)])
        devices.stats()
    """
    validate_name(name, "lease_resources")
    names = list(resources or ())
    key = (os.getpid(), name)
    with _registry_lock:
        registry = _registries.get(app)
        if registry is None:
            registry = _registries[app] = _LeaseRegistry()
        structure = registry.opened.get(key)
        if structure is None:
            config = get_config(app)
            structure = LeasedResources(
                config.client(),
                name,
                registry.declared.get(name, []) + names,
                prefix=config.key_prefix,
            )
            registry.opened[key] = structure
        else:
            structure.declare(names)
        registry.declared.setdefault(name, []).extend(names)
    return structure


# Task is generic in celery-types' stubs only: not subscriptable at run time on every supported
# Celery, so its type arguments stay implicit (Any) here.
class LeaseTask(Task):  # type: ignore[type-arg]
    """Base class of tasks that hold one resource of a
    [`LeasedResources`][celery_redqueue.LeasedResources] while they run.

    Before the body runs the worker leases a free resource; ``self.resource`` names it, in that
    thread, for the call. A background thread renews the lease every ``lease_ttl / 3`` seconds
    and the lease is released when the body ends, whatever the outcome (a dead worker's runs out
    within ``lease_ttl``). With every resource leased, the call is retried with exponential
    backoff (``self.retry(countdown=...)``, counted in ``self.request.retries`` and so in the
    body's ``max_retries`` too), up to ``lease_max_retries`` times, then fails with
    [`NoFreeResourceError`][celery_redqueue.NoFreeResourceError]; called directly or in eager
    mode it raises that at once (an eager retry would spin).

    Example:

        api_keys = leased_resources(app, "api-keys", ["key-1", "key-2", "key-3"])

        @app.task(base=LeaseTask, lease_resources="api-keys", lease_ttl=30, bind=True)
        def fetch(self, url):
            return call_api(url, credentials=CREDENTIALS[self.resource])
    """

    #: Name of the LeasedResources to lease from (declare it with ``leased_resources``); defaults to
    #: the task name.
    lease_resources: str | None = None
    #: Seconds a lease lasts unless renewed: how long a crashed worker keeps its resource.
    lease_ttl: float = 60.0
    #: Renew the lease every ``lease_ttl / 3`` seconds while the body runs, so bodies may run
    #: longer than ``lease_ttl``. Without it, a body must finish within ``lease_ttl``.
    lease_renew: bool = True
    #: Seconds a worker waits (blocking on Redis, not polling) for a resource to free up before
    #: retrying the call later. 0: retry at once, never hold up the worker.
    lease_wait: float = 0.0
    #: Countdown before the first retry when no resource is free, seconds; doubles each retry.
    lease_retry_backoff: float = 1.0
    #: Longest countdown between such retries, seconds.
    lease_retry_backoff_max: float = 60.0
    #: Pick each countdown at random between half and all of it, so that many waiting calls do
    #: not come back in lockstep.
    lease_retry_jitter: bool = True
    #: Retries for want of a free resource before the call fails with NoFreeResourceError.
    lease_max_retries: int = 100

    redqueue_kind = "lease"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        check_option_names(cls)
        check_structure_name(cls, "lease_resources", cls.lease_resources)
        resolved = cls.__call__
        if resolved is not LeaseTask.__call__ and not getattr(resolved, "_redqueue_lease", False):
            # Another base's __call__ (or the class's own) would win and run the body without a
            # lease: hold the lease around it.
            inner = cls.__dict__.get("__call__")

            def __call__(self: LeaseTask, *args: object, **kwargs: object) -> object:
                call = (
                    functools.partial(inner, self)
                    if inner is not None
                    else super(cls, self).__call__
                )
                return self._leased(call, args, kwargs)

            __call__._redqueue_lease = True  # type: ignore[attr-defined]
            cls.__call__ = __call__  # type: ignore[method-assign]
        seconds("lease_ttl", cls.lease_ttl, positive=True)
        seconds("lease_wait", cls.lease_wait)
        seconds("lease_retry_backoff", cls.lease_retry_backoff, positive=True)
        seconds("lease_retry_backoff_max", cls.lease_retry_backoff_max, positive=True)
        boolean("lease_renew", cls.lease_renew)
        boolean("lease_retry_jitter", cls.lease_retry_jitter)
        count("lease_max_retries", cls.lease_max_retries)

    @classmethod
    def bind(cls, app: Celery) -> Celery:
        bound = super().bind(app)
        warn_if_task_cls_dropped(cls, app)
        return bound

    @property
    def leased_resources(self) -> LeasedResources:
        """The LeasedResources this task leases from (this process's object)."""
        return leased_resources(self.app, self.lease_resources or self.name)

    def _holdings(self) -> list[LeaseKeeper]:
        """The keepers of the leases held in this thread, innermost last."""
        local: threading.local = self.__dict__.setdefault("_redqueue_leases", threading.local())
        stack: list[LeaseKeeper] | None = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        return stack

    @property
    def lease(self) -> Lease | None:
        """The lease held by the call running in this thread (as last renewed), if any."""
        stack = self._holdings()
        return stack[-1].lease if stack else None

    @property
    def resource(self) -> str:
        """Name of the resource held by the call running in this thread."""
        lease = self.lease
        if lease is None:
            raise RedQueueError(
                f"{self.name}: no resource is leased here; .resource is only available while "
                "the task body runs"
            )
        return lease.resource

    @property
    def lease_lost(self) -> bool:
        """The running call's lease is lost (a renewal found it gone, or no renewal succeeded
        before its deadline): stop using the resource. Check it before each use; give writes
        ``self.lease.fence`` so a store can refuse a stale holder."""
        stack = self._holdings()
        return bool(stack) and stack[-1].lost

    def on_lease_lost(self, lease: Lease, reason: str) -> None:
        """Called once, from the renewing thread or at release, when the running call's lease
        is lost. Override it to stop the body's work (set an event the body checks, say); the
        default does nothing more than the warning already logged."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._leased(super().__call__, args, kwargs)

    # The body runs through Task.__call__: under the call's own request on every Celery.
    push_request = push_request_of_calls()

    def _leased(
        self, call: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        """Run ``call`` holding a lease; once per call, however many bases pass it on."""
        if _LEASING.get() is self:
            return call(*args, **kwargs)
        token = _LEASING.set(self)
        try:
            return self._hold_and_call(call, args, kwargs)
        finally:
            _LEASING.reset(token)

    def _hold_and_call(
        self, call: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        resources = self.leased_resources
        lease = resources.acquire(self.lease_ttl, wait=self.lease_wait or None)
        if lease is None:
            raise self._no_free_resource(resources)
        # Not started without lease_renew: it then only reports a loss found at release.
        keeper = LeaseKeeper(resources, lease, self.lease_ttl, on_lost=self.on_lease_lost)
        stack = self._holdings()
        stack.append(keeper)
        try:
            if self.lease_renew:
                keeper.start()
            return call(*args, **kwargs)
        finally:
            stack.pop()
            self._release(keeper)

    def _release(self, keeper: LeaseKeeper) -> None:
        # Never let a failed release hide the body's own result or exception: the lease runs
        # out by itself anyway. A release that finds the lease gone is reported by the keeper
        # (warning, on_lease_lost).
        try:
            keeper.release()
        except RedQueueError:
            logger.exception("%s: releasing %r failed", self.name, keeper.lease.resource)

    def _no_free_resource(self, resources: LeasedResources) -> BaseException:
        if len(resources) == 0:
            raise ConfigurationError(
                f"{self.name}: lease_resources {resources.name!r} has no resources; declare "
                f"them with leased_resources(app, {resources.name!r}, [...])"
            )
        exc = NoFreeResourceError(f"{self.name}: every resource of {resources.keys.base} is leased")
        request = self.request
        if request.called_directly or request.is_eager:
            return exc
        try:
            result: BaseException = self.retry(
                countdown=self.lease_retry_countdown(request.retries or 0),
                exc=exc,
                max_retries=self.lease_max_retries,
            )
        finally:
            # retry() leaves max_retries= behind on the shared task object as
            # override_max_retries, which autoretry_for would then apply to the body's own errors.
            self.__dict__.pop("override_max_retries", None)
        return result

    def lease_retry_countdown(self, retries: int) -> float:
        """Seconds before retry number ``retries + 1`` of a call that found no free resource."""
        countdown: float = min(
            self.lease_retry_backoff_max, self.lease_retry_backoff * 2 ** min(retries, 32)
        )
        if self.lease_retry_jitter:
            countdown = random.uniform(countdown / 2, countdown)
        return countdown


@overload
def lease_task(fun: Callable[..., object], /) -> AnyTask: ...


@overload
def lease_task(**options: object) -> Callable[[Callable[..., object]], AnyTask]: ...


def lease_task(
    *args: object, **options: object
) -> AnyTask | Callable[[Callable[..., object]], AnyTask]:
    """Decorator: a shared task (or ``app=``'s task) with [`LeaseTask`][celery_redqueue.LeaseTask]
    as base.

    Options are checked at once, at the decoration site.

    Example:

        @lease_task(lease_resources="api-keys", lease_ttl=30)
        def fetch(url):
            return call_api(url, credentials=CREDENTIALS[fetch.resource])
    """
    return decorate_task(LeaseTask, args, options, "lease_task")
