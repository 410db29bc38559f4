"""BucketTask: a task whose calls queue per key and are released at each key's rate."""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from celery.exceptions import SoftTimeLimitExceeded

if TYPE_CHECKING:
    from ..privates import AnyTask

from ..errors import ConfigurationError, KeyBackoff, RedQueueError
from ..structures.base import DRAIN_LEASE
from ..structures.bucket import LeakyBucket, Reservation, validate_bucket_options
from ..structures.bucket_types import EncodedCall, check_priority
from ..structures.receipts import Receipt
from ..structures.sharding import validate_shards
from ..structures.wake import unlist
from .base import error_text, per_process
from .beat import DrainSummary
from .config import get_config
from .decorators import decorate_task
from .handover import due_in
from .heartbeat import heartbeat
from .metered import MeteredOptions, check_metered_options, limit_options
from .neighbour import Looker
from .options import (
    DrainSettings,
    check_count_parameter,
    check_debounce_options,
    check_key_parameter,
    function_or_name,
)
from .producing import ProducerSettings, ProducerTask
from .results import call_id_of, store_failure, store_success, with_id
from .retries import judge

logger = logging.getLogger(__name__)

#: The task option behind each LeakyBucket parameter, so errors name what the user wrote.
TASK_OPTION_NAMES = {
    "rate": "bucket_rate",
    "burst": "bucket_burst",
    "visibility_timeout": "bucket_visibility_timeout",
    "max_receives": "bucket_max_receives",
    "max_depth": "bucket_max_depth",
    "overflow": "bucket_overflow",
    "max_drains": "bucket_drain_concurrency",
}


class BucketTask(ProducerTask, MeteredOptions):
    """Base class of rate-limited tasks: calls queue per key and are released at each key's rate.

    Example:

        @app.task(base=BucketTask, bucket_key=lambda url: urlsplit(url).hostname,
                  bucket_rate="2/s")
        def fetch(url):
            ...

        fetch.bucket.set_rate("example.com", "10/s")   # seen by every worker
        fetch.delay("https://example.com/")            # -> Receipt, not an AsyncResult
    """

    redqueue_kind = "bucket"

    #: The key of a call: a callable taking the call's arguments and returning a string, or
    #: the name of one of the body's arguments.
    bucket_key: Callable[..., str] | str | None = None
    #: Rate of keys with no rate of their own: "10/s", "100/m", "5/h", "0.5/s".
    bucket_rate: str | float = "1/s"
    #: Items a key may release beyond its rate after a pause (GCRA burst allowance).
    bucket_burst: float = 0
    #: Seconds a released item stays reserved without a heartbeat before the reaper takes it
    #: back. The worker renews it every third of this while its body runs, so it bounds
    #: recovery after a crash, not the length of a body.
    bucket_visibility_timeout: float = 60.0
    #: Seconds the drain flag survives a drain job that died or was never sent (renewed by a
    #: running drain): the longest a bucket waits for a new call to send a fresh drain job.
    bucket_drain_lease: float = DRAIN_LEASE
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
    #: Most drain jobs releasing this bucket's items at once (unset, bucket_concurrency when
    #: that is higher: a drain runs one body at a time).
    bucket_drain_concurrency: int = 1
    #: Seconds one drain job works before handing over to a fresh one.
    bucket_drain_time_budget: float = 10.0
    #: Seconds a drain waits in the worker for a key about to go instead of ending (a broker
    #: round trip per wait costs throughput at burst 0; a scheduled job is still sent), and
    #: on an empty bucket after its last item, woken by the next call (the wake signal). 0: off.
    bucket_drain_linger: float = 0.05
    #: Producer-side deduplication: a callable on the call's arguments returning an id; a call
    #: whose id was seen within bucket_dedupe_window seconds is refused. ``apply_async(...,
    #: dedupe_id=...)`` gives an id explicitly.
    bucket_dedupe_key: Callable[..., str] | None = None
    #: Seconds a dedupe id is remembered.
    bucket_dedupe_window: float = 300.0
    #: Debounce (seconds, 0: off): calls with one dedupe key (bucket_dedupe_key) collapse into
    #: one, the latest arguments win, and the call joins its key's queue once the dedupe key has
    #: been quiet this long; the body gets the count of merged calls as ``count=``
    #: (bucket_count_kwarg).
    bucket_debounce: float = 0.0
    #: With bucket_debounce: a never-quiet key still goes this long after its first call (0: no
    #: cap).
    bucket_debounce_max_wait: float = 0.0
    #: Name of the keyword argument that carries the count of a debounced call.
    bucket_count_kwarg: str = "count"
    #: Consumer-side guard (seconds, 0: off): an item whose body completed is recorded with
    #: its commit, and a redelivered copy is skipped rather than applied twice.
    bucket_processed_guard: float = 0.0
    #: Store each call's outcome (the body's return value, or the exception it was
    #: dead-lettered with) in the app's result backend under its receipt's id:
    #: ``receipt.get()``. Costs a backend write per call.
    bucket_results: bool = False
    #: Bucket name; defaults to the task name.
    bucket_name: str | None = None
    #: Spread the bucket over this many hash tags (cluster nodes), each key on one of them.
    #: See "Sharded pools and buckets" in the docs (docs/guides/sharding.md).
    bucket_shards: int = 1

    @classmethod
    def read_drain_settings(cls) -> DrainSettings:
        return DrainSettings.read(
            "bucket",
            interval=cls.bucket_drain_interval,
            time_budget=cls.bucket_drain_time_budget,
            lease=cls.bucket_drain_lease,
            visibility_timeout=cls.bucket_visibility_timeout,
            linger=cls.bucket_drain_linger,
            processed_guard=cls.bucket_processed_guard,
            concurrency=cls.bucket_drain_concurrency,
            results=cls.bucket_results,
        )

    @classmethod
    def read_producer_settings(cls) -> ProducerSettings:
        return ProducerSettings.read(
            cls,
            "bucket",
            dedupe_key=cls.bucket_dedupe_key,
            dedupe_window=cls.bucket_dedupe_window,
            name=cls.bucket_name,
            results=cls.bucket_results,
        )

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        validate_bucket_options(
            rate=cls.bucket_rate,
            burst=cls.bucket_burst,
            visibility_timeout=cls.bucket_visibility_timeout,
            max_receives=cls.bucket_max_receives,
            max_depth=cls.bucket_max_depth,
            overflow=cls.bucket_overflow,
            max_drains=cls.bucket_drain_concurrency,
            names=TASK_OPTION_NAMES,
        )
        function_or_name(cls, "bucket_key")
        if "run" in cls.__dict__ and cls.bucket_key is None:
            raise ConfigurationError(f"bucket_key is required for bucket task {cls.__name__}")
        if "run" in cls.__dict__ and isinstance(cls.bucket_key, str):
            check_key_parameter(cls.bucket_key, cls.__dict__["run"])
        validate_shards("bucket_shards", cls.bucket_shards)
        check_metered_options(cls)
        check_debounce_options(
            "bucket",
            cls.bucket_debounce,
            cls.bucket_debounce_max_wait,
            cls.bucket_dedupe_key,
            cls.bucket_count_kwarg,
        )
        if "run" in cls.__dict__ and cls.bucket_debounce:  # the count's keyword checked above
            check_count_parameter("bucket_debounce", cls.bucket_count_kwarg, cls.__dict__["run"])
        if cls.bucket_debounce and cls.bucket_results:
            raise ConfigurationError(
                "bucket_results is not available with bucket_debounce: calls merge into one, "
                "so a call has no outcome of its own to store"
            )

    @property
    def reservation(self) -> Reservation | None:
        """The reservation whose body is running in this thread (key, receives, released_at),
        or None outside a drain (a direct or eager call)."""
        return getattr(self._local, "reservation", None)

    @per_process
    def bucket(self) -> LeakyBucket:
        """This task's bucket (rates, stats, dead letters), built once per process."""
        return self._make_bucket()

    @per_process
    def structure(self) -> LeakyBucket:
        """What the reaper, the figures and the heartbeat look at: the bucket."""
        return self.bucket

    def _make_bucket(self) -> LeakyBucket:
        config = get_config(self.app)
        bucket = LeakyBucket(
            config.client(),
            self.bucket_name or self.name,
            shards=self.bucket_shards,
            default_rate=self.bucket_rate,
            default_burst=self.bucket_burst,
            ordered=self.bucket_ordered,
            visibility_timeout=self.bucket_visibility_timeout,
            max_receives=self.bucket_max_receives,
            max_depth=self.bucket_max_depth,
            overflow=self.bucket_overflow,
            prefix=config.key_prefix,
            serializer=config.serializer,
            max_drains=self.bucket_drain_concurrency,
            drain_lease=self.bucket_drain_lease,
            dedupe_window=self.bucket_dedupe_window,
            processed_guard=self.bucket_processed_guard,
            debounce=self.bucket_debounce,
            debounce_max_wait=self.bucket_debounce_max_wait,
            **limit_options(self),
        )
        bucket.drain_sender = self.send_drain_or_release  # resume() needs a drain job
        return bucket

    def key_for(self, args: Sequence[object] | None, kwargs: Mapping[str, object] | None) -> str:
        """The bucket key of a call; a key function that fails is an error at the call site."""
        return self._key_of(args, kwargs, checked=False)

    def _key_of(
        self, args: Sequence[object] | None, kwargs: Mapping[str, object] | None, *, checked: bool
    ) -> str:
        """`key_for()`; ``checked``: Celery has checked the call against the body's
        signature already (``delay()`` does), so a key passed by position is read by index."""
        key_spec = self.bucket_key
        try:
            if isinstance(key_spec, str):
                key = self._named_key(key_spec, args or (), kwargs or {}, checked)
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

    def _named_key(
        self, name: str, args: Sequence[object], kwargs: Mapping[str, object], checked: bool
    ) -> object:
        """The value of the body's parameter ``name`` in this call (its default if omitted).

        The signature is read once per task. When the call was checked against the body's
        signature already (``checked``), a positional parameter is read by its index; else the
        call is bound in full, which raises for arguments the body cannot take.
        """
        body = self._body()
        # One entry per parameter name read (bucket_key, bucket_cost).
        signatures = self.__dict__.setdefault("_redqueue_signatures", {})
        cached = signatures.get(name)
        if cached is None or cached[0] != body:  # bound methods are equal, not identical
            signature = inspect.signature(body)
            names = list(signature.parameters)
            param = signature.parameters.get(name)
            index = (
                names.index(name)
                if param is not None and param.kind is param.POSITIONAL_OR_KEYWORD
                else None
            )
            cached = signatures[name] = (body, signature, index, param)
        _, signature, index, param = cached
        if checked and index is not None and param is not None:
            if index < len(args):
                return args[index]
            if name in kwargs:
                return kwargs[name]
            if param.default is not param.empty:
                return param.default
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments[name]

    # Producing

    def _prepare(
        self,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        options: dict[str, object],
        call_id: str,
    ) -> tuple[EncodedCall, float, str | None]:
        """As every kind prepares a call; with priority tiers (bucket_priority_bound),
        ``priority=`` is the call's tier (InvalidArgumentError outside 0-9, storing nothing)."""
        prepared, delay, dedupe_id = super()._prepare(args, kwargs, options, call_id)
        priority = options.get("priority") if self.bucket_priority_bound is not None else None
        if priority is not None:
            cost = prepared[2] if len(prepared) > 2 else None
            prepared = (prepared[0], prepared[1], cost, check_priority(priority, self.name))
        return prepared, delay, dedupe_id

    def _after_add(
        self, receipt: Receipt, routing: dict[str, object] | None = None, call_id: str = ""
    ) -> Receipt:
        # With priority tiers, priority= was the call's tier, not the drain job's (a broker's
        # priority order may even be the reverse: kombu's Redis transport serves 0 first).
        if routing and self.bucket_priority_bound is not None:
            routing = {k: v for k, v in routing.items() if k != "priority"}
        return super()._after_add(receipt, routing, call_id)

    def _prepare_call(
        self,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        call_id: str | None = None,
    ) -> EncodedCall:
        """Check a call, compute its key and serialize it (with ``call_id`` when per-call
        results are on or the call is traced); raises, storing nothing."""
        self.check_call(args, kwargs)
        if self.bucket_debounce and kwargs and self.bucket_count_kwarg in kwargs:
            raise RedQueueError(
                f"{self.name} debounces calls and passes {self.bucket_count_kwarg}= itself; "
                "do not pass it when calling"
            )
        if type(self).key_for is BucketTask.key_for:
            key = self._key_of(args, kwargs, checked=bool(self.typing))
        else:  # a subclass computes keys its own way
            key = self.key_for(args, kwargs)
        call: list[object] = [list(args or ()), dict(kwargs or {})]
        # tracing hook: keep the caller's trace context (tracing.py), and the call's id, which
        # its process span names as messaging.message.id (the receipt's id).
        traced = False
        if get_config(self.app).tracing:
            from . import tracing  # loaded once tracing is on

            traced = tracing.stamp(call)
        data = self.bucket.encode(with_id(call, call_id if traced or self.bucket_results else None))
        cost = self._call_cost(args, kwargs)
        return (key, data) if cost is None else (key, data, cost)

    # Consuming

    def _drain(self) -> DrainSummary:
        """Release eligible items until none is (lingering ``bucket_drain_linger``), or the time
        budget is spent. When items remain but no key may release yet, the job schedules itself
        (countdown) for when the next key becomes eligible, waiting here only that linger."""
        bucket = self.bucket
        deadline = time.monotonic() + self.bucket_drain_time_budget
        done = Counter[str]()  # processed, retried, dead: the stats' words
        last_work = -math.inf  # a drain that starts on an empty bucket ends at once
        looker = Looker(self)  # the worker's other work waiting: end soon (`neighbour`)
        listed = False  # an empty poll listed this drain on the wake signal
        while True:
            if looker.stopping:  # the worker shuts down: another worker serves the rest
                if listed:
                    unlist(bucket.wake_signals())
                self.send_drain_or_release()
                return DrainSummary.of(done, continued=True)
            left = self.bucket_drain_linger - (time.monotonic() - last_work)
            # An empty poll keeps it listed. Other work waiting: no linger, end after this call.
            linger = left > 0 and time.monotonic() < deadline and not looker.yielding()
            poll = bucket.dequeue(listen=self.bucket_drain_linger, linger=linger, ahead=True)
            done["dead"] += poll.malformed  # dead-lettered by the dequeue, with the reason
            reservation = poll.reservation
            if reservation is None:
                listed = True
                if poll.wait is None:
                    if linger:
                        # Until the next call wakes it, time is up or other work waits.
                        looker.listen(bucket.listen, left)
                        continue
                    return DrainSummary.of(done)
                if poll.schedule:
                    self.send_drain_or_release(countdown=poll.wait)
                if (
                    poll.wait <= self.bucket_drain_linger
                    and time.monotonic() < deadline
                    and not looker.yielding(idle=True)
                ):
                    looker.listen(bucket.listen, poll.wait)  # woken early by another key's call
                    continue
                unlist(bucket.wake_signals())  # it may be listed still (a wait within linger)
                due_in(self.name, poll.wait)  # a consumer looks then itself (no job either way)
                return DrainSummary.of(done, continued=True)
            if reservation.fan_out:
                self.send_drain_or_release()
            with heartbeat().holding(bucket, reservation.id):
                outcome = self._run_reservation(reservation)
            last_work = time.monotonic()
            if outcome:  # None: backed off, neither done nor retried
                done[outcome] += 1
            if looker.yielding() or time.monotonic() >= deadline:
                # No empty poll ends this job: its listener goes off, or the calls stored until
                # the listing ran out would wake nobody and send no job once the next job ended.
                if listed:
                    unlist(bucket.wake_signals())
                self.send_drain_or_release()
                return DrainSummary.of(done, continued=True)

    def _run_reservation(self, reservation: Reservation) -> str | None:
        """Run the body on one item; commit it (``"processed"``), retry it later (release:
        ``"retried"``), back its key off (None) or dead-letter it (``"dead"``)."""
        from . import tracing  # a worker's module: not loaded by producers

        bucket = self.bucket
        self._local.reservation = reservation
        self._local.reported_cost = None
        started = time.monotonic()
        call_id = call_id_of(reservation.payload) if self.bucket_results else None
        try:
            call_args, call_kwargs = self._unpack(reservation.payload)
            if self.bucket_debounce:
                call_kwargs[self.bucket_count_kwarg] = reservation.count
            try:
                with tracing.processing(  # tracing hook
                    self,
                    [tracing.call_context(reservation.payload)],
                    destination=self.bucket_name or self.name,
                    kind="bucket",
                    key=reservation.key,
                    receives=reservation.receives,
                    # The id the call's receipt has (a traced call carries it).
                    message_id=call_id_of(reservation.payload) or reservation.id,
                ):
                    value = self._run_call(*call_args, **call_kwargs)
            finally:
                # Whatever the body did, a commit, release or dead letter follows at once.
                heartbeat().settling(bucket, reservation.id)
        except KeyBackoff as exc:
            self._back_off(reservation, exc)
            return None
        except SoftTimeLimitExceeded:
            bucket.retry_later(reservation)
            self.send_drain_or_release()  # this job ends here; the released item needs one
            raise
        except Exception as exc:
            # Celery's retry rules (retries.py); an exception they do not retry is final here.
            verdict = judge(
                self, exc, reservation.receives, self.bucket_max_receives, redeliver=None
            )
            verdict.log(logger, self.name, call_id or reservation.id, reservation.receives)
            if verdict.retry:
                bucket.retry_later(reservation, delay=verdict.delay)
                return "retried"
            bucket.dead_letter(reservation, error_text(verdict.error))
            store_failure(self, call_id, verdict.error)
            return "dead"
        finally:
            self._local.reservation = None
        store_success(self, call_id, value)
        cost, self._local.reported_cost = self._local.reported_cost, None
        if not bucket.commit(reservation, seconds=time.monotonic() - started, cost=cost):
            logger.warning(
                "%s: item %s finished after its reservation expired; it may run again",
                self.name,
                reservation.id,
            )
        return "processed"


def bucket_task(*args: object, **options: object) -> Callable[[Callable[..., object]], AnyTask]:
    """Decorator: a shared task with [`BucketTask`][celery_redqueue.BucketTask] as base; options are
    checked at once.

    Example:

        @bucket_task(bucket_key="domain", bucket_rate="5/s")
        def crawl(domain, path):
            ...
    """
    if "bucket_key" not in options:
        raise ConfigurationError("bucket_task needs bucket_key=")
    # So a bare @bucket_task (no options) never gets here: what comes back is the decorator.
    return cast(
        "Callable[[Callable[..., object]], AnyTask]",
        decorate_task(BucketTask, args, options, "bucket_task"),
    )
