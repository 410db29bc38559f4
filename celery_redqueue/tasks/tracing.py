"""OpenTelemetry across the store-then-drain boundary (``redqueue_tracing = True``; what a
trace looks like, what is stored and what it costs: docs/tracing.md).

A call made while a span is active keeps that span's W3C trace context with its payload, in the
same round trip: a pool or bucket call as ``[args, kwargs, {"traceparent": ...}]`` (the dict is
shared with the call id of per-call results, see `results`), a stream event in an envelope
(`STREAM_FIELD`); with no active span the payload is byte for byte what it was. The body runs
in a CONSUMER span ``process <structure>`` linked to each call's context (`processing`).
Nothing here imports OpenTelemetry until tracing is switched on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

if TYPE_CHECKING:
    from opentelemetry import trace as otel_trace
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram
    from opentelemetry.trace import Link, Span, SpanContext, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    from opentelemetry.util.types import AttributeValue

    from ..privates import AnyTask

from .config import get_config
from .results import call_meta

logger = logging.getLogger(__name__)

#: Most links one process span carries; the rest are counted in ``redqueue.links_dropped``.
MAX_LINKS = 128
#: The envelope field of a traced stream event (its other field is ``event``).
STREAM_FIELD = "redqueue.trace"
#: Instrumentation scope of the spans and the histogram.
SCOPE = "celery_redqueue"

#: The context stored calls run in when tracing is off.
OFF: AbstractContextManager[None] = nullcontext()


class _TraceModule(Protocol):
    """What is used of the ``opentelemetry.trace`` module."""

    Link: type[otel_trace.Link]
    SpanKind: type[otel_trace.SpanKind]

    def get_current_span(self, context: Context | None = None) -> Span: ...


class _Api(TypedDict, total=False):
    """opentelemetry's trace module, its propagator, our tracer and histogram (`_otel()`)."""

    trace: _TraceModule
    current_span: Callable[[], Span]
    propagator: TraceContextTextMapPropagator
    tracer: Tracer
    duration: Histogram


#: opentelemetry's modules and our instruments, once tracing is on (see `_otel()`).
_api: _Api = {}


def _otel() -> _Api:
    """Import OpenTelemetry's API once, when tracing is first switched on."""
    if not _api:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        # The installed distribution's version: the package's __init__ is above this module.
        try:
            __version__ = version("celery-redqueue")
        except PackageNotFoundError:
            __version__ = "unknown"
        _api.update(
            {
                "trace": trace,
                "current_span": trace.get_current_span,
                "propagator": TraceContextTextMapPropagator(),
                "tracer": trace.get_tracer(SCOPE, __version__),
                "duration": metrics.get_meter(SCOPE, __version__).create_histogram(
                    "messaging.process.duration",
                    unit="s",
                    description="Duration of processing stored calls (one batch or one call)",
                ),
            }
        )
    return _api


# Producing


def caller_context() -> dict[str, str] | None:
    """The active span's W3C trace context as a carrier, or None when no span is active.

    Formatted here rather than through the global propagator (whose ``inject`` costs about
    10 us a call), so the stored form is always W3C (what `links()` reads back) whatever
    ``OTEL_PROPAGATORS`` says. A request that makes many calls makes them under one span: the
    last carrier is kept and handed out again while the span is the same (it is only read).
    """
    global _last
    # _otel() once per process: the setting (config.py) only checked OpenTelemetry is there.
    span_context = (_api or _otel())["current_span"]().get_span_context()
    last = _last
    if span_context is last[0]:
        return last[1]
    # SpanContext is a typed tuple: unpacking it skips six property calls.
    trace_id, span_id, _, flags, state, valid = span_context
    if not valid:
        return None
    carrier = {"traceparent": f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"}
    if state:
        carrier["tracestate"] = state.to_header()
    _last = (span_context, carrier)
    return carrier


#: The span context `caller_context()` formatted last, and its carrier (one tuple, so a
#: thread reading it while another replaces it sees either pair whole).
_last: tuple[SpanContext | None, dict[str, str] | None] = (None, None)


def stamp(call: list[object]) -> bool:
    """Append the caller's context to a stored call ``[args, kwargs]`` when a span is active;
    returns whether it did (the caller then stores the call's id beside it, `results.with_id`,
    so the process span's ``messaging.message.id`` is the id of the call's receipt)."""
    carrier = caller_context()
    if carrier is None:
        return False
    call.append(carrier)
    return True


def trace_stream(stream: Any) -> None:
    """Make ``stream``'s publishes keep the caller's context: each event published while a
    span is active is stored in an envelope (``{STREAM_FIELD: carrier, "event": event}``)."""
    encode = stream.encode

    def traced_encode(event: object) -> bytes:
        carrier = caller_context()
        data: bytes = encode(event if carrier is None else {STREAM_FIELD: carrier, "event": event})
        return data

    stream.encode = traced_encode


def unwrap_event(payload: object) -> tuple[object, dict[str, str] | None]:
    """A stored stream event and its caller's context (None if it was published untraced).
    Every stream task unwraps, traced or not, so a traced publisher can feed any consumer."""
    if type(payload) is dict and len(payload) == 2 and STREAM_FIELD in payload:
        carrier = payload[STREAM_FIELD]
        if "event" in payload and isinstance(carrier, dict):
            return payload["event"], carrier
    return payload, None


def call_context(payload: object) -> dict[str, str] | None:
    """The caller's context a stored pool or bucket call carries (`results.call_meta`, which
    may hold the call id too: the propagator reads only its own fields). Read only: the
    producer hands one carrier to many calls."""
    return call_meta(payload)


# Consuming


def processing(
    task: AnyTask,
    contexts: Sequence[dict[str, str] | None],
    *,
    destination: str,
    batch: bool = False,
    **attributes: AttributeValue | None,
) -> AbstractContextManager[Span | None]:
    """The span a stored call (or batch) runs in; a no-op context when tracing is off.

    ``contexts``: each processed call's stored context (None for untraced ones);
    ``attributes``: redqueue's own (``kind``, ``receives``, ``key``, ``message_id``, ``group``),
    None values left out.
    """
    if not get_config(task.app).tracing:
        return OFF
    return _process_span(task, contexts, destination, batch, attributes)


def links(contexts: Sequence[dict[str, str] | None]) -> tuple[list[Link], int]:
    """Links to the valid stored contexts, at most `MAX_LINKS`; and how many were left
    out over the cap."""
    api = _otel()
    trace, propagator = api["trace"], api["propagator"]
    out: list[Link] = []
    dropped = 0
    for carrier in contexts:
        if not carrier:
            continue
        span_context = trace.get_current_span(propagator.extract(carrier)).get_span_context()
        if not span_context.is_valid:
            continue
        if len(out) < MAX_LINKS:
            out.append(trace.Link(span_context))
        else:
            dropped += 1
    return out, dropped


@contextmanager
def _process_span(
    task: AnyTask,
    contexts: Sequence[dict[str, str] | None],
    destination: str,
    batch: bool,
    extra: dict[str, AttributeValue | None],
) -> Iterator[Span]:
    api = _otel()
    span_links, dropped = links(contexts)
    attributes: dict[str, AttributeValue] = {
        "messaging.system": "redis",
        "messaging.destination.name": destination,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "redqueue.task": task.name,
    }
    if batch:
        # The conventions set the count on batch operations only, never on single messages.
        attributes["messaging.batch.message_count"] = len(contexts)
    if extra.get("message_id") is not None:
        attributes["messaging.message.id"] = extra.pop("message_id")
    if extra.get("group") is not None:
        attributes["messaging.consumer.group.name"] = extra.pop("group")
    for name, value in extra.items():
        if value is not None:
            attributes[f"redqueue.{name}"] = value
    if dropped:
        attributes["redqueue.links_dropped"] = dropped
    kind = api["trace"].SpanKind.CONSUMER
    started = time.perf_counter()
    error: str | None = None
    try:
        with api["tracer"].start_as_current_span(
            f"process {destination}", kind=kind, links=span_links, attributes=attributes
        ) as span:
            yield span
    except BaseException as exc:
        error = type(exc).__qualname__
        raise
    finally:
        metric = {
            "messaging.system": "redis",
            "messaging.destination.name": destination,
            "messaging.operation.name": "process",
        }
        if error is not None:
            metric["error.type"] = error
        api["duration"].record(time.perf_counter() - started, metric)
