"""Celery glue: task base classes whose calls go into Redis structures, and their decorators.

A pooled task's ``delay()`` stores the call in a :class:`~celery_redqueue.pool.CappedPool`;
the broker only carries argument-less drain jobs of the same task name, marked by a message
header. The worker runs a drain job by popping the pool and calling the body for each call.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Retry, SoftTimeLimitExceeded
from celery.utils.time import get_exponential_backoff_interval, maybe_make_aware

from .bucket import EnqueueResult, LeakyBucket, Reservation, validate_bucket_options
from .config import get_config
from .drain import DRAIN_HEADER, REAPER_TASK, DrainSummary, register_beat
from .errors import ConfigurationError, RedQueueError, SerializationError, check_seconds
from .pool import ADD_CHUNK, DELIVERIES, AddResult, CappedPool, PoolBatch, validate_pool_options

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolCall:
    """One call handed to a ``pool_batch`` body: arguments and how many calls it merges."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    count: int = 1


#: Seconds between looks at an empty pool while a drain lingers.
LINGER_POLL = 0.02


def _error_text(exc: BaseException) -> str:
    """What a dead letter keeps of a failure."""
    return f"{type(exc).__name__}: {exc}"


def _staticmethod_option(cls: type, name: str) -> None:
    """A function given as a class option must not become a bound method."""
    value = cls.__dict__.get(name)
    if value is None or isinstance(value, staticmethod):
        return
    if not callable(value):
        raise ConfigurationError(f"{name} must be a callable, got {value!r}")
    setattr(cls, name, staticmethod(value))


def _non_negative(cls: type, name: str) -> None:
    check_seconds(name, getattr(cls, name))


def _positive(cls: type, name: str, *, integer: bool = False, optional: bool = False) -> None:
    value: Any = getattr(cls, name)
    if optional and value is None:
        return
    wrong_type = not isinstance(value, int | float) or (integer and not isinstance(value, int))
    if isinstance(value, bool) or wrong_type or value <= 0:
        what = "a positive integer" if integer else "positive seconds"
        raise ConfigurationError(
            f"{name} must be {what}{' or None' if optional else ''}, got {value!r}"
        )


class RedQueueTask(Task):  # type: ignore[misc]
    """Shared plumbing of tasks backed by a redqueue structure."""

    @classmethod
    def bind(cls, app: Any) -> Any:
        bound = super().bind(app)
        if cls.name and cls.name != REAPER_TASK:
            config = get_config(app)
            if config.beat:
                register_beat(app, "redqueue: reap", config.reaper_interval, REAPER_TASK, {})
                cls._register_schedules(app)
        return bound

    @classmethod
    def _register_schedules(cls, app: Any) -> None:
        """Subclasses add their own beat entries."""

    def send_drain(self, **options: Any) -> Any:
        """Send one argument-less drain job for this task to the broker.

        It goes through ``send_task`` with the task's own routing options: the task's signature
        check would refuse a call without the body's arguments.
        """
        options = dict(self._get_exec_options(), **options)
        options.setdefault("ignore_result", self.ignore_result)
        options["headers"] = dict(options.get("headers") or {}, **{DRAIN_HEADER: 1})
        return self.app.send_task(self.name, (), {}, task_type=self, **options)

    def check_call(self, args: Any, kwargs: Any) -> None:
        """Refuse, at the call site, arguments the body cannot take (Celery's own check)."""
        if self.typing:
            self.__header__(*(args or ()), **(kwargs or {}))

    def _is_drain_request(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return not args and not kwargs and bool(getattr(self.request, DRAIN_HEADER, None))

    def reap(self) -> int:
        """Return expired reservations of this task's structure; returns how many."""
        raise NotImplementedError

    def _unpack(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        if (
            not isinstance(payload, list | tuple)
            or len(payload) != 2
            or not isinstance(payload[0], list | tuple)
            or not isinstance(payload[1], dict)
        ):
            raise SerializationError(
                f"{self.name}: stored call has an unexpected shape: {payload!r}"
            )
        return list(payload[0]), dict(payload[1])

    # Producing: a call goes into the structure, never to the broker.

    #: The option naming a key function for producer-side dedupe (set by subclasses).
    dedupe_option = ""

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: str | None = None,
        **options: Any,
    ) -> Any:
        """Store the call in the task's structure; returns its receipt, not an AsyncResult.

        Drain jobs (marked by their header, e.g. sent by beat) go to the broker as usual.
        In eager mode the body runs at once on the arguments as a worker would see them.
        """
        if (options.get("headers") or {}).get(DRAIN_HEADER):
            return self.send_drain(producer=producer, **options)
        prepared = self._prepare_call(args, kwargs)
        delay = self._delay_of(options)
        dedupe_id = self._dedupe_id(getattr(self, self.dedupe_option), args, kwargs, options)
        if self.app.conf.task_always_eager:
            return self._run_eagerly(prepared, task_id=task_id, link=link, link_error=link_error)
        result = self._store(prepared, delay, dedupe_id)
        self._after_add(result.drain_needed, result.wake_in)
        return result

    def _prepare_call(self, args: Any, kwargs: Any) -> Any:
        """Check and serialize one call (subclasses)."""
        raise NotImplementedError

    def _store(self, prepared: Any, delay: float, dedupe_id: str | None) -> Any:
        """Put one prepared call into the structure; returns the receipt (subclasses)."""
        raise NotImplementedError

    def _run_eagerly(self, prepared: Any, **options: Any) -> Any:
        """Run the body now, on the call as a worker would see it (after the serializer)."""
        encoded = prepared[1] if isinstance(prepared, tuple) else prepared
        stored_args, stored_kwargs = self.structure.serializer.loads(encoded)
        return self.apply(stored_args, stored_kwargs, **options)

    def requeue_dead(self, letters: Any = None, limit: int = -1) -> int:
        """Put dead letters back in the structure and make sure a drain job runs."""
        count: int = self.structure.requeue_dead(letters, limit)
        if count:
            self.send_drain()
        return count

    @property
    def structure(self) -> Any:
        """The Redis structure behind this task (subclasses)."""
        raise NotImplementedError

    def _delay_of(self, options: dict[str, Any]) -> float:
        """Seconds to hold a call before it enters its structure (``countdown=`` or ``eta=``)."""
        countdown, eta = options.get("countdown"), options.get("eta")
        if countdown is not None and eta is not None:
            raise RedQueueError(f"{self.name}: pass countdown= or eta=, not both")
        if countdown is not None:
            if isinstance(countdown, bool) or not isinstance(countdown, int | float):
                raise RedQueueError(f"{self.name}: countdown must be seconds, got {countdown!r}")
            return max(float(countdown), 0.0)
        if eta is not None:
            if isinstance(eta, str):
                eta = datetime.fromisoformat(eta)
            if not isinstance(eta, datetime):
                raise RedQueueError(f"{self.name}: eta must be a datetime, got {eta!r}")
            now = self.app.now()
            eta = maybe_make_aware(eta, now.tzinfo)
            return max(float((eta - now).total_seconds()), 0.0)
        return 0.0

    def _dedupe_id(
        self, key_function: Any, args: Any, kwargs: Any, options: dict[str, Any]
    ) -> str | None:
        """The call's dedupe id: ``dedupe_id=`` given to apply_async, else the key function's."""
        dedupe_id = options.get("dedupe_id")
        if dedupe_id is None and key_function is not None:
            try:
                dedupe_id = key_function(*(args or ()), **(kwargs or {}))
            except Exception as exc:
                raise RedQueueError(
                    f"{self.name}: dedupe key failed on this call: {exc!r}"
                ) from exc
        if dedupe_id is not None and (not isinstance(dedupe_id, str) or not dedupe_id):
            raise RedQueueError(
                f"{self.name}: a dedupe id must be a non-empty string, got {dedupe_id!r}"
            )
        return dedupe_id

    def _after_add(self, drain_needed: bool, wake_in: float | None) -> None:
        """Send the drain job an add asked for: now, or when its delayed call is due."""
        if drain_needed:
            self.send_drain()
        if wake_in is not None:
            self.send_drain(countdown=wake_in)

    def _per_process(self, attr: str, build: Callable[[], Any]) -> Any:
        """Build a structure once per process: a prefork child must not reuse the parent's."""
        cached: tuple[int, Any] | None = self.__dict__.get(attr)
        if cached is None or cached[0] != os.getpid():
            cached = (os.getpid(), build())
            self.__dict__[attr] = cached
        return cached[1]

    def _body(self) -> Callable[..., Any]:
        """The body without Celery's autoretry wrapper: redqueue applies retry options itself."""
        body: Callable[..., Any] = getattr(self, "_orig_run", None) or self.run
        return body


class PoolTask(RedQueueTask):
    """Base class of pooled tasks: calls are stored in a capped pool and drained in batches.

    Example::

        @app.task(base=PoolTask, pool_size=10_000, pool_policy="sample")
        def record(event):
            ...

        record.delay({"user": 7})   # -> AddResult(kept=True, ...), not an AsyncResult
    """

    #: Most distinct entries the pool holds; what does not fit is dropped and counted.
    pool_size: int = 10_000
    #: What a full pool does with a new call: "sample", "newest" or "reject".
    pool_policy: str = "sample"
    #: Entries popped per atomic step of a drain.
    pool_batch_size: int = 100
    #: Merge equal calls into one entry with a count, passed to the body as ``count=``.
    pool_coalesce: bool = False
    #: Name of the keyword argument that carries the count of a coalesced call.
    pool_count_kwarg: str = "count"
    #: Call the body once per popped batch with a list of :class:`PoolCall`.
    pool_batch: bool = False
    #: Seconds between beat-run drains (a safety net; calls also send drains). None: no beat.
    pool_drain_interval: float | None = 60.0
    #: Most drain jobs working on this pool at once; a deep pool fans out up to this many.
    pool_drain_concurrency: int = 1
    #: Seconds one drain job works before handing over to a fresh drain job.
    pool_drain_time_budget: float = 10.0
    #: Seconds a drain job keeps looking at an empty pool before it ends. During a burst the
    #: pool empties and refills constantly; lingering keeps the one drain job working instead
    #: of ending and having the next call send a new one.
    pool_drain_linger: float = 0.2
    #: Seconds a popped batch may take before the reaper counts it as lost.
    pool_batch_timeout: float = 300.0
    #: "at_most_once" (default: a batch whose worker dies is counted as lost) or
    #: "at_least_once" (it comes back; failed calls are retried; past pool_max_receives they
    #: go to the dead-letter list).
    pool_delivery: str = "at_most_once"
    #: Receives before an at-least-once call is dead-lettered.
    pool_max_receives: int = 5
    dedupe_option = "pool_dedupe_key"
    #: Producer-side deduplication: a callable on the call's arguments returning an id; a call
    #: whose id was seen within pool_dedupe_window seconds is refused. ``apply_async(...,
    #: dedupe_id=...)`` gives an id explicitly.
    pool_dedupe_key: Callable[..., str] | None = None
    #: Seconds a dedupe id is remembered.
    pool_dedupe_window: float = 300.0
    #: Consumer-side guard (seconds, 0: off): an entry whose body completed is recorded with
    #: its acknowledgement, and a redelivered copy is skipped rather than applied twice.
    pool_processed_guard: float = 0.0
    #: Pool name; defaults to the task name.
    pool_name: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        validate_pool_options(
            capacity=cls.pool_size, policy=cls.pool_policy, max_drains=cls.pool_drain_concurrency
        )
        _positive(cls, "pool_batch_size", integer=True)
        _positive(cls, "pool_drain_interval", optional=True)
        _positive(cls, "pool_drain_time_budget")
        _positive(cls, "pool_batch_timeout")
        _positive(cls, "pool_dedupe_window")
        _non_negative(cls, "pool_drain_linger")
        _staticmethod_option(cls, "pool_dedupe_key")
        if cls.pool_delivery not in DELIVERIES:
            raise ConfigurationError(
                f"pool_delivery must be one of {DELIVERIES}, got {cls.pool_delivery!r}"
            )
        _positive(cls, "pool_max_receives", integer=True)
        _non_negative(cls, "pool_processed_guard")
        if cls.pool_coalesce and cls.pool_processed_guard:
            raise ConfigurationError(
                "pool_processed_guard is not available with pool_coalesce: equal calls merge "
                "into one entry, so an entry has no identity of its own to remember"
            )
        if not isinstance(cls.pool_count_kwarg, str) or not cls.pool_count_kwarg.isidentifier():
            raise ConfigurationError(
                f"pool_count_kwarg must be an identifier, got {cls.pool_count_kwarg!r}"
            )

    @classmethod
    def _register_schedules(cls, app: Any) -> None:
        if cls.pool_drain_interval:
            register_beat(
                app,
                f"redqueue: drain {cls.name}",
                cls.pool_drain_interval,
                cls.name,
                {DRAIN_HEADER: 1},
            )

    @property
    def pool(self) -> CappedPool:
        """This task's pool (stats, pop, clear), built once per process."""
        pool: CappedPool = self._per_process("_redqueue_pool", self._make_pool)
        return pool

    @property
    def structure(self) -> CappedPool:
        """The Redis structure behind this task (what the reaper and figures look at)."""
        return self.pool

    def _make_pool(self) -> CappedPool:
        config = get_config(self.app)
        return CappedPool(
            config.client(),
            self.pool_name or self.name,
            self.pool_size,
            policy=self.pool_policy,
            coalesce=self.pool_coalesce,
            prefix=config.key_prefix,
            serializer=config.serializer,
            batch_timeout=self.pool_batch_timeout,
            max_drains=self.pool_drain_concurrency,
            delivery=self.pool_delivery,
            max_receives=self.pool_max_receives,
            dedupe_window=self.pool_dedupe_window,
            processed_guard=self.pool_processed_guard,
        )

    # Producing

    def _store(self, prepared: Any, delay: float, dedupe_id: str | None) -> AddResult:
        result: AddResult = self.pool._add_encoded([prepared], delay=delay, dedupe_ids=[dedupe_id])[
            0
        ]
        return result

    def add_many(self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        """Offer many ``(args, kwargs)`` calls in one round trip per thousand; sends one drain.

        Every call is checked as ``delay()`` checks it before any is stored. In eager mode the
        body runs for each call and the results are Celery's EagerResults.
        """
        encoded = [self._prepare_call(a, k) for a, k in calls]
        if self.app.conf.task_always_eager:
            return [self._run_eagerly(e) for e in encoded]
        results: list[AddResult] = []
        for start in range(0, len(encoded), ADD_CHUNK):
            results.extend(self.pool._add_encoded(encoded[start : start + ADD_CHUNK]))
        self._after_add(any(r.drain_needed for r in results), None)
        return results

    def _prepare_call(self, args: Any, kwargs: Any) -> bytes:
        """Check a call as the body will take it, and serialize it; raises, storing nothing."""
        if not self.pool_batch:
            # A batch body takes the list of calls, so its signature says nothing of one call.
            self.check_call(args, kwargs)
        call_kwargs = dict(kwargs or {})
        if self.pool_coalesce and self.pool_count_kwarg in call_kwargs:
            raise RedQueueError(
                f"{self.name} coalesces calls and passes {self.pool_count_kwarg}= itself; "
                "do not pass it when calling"
            )
        return self.pool.encode([list(args or ()), call_kwargs])

    # Consuming

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_drain_request(args, kwargs):
            return self.drain().as_dict()
        if self.pool_batch:
            return super().__call__([PoolCall(tuple(args), dict(kwargs), 1)])
        return super().__call__(*args, **kwargs)

    def drain(self) -> DrainSummary:
        """Pop and run batches until the pool is empty or the time budget is spent."""
        pool = self.pool
        deadline = time.monotonic() + self.pool_drain_time_budget
        processed = failed = batches = 0
        last_work = -math.inf  # a drain that starts on an empty pool ends at once
        while True:
            linger = time.monotonic() - last_work < self.pool_drain_linger
            batch = pool.pop(self.pool_batch_size, linger=linger)
            if batch.fan_out:
                self.send_drain()
            if batch.pop_again:
                continue
            if batch.lingering:
                time.sleep(LINGER_POLL)
                continue
            if not batch:
                if batch.wait is not None:
                    # Only delayed calls remain: come back when the first is due.
                    self.send_drain(countdown=batch.wait)
                    return DrainSummary(processed, failed, batches, continued=True)
                return DrainSummary(processed, failed, batches)
            started = time.monotonic()
            failures = self._run_batch(batch)
            last_work = time.monotonic()  # linger is counted from when the work ended
            if not pool.ack(batch, failures=failures, seconds=last_work - started):
                logger.warning(
                    "%s: batch %s finished after its deadline; the reaper had taken it back",
                    self.name,
                    batch.id,
                )
            batches += 1
            batch_failed = sum(batch.items[i].count for i in failures) + sum(
                c for _, c, _ in batch.undecodable
            )
            failed += batch_failed
            processed += batch.calls - batch_failed
            if time.monotonic() >= deadline:
                # Hand over to a fresh job so one pool cannot hold a worker forever.
                self.send_drain()
                return DrainSummary(processed, failed, batches, continued=True)

    def _run_batch(self, batch: PoolBatch) -> dict[int, str]:
        """Run the body over a batch; returns the failures by position (each is logged)."""
        if self.pool_batch:
            try:
                calls = [
                    PoolCall(tuple(a), k, item.count)
                    for item in batch.items
                    for a, k in [self._unpack(item.payload)]
                ]
                self._body()(calls)
            except SoftTimeLimitExceeded:
                self.pool.ack(batch, failures=dict.fromkeys(range(len(batch.items)), "time limit"))
                self.send_drain()  # this job ends here; the rest of the pool needs one
                raise
            except Exception as exc:
                logger.exception("%s: batch of %d calls failed", self.name, len(batch.items))
                return dict.fromkeys(range(len(batch.items)), _error_text(exc))
            return {}
        failures: dict[int, str] = {}
        for index, item in enumerate(batch.items):
            try:
                call_args, call_kwargs = self._unpack(item.payload)
                if self.pool_coalesce:
                    call_kwargs[self.pool_count_kwarg] = item.count
                self._body()(*call_args, **call_kwargs)
            except SoftTimeLimitExceeded:
                failures.update(dict.fromkeys(range(index, len(batch.items)), "time limit"))
                self.pool.ack(batch, failures=failures)
                self.send_drain()  # this job ends here; the rest of the pool needs one
                raise
            except Exception as exc:
                logger.exception("%s: pooled call %r failed", self.name, item.payload)
                failures[index] = _error_text(exc)
        return failures

    def reap(self) -> int:
        result = self.pool.reap()
        if result.drain_needed:
            self.send_drain()
        return result.lost + result.returned + result.dead_lettered


class BucketTask(RedQueueTask):
    """Base class of rate-limited tasks: calls queue per key and are released at each key's rate.

    Example::

        @app.task(base=BucketTask, bucket_key=lambda url: urlsplit(url).hostname,
                  bucket_rate="2/s")
        def fetch(url):
            ...

        fetch.bucket.set_rate("example.com", "10/s")   # seen by every worker
        fetch.delay("https://example.com/")            # -> EnqueueResult, not an AsyncResult
    """

    #: The key of a call: a callable taking the call's arguments and returning a string, or
    #: the name of one of the body's arguments.
    bucket_key: Callable[..., str] | str | None = None
    #: Rate of keys with no rate of their own: "10/s", "100/m", "5/h", "0.5/s".
    bucket_rate: str | float = "1/s"
    #: Items a key may release beyond its rate after a pause (GCRA burst allowance).
    bucket_burst: float = 0
    #: Seconds a released item stays reserved before the reaper takes it back.
    bucket_reservation_timeout: float = 300.0
    #: Receives (first delivery, retries and redeliveries) before an item is dead-lettered.
    bucket_max_receives: int = 5
    #: At most one item in flight per key, so each key's items complete in order.
    bucket_ordered: bool = False
    #: Most items queued per key; None: unbounded.
    bucket_max_depth: int | None = None
    #: What a full key does with a new item: "reject" it or "drop_oldest".
    bucket_overflow: str = "reject"
    #: Seconds between beat-run drains (a safety net). None: no beat entry.
    bucket_drain_interval: float | None = 30.0
    #: Most drain jobs releasing this bucket's items at once.
    bucket_drain_concurrency: int = 1
    #: Seconds one drain job works before handing over to a fresh one.
    bucket_drain_time_budget: float = 10.0
    dedupe_option = "bucket_dedupe_key"
    #: Producer-side deduplication: a callable on the call's arguments returning an id; a call
    #: whose id was seen within bucket_dedupe_window seconds is refused. ``apply_async(...,
    #: dedupe_id=...)`` gives an id explicitly.
    bucket_dedupe_key: Callable[..., str] | None = None
    #: Seconds a dedupe id is remembered.
    bucket_dedupe_window: float = 300.0
    #: Consumer-side guard (seconds, 0: off): an item whose body completed is recorded with
    #: its commit, and a redelivered copy is skipped rather than applied twice.
    bucket_processed_guard: float = 0.0
    #: Bucket name; defaults to the task name.
    bucket_name: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        validate_bucket_options(
            rate=cls.bucket_rate,
            burst=cls.bucket_burst,
            reservation_timeout=cls.bucket_reservation_timeout,
            max_receives=cls.bucket_max_receives,
            max_depth=cls.bucket_max_depth,
            overflow=cls.bucket_overflow,
            max_drains=cls.bucket_drain_concurrency,
        )
        _positive(cls, "bucket_drain_interval", optional=True)
        _positive(cls, "bucket_drain_time_budget")
        _positive(cls, "bucket_dedupe_window")
        _staticmethod_option(cls, "bucket_dedupe_key")
        _non_negative(cls, "bucket_processed_guard")
        key = cls.__dict__.get("bucket_key")
        if key is not None:
            if not (isinstance(key, str) or callable(key)):
                raise ConfigurationError(
                    f"bucket_key must be a callable or an argument name, got {key!r}"
                )
            if callable(key) and not isinstance(key, staticmethod):
                # A plain function stored on the class would become a bound method.
                cls.bucket_key = staticmethod(key)
        if "run" in cls.__dict__ and cls.bucket_key is None:
            raise ConfigurationError(f"bucket_key is required for bucket task {cls.__name__}")

    @classmethod
    def _register_schedules(cls, app: Any) -> None:
        if cls.bucket_drain_interval:
            register_beat(
                app,
                f"redqueue: drain {cls.name}",
                cls.bucket_drain_interval,
                cls.name,
                {DRAIN_HEADER: 1},
            )

    @property
    def _local(self) -> threading.local:
        local: threading.local = self._per_process("_redqueue_local", threading.local)
        return local

    @property
    def reservation(self) -> Reservation | None:
        """The reservation whose body is running in this thread (key, receives, released_at),
        or None outside a drain (a direct or eager call)."""
        return getattr(self._local, "reservation", None)

    @property
    def bucket(self) -> LeakyBucket:
        """This task's bucket (rates, stats, dead letters), built once per process."""
        bucket: LeakyBucket = self._per_process("_redqueue_bucket", self._make_bucket)
        return bucket

    @property
    def structure(self) -> LeakyBucket:
        """The Redis structure behind this task (what the reaper and figures look at)."""
        return self.bucket

    def _make_bucket(self) -> LeakyBucket:
        config = get_config(self.app)
        return LeakyBucket(
            config.client(),
            self.bucket_name or self.name,
            default_rate=self.bucket_rate,
            default_burst=self.bucket_burst,
            ordered=self.bucket_ordered,
            reservation_timeout=self.bucket_reservation_timeout,
            max_receives=self.bucket_max_receives,
            max_depth=self.bucket_max_depth,
            overflow=self.bucket_overflow,
            prefix=config.key_prefix,
            serializer=config.serializer,
            max_drains=self.bucket_drain_concurrency,
            dedupe_window=self.bucket_dedupe_window,
            processed_guard=self.bucket_processed_guard,
        )

    def key_for(self, args: Any, kwargs: Any) -> str:
        """The bucket key of a call; a key function that fails is an error at the call site."""
        key_spec = self.bucket_key
        try:
            if isinstance(key_spec, str):
                bound = inspect.signature(self._body()).bind(*(args or ()), **(kwargs or {}))
                bound.apply_defaults()
                key = bound.arguments[key_spec]
                if isinstance(key, int) and not isinstance(key, bool):
                    key = str(key)  # an argument named as the key may be a numeric id
            else:
                assert key_spec is not None
                key = key_spec(*(args or ()), **(kwargs or {}))
        except Exception as exc:
            raise RedQueueError(f"{self.name}: bucket_key failed on this call: {exc!r}") from exc
        if not isinstance(key, str) or not key or "\0" in key:
            raise RedQueueError(
                f"{self.name}: bucket_key must return a non-empty string, got {key!r}"
            )
        return key

    # Producing

    def _prepare_call(self, args: Any, kwargs: Any) -> tuple[str, bytes]:
        """Check a call, compute its key and serialize it; raises, storing nothing."""
        self.check_call(args, kwargs)
        key = self.key_for(args, kwargs)
        return key, self.bucket.encode([list(args or ()), dict(kwargs or {})])

    def _store(self, prepared: Any, delay: float, dedupe_id: str | None) -> EnqueueResult:
        result: EnqueueResult = self.bucket._enqueue_encoded(
            [prepared], delay=delay, dedupe_ids=[dedupe_id]
        )[0]
        return result

    # Consuming

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._is_drain_request(args, kwargs):
            return self.drain().as_dict()
        return super().__call__(*args, **kwargs)

    def drain(self) -> DrainSummary:
        """Release eligible items until none is, or the time budget is spent.

        When items remain but no key may release yet, the job schedules itself (countdown) for
        the moment the next key becomes eligible: no busy loop, no worker blocked waiting.
        """
        bucket = self.bucket
        deadline = time.monotonic() + self.bucket_drain_time_budget
        processed = failed = 0
        while True:
            poll = bucket.poll()
            reservation = poll.reservation
            if reservation is None:
                if poll.wait is not None:
                    self.send_drain(countdown=poll.wait)
                    return DrainSummary(processed, failed, continued=True)
                return DrainSummary(processed, failed)
            if reservation.fan_out:
                self.send_drain()
            if self._run_reservation(reservation):
                processed += 1
            else:
                failed += 1
            if time.monotonic() >= deadline:
                self.send_drain()
                return DrainSummary(processed, failed, continued=True)

    def _run_reservation(self, reservation: Reservation) -> bool:
        """Run the body on one item; commit, retry later (release) or dead-letter it."""
        bucket = self.bucket
        self._local.reservation = reservation
        started = time.monotonic()
        try:
            call_args, call_kwargs = self._unpack(reservation.payload)
            self._body()(*call_args, **call_kwargs)
        except Retry as exc:
            # self.retry() inside the body: the drain's request knows nothing of this item's
            # retries, so the item's own receive count decides.
            if self._retries_left(reservation.receives):
                delay = exc.when if isinstance(exc.when, int | float) else self.default_retry_delay
                bucket.release(reservation, delay=float(delay or 0))
            else:
                bucket.dead_letter(
                    reservation, _error_text(exc.exc if exc.exc is not None else exc)
                )
            return False
        except SoftTimeLimitExceeded:
            bucket.release(reservation)
            self.send_drain()  # this job ends here; the released item needs one
            raise
        except Exception as exc:
            if self._should_retry(exc, reservation.receives):
                delay = self._retry_delay(reservation.receives)
                logger.warning(
                    "%s: item for key %r failed (%r); retrying in %.1fs",
                    self.name,
                    reservation.key,
                    exc,
                    delay,
                )
                bucket.release(reservation, delay=delay)
            else:
                logger.exception(
                    "%s: item for key %r dead-lettered after %d receive(s)",
                    self.name,
                    reservation.key,
                    reservation.receives,
                )
                bucket.dead_letter(reservation, _error_text(exc))
            return False
        finally:
            self._local.reservation = None
        if not bucket.commit(reservation, seconds=time.monotonic() - started):
            logger.warning(
                "%s: item %s finished after its reservation expired; it may run again",
                self.name,
                reservation.id,
            )
        return True

    def _should_retry(self, exc: Exception, receives: int) -> bool:
        autoretry_for = tuple(getattr(self, "autoretry_for", ()) or ())
        dont = tuple(getattr(self, "dont_autoretry_for", ()) or ())
        if not autoretry_for or not isinstance(exc, autoretry_for) or isinstance(exc, dont):
            return False
        return self._retries_left(receives)

    def _retries_left(self, receives: int) -> bool:
        """Another try is allowed: within max_retries and below bucket_max_receives."""
        within_retries = self.max_retries is None or receives <= self.max_retries
        return within_retries and receives < self.bucket_max_receives

    def _retry_delay(self, receives: int) -> float:
        """Celery's own backoff rules, with the receives so far as the retry count."""
        backoff = getattr(self, "retry_backoff", False)
        if backoff:
            factor = 1 if backoff is True else int(backoff)
            return float(
                get_exponential_backoff_interval(
                    factor=factor,
                    retries=receives - 1,
                    maximum=getattr(self, "retry_backoff_max", 600),
                    full_jitter=getattr(self, "retry_jitter", True),
                )
            )
        return float(self.default_retry_delay or 0)

    def reap(self) -> int:
        result = self.bucket.reap()
        if result.drain_needed:
            self.send_drain()
        return result.returned + result.dead_lettered


def bucket_task(*args: Any, **options: Any) -> Any:
    """Decorator: a shared task with :class:`BucketTask` as base; options are checked at once.

    Example::

        @bucket_task(bucket_key="domain", bucket_rate="5/s")
        def crawl(domain, path):
            ...
    """
    if "bucket_key" not in options:
        raise ConfigurationError("bucket_task needs bucket_key=")
    return decorate_task(BucketTask, args, options, "bucket_task")


def pool_task(*args: Any, **options: Any) -> Any:
    """Decorator: a shared task with :class:`PoolTask` as base; options are checked at once.

    Example::

        @pool_task(pool_size=1000, pool_coalesce=True)
        def count_error(fingerprint, count=1):
            ...
    """
    return decorate_task(PoolTask, args, options, "pool_task")


def decorate_task(
    default_base: type[Task], args: tuple[Any, ...], options: dict[str, Any], name: str
) -> Any:
    """What pool_task, bucket_task and lease_task share: a shared task (or ``app=``'s task)
    with the given base, its options checked at the decoration site."""
    base = options.pop("base", default_base)
    if not (isinstance(base, type) and issubclass(base, default_base)):
        raise ConfigurationError(f"{name} base must subclass {default_base.__name__}, got {base!r}")
    # Building a throwaway subclass runs the same validation as Celery will, but now, at the
    # decoration site, rather than when the app is finalized.
    type("_Check", (base,), {k: v for k, v in options.items() if hasattr(base, k)})
    app = options.pop("app", None)
    decorate: Callable[..., Any] = app.task if app is not None else shared_task
    if len(args) == 1 and callable(args[0]) and not options:
        return decorate(base=base)(args[0])
    if args:
        raise TypeError(f"{name} takes keyword options only, or is used bare: @{name}")
    return decorate(base=base, **options)
