"""PoolTask: a task whose calls go into a capped pool and are drained in batches."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

from celery.exceptions import SoftTimeLimitExceeded

if TYPE_CHECKING:
    from celery.result import EagerResult
    from opentelemetry.trace import Span

    from ..privates import AnyTask
    from ..structures.receipts import Receipt

from ..errors import ConfigurationError, RedQueueError
from ..privates import check_arguments
from ..redis.serializers import to_bytes
from ..structures.base import DRAIN_LEASE
from ..structures.pool import (
    DELIVERIES,
    CappedPool,
    PoolBatch,
    PoolItem,
    validate_pool_options,
)
from ..structures.protocols import in_chunks
from ..structures.sharding import validate_shards
from ..structures.wake import unlist
from ..validation import (
    one_of,
    positive_int,
    seconds,
)
from .base import error_text, per_process
from .beat import DrainSummary
from .config import get_config
from .decorators import decorate_task
from .handover import due_in
from .heartbeat import heartbeat
from .neighbour import Looker
from .options import DrainSettings, check_count_parameter, check_debounce_options
from .producing import ProducerSettings, ProducerTask, new_call_id
from .results import (
    call_id_of,
    named_receipt,
    store_failure,
    store_lost,
    store_success,
    with_id,
)
from .retries import Verdict, judge

logger = logging.getLogger(__name__)

#: The task option behind each CappedPool parameter, so errors name what the user wrote.
TASK_OPTION_NAMES = {
    "capacity": "pool_size",
    "policy": "pool_policy",
    "max_drains": "pool_drain_concurrency",
}


@dataclass(frozen=True)
class PoolCall:
    """One call handed to a ``pool_batch`` body: arguments, how many calls it merges, its id."""

    args: tuple[object, ...]
    kwargs: dict[str, object] = field(default_factory=dict)
    count: int = 1
    #: The id of the call's receipt, when the stored call carries it (``pool_results=True``,
    #: or a call traced under an active span); else "" (ids are not stored for nothing).
    id: str = ""


@dataclass
class Settled:
    """What becomes of a batch's failed calls by position (error texts, retry delays, those
    dead-lettered now) and the calls counted under each stats word."""

    failures: dict[int, str] = field(default_factory=dict)
    retry_in: dict[int, float] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)

    def give_back(self, items: list[PoolItem], start: int) -> None:
        """The calls from ``start`` on go back to the pool now, unrun (the worker shuts down):
        a receive each, as a reaped batch's, counted ``retried``."""
        for index in range(start, len(items)):
            self.failures[index] = "WorkerShutdown: given back unrun"
            self.retry_in[index] = 0.0
            self.counts["retried"] += items[index].count

    def add(self, index: int, item: PoolItem, verdict: Verdict, task: PoolTask) -> None:
        """Record ``verdict`` on the call at ``index`` (a call that is done stores its result)."""
        self.failures[index] = error_text(verdict.error)
        if verdict.retry:
            self.retry_in[index] = verdict.delay
            self.counts["retried"] += item.count
            return
        if task.pool_delivery == "at_least_once":
            self.dead.add(index)
            self.counts["dead"] += item.count
        else:
            self.counts["failed"] += item.count
        if task.pool_results:
            store_failure(task, call_id_of(item.payload), verdict.error)


class PoolTask(ProducerTask):
    """Base class of pooled tasks: calls are stored in a capped pool and drained in batches.

    Example:

        @app.task(base=PoolTask, pool_size=10_000, pool_policy="sample")
        def record(event):
            ...

        record.delay({"user": 7})   # -> Receipt(kept=True, ...), not an AsyncResult
    """

    redqueue_kind = "pool"

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
    #: Call the body once per popped batch with a list of [`PoolCall`][celery_redqueue.PoolCall].
    pool_batch: bool = False
    #: Seconds between beat-run drains (a safety net; calls also send drains). None: no beat.
    pool_drain_interval: float | None = 60.0
    #: Most drain jobs working on this pool at once; a deep pool fans out up to this many.
    pool_drain_concurrency: int = 1
    #: Seconds one drain job works before handing over to a fresh drain job.
    pool_drain_time_budget: float = 10.0
    #: Seconds a drain job waits on an empty pool before it ends, woken by the next call (the
    #: wake signal), not polling. During a burst the pool empties and refills constantly;
    #: lingering keeps the one drain job working instead of a new one sent per call.
    pool_drain_linger: float = 0.2
    #: Seconds a popped batch stays in flight without a heartbeat before the reaper takes it
    #: back (lost, or returned at least once). The worker renews it every third of this while
    #: its bodies run, so it bounds recovery after a crash, not the length of a body.
    pool_visibility_timeout: float = 60.0
    #: Seconds the drain flag survives a drain job that died or was never sent (renewed by a
    #: running drain): the longest a pool waits for a new call to send a fresh drain job.
    pool_drain_lease: float = DRAIN_LEASE
    #: "at_most_once" (default: a batch whose worker dies is counted as lost) or
    #: "at_least_once" (it comes back; failed calls are retried; past pool_max_receives they
    #: go to the dead-letter list).
    pool_delivery: str = "at_most_once"
    #: Receives before an at-least-once call is dead-lettered.
    pool_max_receives: int = 5
    #: Producer-side deduplication: a callable on the call's arguments returning an id; a call
    #: whose id was seen within pool_dedupe_window seconds is refused. ``apply_async(...,
    #: dedupe_id=...)`` gives an id explicitly.
    pool_dedupe_key: Callable[..., str] | None = None
    #: Seconds a dedupe id is remembered.
    pool_dedupe_window: float = 300.0
    #: Consumer-side guard (seconds, 0: off): an entry whose body completed is recorded with
    #: its acknowledgement, and a redelivered copy is skipped rather than applied twice.
    pool_processed_guard: float = 0.0
    #: Store each call's outcome (the body's return value or exception) in the app's result
    #: backend under its receipt's id: ``receipt.get()``. Costs a backend write per call.
    pool_results: bool = False
    #: Seconds a drain waits, after the first call of a batch arrived, for calls to gather
    #: (``pool_batch`` bodies): it schedules itself for then instead of running a small batch
    #: at once; a batch of ``pool_batch_min`` calls runs without waiting. 0: no gathering.
    pool_batch_wait: float = 0.0
    #: Calls that end the gathering wait early; None: ``pool_batch_size``.
    pool_batch_min: int | None = None
    #: Debounce (seconds, 0: off): calls with one dedupe key (pool_dedupe_key) collapse into
    #: one, the latest arguments win, and the body runs once the key has been quiet this long,
    #: with the count of merged calls as ``count=`` (pool_count_kwarg), as coalescing passes it.
    pool_debounce: float = 0.0
    #: With pool_debounce: a never-quiet key still runs this long after its first call (0: no cap).
    pool_debounce_max_wait: float = 0.0
    #: Pool name; defaults to the task name.
    pool_name: str | None = None
    #: Spread the pool over this many hash tags (cluster nodes); pool_size is split between
    #: them. See "Sharded pools and buckets" in the docs (docs/guides/sharding.md).
    pool_shards: int = 1

    @classmethod
    def read_drain_settings(cls) -> DrainSettings:
        return DrainSettings.read(
            "pool",
            interval=cls.pool_drain_interval,
            time_budget=cls.pool_drain_time_budget,
            lease=cls.pool_drain_lease,
            visibility_timeout=cls.pool_visibility_timeout,
            linger=cls.pool_drain_linger,
            processed_guard=cls.pool_processed_guard,
            concurrency=cls.pool_drain_concurrency,
            results=cls.pool_results,
        )

    @classmethod
    def read_producer_settings(cls) -> ProducerSettings:
        return ProducerSettings.read(
            cls,
            "pool",
            dedupe_key=cls.pool_dedupe_key,
            dedupe_window=cls.pool_dedupe_window,
            name=cls.pool_name,
            results=cls.pool_results,
        )

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        validate_pool_options(
            capacity=cls.pool_size,
            policy=cls.pool_policy,
            max_drains=cls.pool_drain_concurrency,
            names=TASK_OPTION_NAMES,
        )
        positive_int("pool_batch_size", cls.pool_batch_size)
        one_of("pool_delivery", cls.pool_delivery, DELIVERIES)
        positive_int("pool_max_receives", cls.pool_max_receives)
        if cls.pool_coalesce and cls.pool_processed_guard:
            raise ConfigurationError(
                "pool_processed_guard is not available with pool_coalesce: equal calls merge "
                "into one entry, so an entry has no identity of its own to remember"
            )
        validate_shards("pool_shards", cls.pool_shards, cls.pool_size)
        check_debounce_options(
            "pool",
            cls.pool_debounce,
            cls.pool_debounce_max_wait,
            cls.pool_dedupe_key,
            cls.pool_count_kwarg,
        )
        seconds("pool_batch_wait", cls.pool_batch_wait)
        positive_int("pool_batch_min", cls.pool_batch_min, optional=True)
        if cls.pool_batch_wait and cls.pool_shards > 1:
            raise ConfigurationError(
                "pool_batch_wait is not available with pool_shards > 1: a sharded pool has no "
                "one oldest call to count the wait from"
            )
        if cls.pool_results and (cls.pool_coalesce or cls.pool_debounce):
            merging = "pool_coalesce" if cls.pool_coalesce else "pool_debounce"
            raise ConfigurationError(
                f"pool_results is not available with {merging}: calls merge into one "
                "entry, so a call has no outcome of its own to store"
            )
        merging = "pool_coalesce" if cls.pool_coalesce else "pool_debounce"
        if (
            "run" in cls.__dict__
            and (cls.pool_coalesce or cls.pool_debounce)
            and not cls.pool_batch
        ):
            check_count_parameter(merging, cls.pool_count_kwarg, cls.__dict__["run"])
        if cls.pool_batch_min is not None and cls.pool_batch_min > cls.pool_batch_size:
            raise ConfigurationError(
                f"pool_batch_min ({cls.pool_batch_min}) cannot exceed pool_batch_size "
                f"({cls.pool_batch_size}): a drain pops at most pool_batch_size calls"
            )

    @per_process
    def pool(self) -> CappedPool:
        """This task's pool (stats, pop, clear), built once per process."""
        return self._make_pool()

    @per_process
    def structure(self) -> CappedPool:
        """What the reaper, the figures and the heartbeat look at: the pool."""
        return self.pool

    @property
    def merges_calls(self) -> bool:
        """Whether one entry stands for several calls (coalescing or debounce): the body
        gets their count as ``pool_count_kwarg``, and a caller may not pass it."""
        return bool(self.pool_coalesce or self.pool_debounce)

    @per_process
    def _traced(self) -> bool:
        """Whether calls carry their caller's trace context (tracing on, not coalescing)."""
        return bool(get_config(self.app).tracing and not self.pool_coalesce)

    def _make_pool(self) -> CappedPool:
        config = get_config(self.app)
        return CappedPool(
            config.client(),
            self.pool_name or self.name,
            self.pool_size,
            shards=self.pool_shards,
            policy=self.pool_policy,
            coalesce=self.pool_coalesce,
            prefix=config.key_prefix,
            serializer=config.serializer,
            visibility_timeout=self.pool_visibility_timeout,
            drain_lease=self.pool_drain_lease,
            max_drains=self.pool_drain_concurrency,
            delivery=self.pool_delivery,
            max_receives=self.pool_max_receives,
            dedupe_window=self.pool_dedupe_window,
            debounce=self.pool_debounce,
            debounce_max_wait=self.pool_debounce_max_wait,
            processed_guard=self.pool_processed_guard,
            name_evicted=self.pool_results,  # so that an evicted call's waiter is told
        )

    # Producing

    def add_many(
        self, calls: Sequence[tuple[Sequence[object], Mapping[str, object]]]
    ) -> list[Receipt] | list[EagerResult[object]]:
        """Offer many ``(args, kwargs)`` calls in one round trip per thousand; sends one drain.

        Every call is checked as ``delay()`` checks it before any is stored. In eager mode the
        body runs for each call and the results are Celery's EagerResults.
        """
        ids = [new_call_id() for _ in calls]
        encoded = [self._prepare_call(a, k, i) for (a, k), i in zip(calls, ids, strict=True)]
        if self.app.conf.task_always_eager:
            return [self._run_eagerly(e) for e in encoded]
        results = in_chunks(self.pool.store_encoded, encoded, self.pool.store_chunk)
        sent = False
        for i, result in enumerate(results):
            if result.drain_needed and not sent:
                sent = True
                results[i] = self._after_add(result, None, ids[i])
            else:
                results[i] = named_receipt(self, result, ids[i])
        return results

    def reap(self) -> int:
        """The reaper's step for this pool; the waiters of the calls it counted lost (per-call
        results on) get a CallLostError as their result."""
        result = self.pool.reap(lost_calls=self.pool_results)
        store_lost(
            self,
            result.lost_calls,
            "its batch was taken back from a worker that died, and it was not kept (at most "
            "once: counted lost, the body may have started; or no room was left: evicted)",
        )
        return self.reaped(result)

    def _prepare_call(
        self,
        args: Sequence[object] | None,
        kwargs: Mapping[str, object] | None,
        call_id: str | None = None,
    ) -> bytes:
        """Check a call as the body will take it, and serialize it (with ``call_id`` when
        per-call results are on or the call is traced); raises, storing nothing."""
        pool, traced = self.pool, self._traced
        call_kwargs = dict(kwargs or {})
        if self.merges_calls and self.pool_count_kwarg in call_kwargs:
            raise RedQueueError(
                f"{self.name} coalesces calls and passes {self.pool_count_kwarg}= itself; "
                "do not pass it when calling"
            )
        if self.typing and not self.pool_batch:
            # Celery's check (a batch body takes the list of calls: its signature says nothing
            # of one call).
            check_arguments(self, args, kwargs)
        call: list[object] = [list(args or ()), call_kwargs]
        # tracing hook: keep the caller's trace context (tracing.py), and the call's id, which
        # its process span names as messaging.message.id (the receipt's id).
        if traced:
            from . import tracing  # loaded once tracing is on

            traced = tracing.stamp(call)
        if traced or self.pool_results:
            with_id(call, call_id)
        return to_bytes(pool.serializer.dumps(call))

    # Consuming

    def _direct_call(
        self, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        if self.pool_batch:
            return ([PoolCall(tuple(args), dict(kwargs), 1)],), {}
        return args, kwargs

    def _drain(self) -> DrainSummary:
        """Pop and run batches until the pool is empty or the time budget is spent."""
        pool = self.pool
        deadline = time.monotonic() + self.pool_drain_time_budget
        done = Counter[str]()  # processed, failed, retried, dead: the stats' words
        batches = 0
        last_work = -math.inf  # a drain that starts on an empty pool ends at once
        gather_min = self.pool_batch_min or self.pool_batch_size
        looker = Looker(self)  # the worker's other work waiting: end soon (`neighbour`)
        listed = False  # a lingering pop listed this drain on the wake signal
        while True:
            if self.pool_batch_wait:  # (refused with shards)
                # Let a batch gather: look again later (a scheduled job), never sleep here.
                gather = pool.gather(gather_min, self.pool_batch_wait)
                if gather.wait:
                    if listed:  # no empty pop ends this job: take its listener off
                        unlist(pool.wake_signals())
                    if gather.schedule:
                        self.send_drain_or_release(countdown=gather.wait)
                    return DrainSummary.of(done, batches, continued=True)
            if looker.stopping:  # the worker shuts down: another worker serves the rest
                if listed:
                    unlist(pool.wake_signals())
                self.send_drain_or_release()
                return DrainSummary.of(done, batches, continued=True)
            left = self.pool_drain_linger - (time.monotonic() - last_work)  # of the linger
            size = self.pool_batch_size
            if looker.yielding():
                left = 0.0  # no linger: end after this batch, a fresh job behind the others
                if looker.urgent and not self.pool_batch:
                    size = 1  # a task waits: only the call at hand
            batch = pool.pop(size, linger=left > 0, listen=max(left, 0.0))
            done["dead"] += batch.malformed  # dead-lettered by the pop, with the reason
            if batch.fan_out:
                self.send_drain_or_release()
            if batch.pop_again:
                continue
            if batch.lingering:
                listed = True
                # Until the next call wakes it (wake signal), time is up or other work waits.
                looker.listen(pool.listen, left)
                continue
            if not batch:
                if batch.wait is not None:
                    # Only delayed calls remain: a job comes back when the first is due.
                    if batch.schedule:
                        self.send_drain_or_release(countdown=batch.wait)
                    else:  # one is scheduled already; a consumer looks then itself
                        due_in(self.name, batch.wait)
                    return DrainSummary.of(done, batches, continued=True)
                return DrainSummary.of(done, batches)
            started = time.monotonic()
            with heartbeat().holding(pool, batch.id):
                settled = self._run_batch(batch, looker)
                last_work = time.monotonic()  # linger is counted from when the work ended
                heartbeat().settling(pool, batch.id)
                acked = pool.ack(
                    batch,
                    failures=settled.failures,
                    retry_in=settled.retry_in,
                    dead=settled.dead,
                    seconds=last_work - started,
                )
            if not acked:
                logger.warning(
                    "%s: batch %s finished after its deadline; the reaper had taken it back",
                    self.name,
                    batch.id,
                )
            batches += 1
            undecodable = sum(c for _, c, _ in batch.undecodable)  # dead-lettered by the ack
            settled.counts["dead"] += undecodable
            done.update(settled.counts)
            done["processed"] += (
                batch.calls - undecodable - sum(batch.items[i].count for i in settled.failures)
            )
            if looker.yielding() or time.monotonic() >= deadline:
                # Hand over to a fresh job so one pool cannot hold a worker forever. No empty
                # pop ends this job: its listener goes off, or the calls stored until the
                # listing ran out would wake nobody and send no job once the fresh job ended.
                if listed:
                    unlist(pool.wake_signals())
                self.send_drain_or_release()
                return DrainSummary.of(done, batches, continued=True)

    def _run_batch(self, batch: PoolBatch, looker: Looker | None = None) -> Settled:
        """Run the body over a batch; returns what became of the calls that failed (each is
        logged as Celery logs a retry or a failure). At the worker's shutdown (``looker``), a
        per-call body gives the rest of the batch back to an at-least-once pool (`give_back`)."""
        results = self.pool_results
        settled = Settled()
        if self.pool_batch:
            try:
                calls = [
                    PoolCall(tuple(a), k, item.count, call_id_of(item.payload) or "")
                    for item in batch.items
                    for a, k in [self._unpack(item.payload)]
                ]
                with self._processing(batch.items, batch=True):  # tracing hook
                    value = self._run_call(calls)
            except SoftTimeLimitExceeded:
                self.pool.ack(batch, failures=dict.fromkeys(range(len(batch.items)), "time limit"))
                self.send_drain_or_release()  # this job ends here; the rest needs one
                raise
            except Exception as exc:
                # The whole batch goes back (or ends) as one: each call by its own receives.
                for index, item in enumerate(batch.items):
                    verdict = self._judge(exc, item.receives)
                    if index == 0:
                        verdict.log(logger, self.name, f"batch {batch.id}", item.receives)
                    settled.add(index, item, verdict, self)
                return settled
            if results:  # a batch body's one return value is each of its calls' result
                for item in batch.items:
                    store_success(self, call_id_of(item.payload), value)
            return settled
        run, traced = self._stored_runner(), get_config(self.app).tracing  # once per batch
        give_back = looker is not None and self.pool_delivery == "at_least_once"
        for index, item in enumerate(batch.items):
            if give_back and index and looker is not None and looker.stopping:
                settled.give_back(batch.items, index)
                logger.info(
                    "%s: the worker shuts down; %d calls of batch %s go back to the pool",
                    self.name,
                    len(batch.items) - index,
                    batch.id,
                )
                break
            try:
                call_args, call_kwargs = self._unpack(item.payload)
                if self.merges_calls:
                    call_kwargs[self.pool_count_kwarg] = item.count
                with self._processing([item]) if traced else nullcontext():  # tracing hook
                    value = run(*call_args, **call_kwargs)
            except SoftTimeLimitExceeded:
                failures = dict(settled.failures)
                failures.update(dict.fromkeys(range(index, len(batch.items)), "time limit"))
                self.pool.ack(
                    batch, failures=failures, retry_in=settled.retry_in, dead=settled.dead
                )
                self.send_drain_or_release()  # this job ends here; the rest needs one
                raise
            except Exception as exc:
                verdict = self._judge(exc, item.receives)
                verdict.log(logger, self.name, call_id_of(item.payload) or item.id, item.receives)
                settled.add(index, item, verdict, self)
            else:
                if results:
                    store_success(self, call_id_of(item.payload), value)
        return settled

    def _judge(self, exc: BaseException, receives: int) -> Verdict:
        """Celery's retry rules (retries.py); what they do not retry goes back at once at least
        once (until pool_max_receives), and is final at most once."""
        redeliver = 0.0 if self.pool_delivery == "at_least_once" else None
        return judge(self, exc, receives, self.pool_max_receives, redeliver=redeliver)

    def _processing(
        self, items: Sequence[PoolItem], *, batch: bool = False
    ) -> AbstractContextManager[Span | None]:
        """The tracing span stored calls run in (a no-op context when tracing is off)."""
        if not get_config(self.app).tracing:
            return nullcontext()
        from . import tracing  # loaded once tracing is on

        return tracing.processing(
            self,
            [tracing.call_context(item.payload) for item in items],
            destination=self.pool_name or self.name,
            batch=batch,
            kind="pool",
            receives=max(item.receives for item in items),
            # The id the call's receipt has (a traced call carries it), else the entry's.
            message_id=None if batch else call_id_of(items[0].payload) or items[0].id or None,
        )


@overload
def pool_task(fun: Callable[..., object], /) -> AnyTask: ...


@overload
def pool_task(**options: object) -> Callable[[Callable[..., object]], AnyTask]: ...


def pool_task(
    *args: object, **options: object
) -> AnyTask | Callable[[Callable[..., object]], AnyTask]:
    """Decorator: a shared task with [`PoolTask`][celery_redqueue.PoolTask] as base; options are
    checked at once.

    Example:

        @pool_task(pool_size=1000, pool_coalesce=True)
        def count_error(fingerprint, count=1):
            ...
    """
    return decorate_task(PoolTask, args, options, "pool_task")
