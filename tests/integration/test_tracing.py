"""Tracing (redqueue_tracing): stored calls keep their caller's trace context and run in
``process`` spans linked to it. The real OpenTelemetry SDK (in-memory exporter), real workers,
real Redis; what Redis holds is read back."""

import json
import subprocess
import sys
import threading

import pytest
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from celery_redqueue import BucketTask, ConfigurationError, PoolTask, StreamTask
from celery_redqueue.tasks import tracing

from .conftest import ROOT, running_worker

_EXPORTER = InMemorySpanExporter()
_METRICS = InMemoryMetricReader()


@pytest.fixture(scope="module")
def provider():
    """The process's tracer provider (OpenTelemetry allows one per process), exporting to
    memory as each span ends."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    metrics.set_meter_provider(MeterProvider(metric_readers=[_METRICS]))
    return current


@pytest.fixture
def spans(provider):
    """The spans ended during the test."""
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def tracer(provider):
    return trace.get_tracer("tests.requests")


@pytest.fixture
def traced_app(app):
    app.conf.redqueue_tracing = True
    return app


@pytest.fixture
def celery_instrumentation(provider):
    """OpenTelemetry's Celery instrumentation on for the test (its run spans around each
    message), off again afterwards."""
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
    yield
    instrumentor.uninstrument()


def _process_spans(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == f"process {name}"]


def _ids(span_context):
    return span_context.trace_id, span_context.span_id


def _linked(process_spans):
    return sorted(_ids(link.context) for s in process_spans for link in s.links)


def _requests(tracer, count, call):
    """``count`` traced requests, each calling ``call(i)`` inside its own root span."""
    made = []
    for i in range(count):
        with tracer.start_as_current_span(f"request {i}") as span:
            call(i)
        made.append(_ids(span.get_span_context()))
    return sorted(made)


def test_three_requests_are_linked_from_the_pool_process_spans(traced_app, spans, tracer, wait_for):
    done = []

    @traced_app.task(base=PoolTask, pool_size=100)
    def record(x):
        done.append(x)

    requests = _requests(tracer, 3, record.delay)
    with running_worker(traced_app):
        wait_for(lambda: len(_process_spans(spans, record.name)) == 3, message="3 spans")
    assert sorted(done) == [0, 1, 2]
    processed = _process_spans(spans, record.name)
    assert _linked(processed) == requests
    for span in processed:
        assert span.kind is SpanKind.CONSUMER
        assert len(span.links) == 1
        attributes = dict(span.attributes)
        assert attributes["messaging.system"] == "redis"
        assert attributes["messaging.destination.name"] == record.name
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["redqueue.kind"] == "pool"
        assert attributes["redqueue.receives"] == 1
        assert attributes["messaging.message.id"]
        assert "messaging.batch.message_count" not in attributes  # a single call
        # Each runs in its own trace (no drain span without the Celery instrumentation),
        # never inside a request's.
        assert span.context.trace_id not in {t for t, _ in requests}


def _durations(name):
    """Data points of messaging.process.duration for destination ``name``."""
    data = _METRICS.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "messaging.process.duration"
        for point in metric.data.data_points
        if point.attributes.get("messaging.destination.name") == name
    ]


def test_processing_is_timed_in_the_duration_histogram(traced_app, spans, tracer, wait_for):
    @traced_app.task(base=PoolTask, pool_size=100, pool_name="timed")
    def record(x):
        if x == 2:
            raise ValueError("bad call")

    _requests(tracer, 3, record.delay)
    with running_worker(traced_app):
        wait_for(lambda: len(_process_spans(spans, "timed")) == 3, message="3 spans")
    points = {p.attributes.get("error.type"): p.count for p in _durations("timed")}
    assert points == {None: 2, "ValueError": 1}


def test_a_batch_body_runs_in_one_span_linking_every_call(traced_app, spans, tracer, wait_for):
    seen = []

    @traced_app.task(base=PoolTask, pool_size=100, pool_batch=True, pool_name="batched")
    def record(calls):
        seen.append(len(calls))

    requests = _requests(tracer, 3, record.delay)
    record.delay(99)  # no active span: stored without a context, not linked
    with running_worker(traced_app):
        wait_for(lambda: _process_spans(spans, "batched"), message="the batch span")
    (span,) = _process_spans(spans, "batched")
    assert seen == [4]
    assert _linked([span]) == requests
    assert span.attributes["messaging.batch.message_count"] == 4
    assert span.attributes["messaging.destination.name"] == "batched"


def test_links_are_capped_and_the_rest_counted(traced_app, spans, tracer, wait_for):
    @traced_app.task(base=PoolTask, pool_size=1000, pool_batch=True, pool_batch_size=200)
    def record(calls):
        pass

    requests = _requests(tracer, tracing.MAX_LINKS + 5, record.delay)
    with running_worker(traced_app):
        wait_for(lambda: _process_spans(spans, record.name), message="the batch span")
    (span,) = _process_spans(spans, record.name)
    assert len(span.links) == tracing.MAX_LINKS
    assert span.attributes["redqueue.links_dropped"] == 5
    assert set(_linked([span])) <= set(requests)


def test_a_failing_call_sets_the_status_and_records_the_exception(
    traced_app, spans, tracer, wait_for
):
    @traced_app.task(base=PoolTask, pool_size=10)
    def record(x):
        if x == 1:
            raise ValueError("bad call")

    requests = _requests(tracer, 2, record.delay)
    with running_worker(traced_app):
        wait_for(lambda: record.pool.stats().processed + record.pool.stats().failed == 2)
        wait_for(lambda: len(_process_spans(spans, record.name)) == 2, message="2 spans")
    by_link = {_ids(s.links[0].context): s for s in _process_spans(spans, record.name)}
    ok, failed = by_link[requests[0]], by_link[requests[1]]
    if ok.status.status_code is StatusCode.ERROR:
        ok, failed = failed, ok
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.attributes["exception.type"] for e in failed.events] == ["ValueError"]
    assert ok.status.status_code is not StatusCode.ERROR and not ok.events


def test_a_traced_bucket_call_is_linked(traced_app, spans, tracer, wait_for):
    @traced_app.task(base=BucketTask, bucket_key="tenant", bucket_rate="100/s")
    def fetch(tenant, path):
        pass

    requests = _requests(tracer, 1, lambda i: fetch.delay("acme", "/"))
    with running_worker(traced_app):
        wait_for(lambda: _process_spans(spans, fetch.name), message="the bucket span")
    (span,) = _process_spans(spans, fetch.name)
    assert _linked([span]) == requests
    assert span.kind is SpanKind.CONSUMER
    assert span.attributes["redqueue.kind"] == "bucket"
    assert span.attributes["redqueue.key"] == "acme"
    assert span.attributes["redqueue.receives"] == 1
    assert span.attributes["messaging.destination.name"] == fetch.name


def test_a_stream_event_is_linked_from_each_group(traced_app, spans, tracer, wait_for):
    got = {"sms": [], "points": []}
    tasks = []
    for group in got:

        @traced_app.task(
            base=StreamTask, name=f"shop.{group}", stream_name="orders", stream_group=group
        )
        def consume(event, group=group):
            got[group].append(event)

        tasks.append(consume)
    requests = _requests(tracer, 1, lambda i: tasks[0].stream.publish({"order": 7}))
    with running_worker(traced_app):
        wait_for(lambda: len(_process_spans(spans, "orders")) == 2, message="2 group spans")
    assert got == {"sms": [{"order": 7}], "points": [{"order": 7}]}  # the envelope is gone
    processed = _process_spans(spans, "orders")
    assert _linked(processed) == requests * 2
    assert sorted(s.attributes["messaging.consumer.group.name"] for s in processed) == [
        "points",
        "sms",
    ]
    assert {s.attributes["redqueue.kind"] for s in processed} == {"stream"}


def _stored_pool_payloads(client, pool):
    """What the pool's items hold, without the entry id prefix (``<hex id>:<payload>``)."""
    return [m.split(b":", 1)[1] for m in client.zrange(pool.keys("items"), 0, -1)]


def test_tracing_off_stores_today_payload_even_under_a_span(app, spans, tracer, redqueue_redis):
    @app.task(base=PoolTask, pool_size=10)
    def record(x):
        pass

    with tracer.start_as_current_span("request"):
        record.delay(1)
    assert _stored_pool_payloads(redqueue_redis, record.pool) == [record.pool.encode([[1], {}])]


def test_tracing_on_without_a_span_stores_today_payload(traced_app, spans, redqueue_redis):
    @traced_app.task(base=PoolTask, pool_size=10)
    def record(x):
        pass

    @traced_app.task(base=BucketTask, bucket_key="k")
    def fetch(k):
        pass

    record.delay(1)
    fetch.delay("a")
    assert _stored_pool_payloads(redqueue_redis, record.pool) == [record.pool.encode([[1], {}])]
    slots = redqueue_redis.hvals(fetch.bucket.keys("items"))
    assert len(slots) == 1 and slots[0].endswith(b":" + fetch.bucket.encode([["a"], {}]))


def test_tracing_on_stores_the_context_with_the_payload(traced_app, spans, tracer, redqueue_redis):
    @traced_app.task(base=PoolTask, pool_size=10)
    def record(x):
        pass

    with tracer.start_as_current_span("request") as span:
        receipt = record.delay(1)
    (stored,) = _stored_pool_payloads(redqueue_redis, record.pool)
    args, kwargs, meta = json.loads(stored)
    ctx = span.get_span_context()
    assert (args, kwargs) == ([1], {})
    flags = int(ctx.trace_flags)
    # The context, and the call's id beside it (what its process span names).
    assert meta == {
        "traceparent": f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}",
        "id": receipt.id,
    }


def test_a_receipt_is_found_in_the_trace_by_its_id(traced_app, spans, tracer, wait_for):
    """``Receipt.id`` is the ``messaging.message.id`` of the span that processed the call, for
    pools, buckets and streams alike, so a receipt logged by the producer leads to its span
    (and the span's link to the request that made the call)."""

    @traced_app.task(base=PoolTask, pool_size=100)
    def record(x):
        pass

    @traced_app.task(base=BucketTask, bucket_key="k", bucket_rate="100/s")
    def fetch(k, n):
        pass

    @traced_app.task(base=StreamTask, stream_name="receipts", stream_group="audit")
    def audit(event):
        pass

    receipts = {record.name: {}, fetch.name: {}, "receipts": {}}
    for i in range(3):
        with tracer.start_as_current_span(f"request {i}") as span:
            request = _ids(span.get_span_context())
            receipts[record.name][record.delay(i).id] = request
            receipts[fetch.name][fetch.delay("a", i).id] = request
            receipts["receipts"][audit.stream.publish({"n": i}).id] = request
    with running_worker(traced_app):
        wait_for(
            lambda: all(len(_process_spans(spans, name)) == 3 for name in receipts),
            message="3 process spans for each structure",
        )
    for name, made in receipts.items():
        assert all(made), name  # every receipt has an id
        processed = _process_spans(spans, name)
        by_id = {s.attributes["messaging.message.id"]: s for s in processed}
        assert set(by_id) == set(made), name
        for receipt_id, request in made.items():
            assert [_ids(link.context) for link in by_id[receipt_id].links] == [request]


def test_a_coalescing_pool_stores_no_context(traced_app, spans, tracer, redqueue_redis):
    @traced_app.task(base=PoolTask, pool_size=10, pool_coalesce=True)
    def count(key, count=1):
        pass

    for _ in range(2):
        with tracer.start_as_current_span("request"):
            count.delay("k")
    assert count.pool.stats().entries == 1  # still merged


def test_a_buffered_call_keeps_its_own_context(traced_app, spans, tracer, redqueue_redis):
    @traced_app.task(base=PoolTask, pool_size=10)
    def record(x):
        pass

    with record.buffer():
        requests = _requests(tracer, 2, record.delay)
    stored = [json.loads(p) for p in _stored_pool_payloads(redqueue_redis, record.pool)]
    got = sorted(
        (int(c["traceparent"][3:35], 16), int(c["traceparent"][36:52], 16)) for _, _, c in stored
    )
    assert got == requests


def test_eager_mode_runs_traced_calls(traced_app, spans, tracer):
    traced_app.conf.task_always_eager = True
    done = []

    @traced_app.task(base=PoolTask, pool_size=10)
    def record(x):
        done.append(x)

    with tracer.start_as_current_span("request"):
        record.delay(5)
    assert done == [5]


def test_the_setting_must_be_a_boolean(app):
    app.conf.redqueue_tracing = "yes"

    @app.task(base=PoolTask, pool_size=10)
    def record(x):
        pass

    with pytest.raises(ConfigurationError, match="redqueue_tracing"):
        record.delay(1)


def test_with_the_celery_instrumentation_spans_nest_without_orphans(
    traced_app, spans, tracer, wait_for, celery_instrumentation
):
    """Both on: each process span is a child of the drain job's ``run`` span, nothing is
    duplicated, and every exported span's parent is exported too."""
    done = []

    @traced_app.task(base=PoolTask, pool_size=100)
    def record(x):
        done.append(x)

    with running_worker(traced_app):
        requests = _requests(tracer, 3, record.delay)
        wait_for(lambda: len(_process_spans(spans, record.name)) == 3, message="3 spans")
        wait_for(lambda: record.pool.stats().drains == 0, message="drain ended")
    finished = spans.get_finished_spans()
    processed = _process_spans(spans, record.name)
    assert sorted(done) == [0, 1, 2]
    assert _linked(processed) == requests
    runs = {s.context.span_id: s for s in finished if s.name == f"run/{record.name}"}
    assert runs, [s.name for s in finished]
    for span in processed:
        assert span.parent is not None and span.parent.span_id in runs
    by_id = {s.context.span_id for s in finished}
    orphans = [s.name for s in finished if s.parent is not None and s.parent.span_id not in by_id]
    assert orphans == []
    # One run span per drain job the calls sent, and no run span for a stored call.
    sends = [s for s in finished if s.name == f"apply_async/{record.name}"]
    assert len(runs) == len(sends) >= 1
    assert len(processed) == 3


_PRODUCER = """
import importlib.abc, json, logging, sys
if sys.argv[1] == "missing":
    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                raise ImportError(f"No module named {name!r}")
    sys.meta_path.insert(0, NotInstalled())
logging.basicConfig(level=logging.WARNING)
from celery import Celery
from celery_redqueue import PoolTask
from celery_redqueue.tasks import tracing
from celery_redqueue.tasks.config import get_config
from celery_redqueue.testing import celery_test_config
app = Celery("p", set_as_current=False)
app.conf.update(celery_test_config(sys.argv[2], sys.argv[3]))
app.conf.redqueue_tracing = sys.argv[1] != "off"
@app.task(base=PoolTask, pool_size=10, shared=False)
def record(x):
    pass
record.delay(1)
print(json.dumps({"otel_loaded": bool(tracing._api), "traced": get_config(app).tracing,
                  "items": record.pool.keys("items")}))
"""


@pytest.mark.parametrize("mode", ["off", "missing"])
def test_off_or_not_installed_loads_nothing_and_stores_today_payload(
    mode, redqueue_server_url, redqueue_prefix, redqueue_redis
):
    """Off: redqueue never imports OpenTelemetry. On but not installed: a warning, and the
    calls are stored untraced."""
    out = subprocess.run(
        [sys.executable, "-c", _PRODUCER, mode, redqueue_server_url, redqueue_prefix],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    reply = json.loads(out.stdout)
    assert (reply["otel_loaded"], reply["traced"]) == (False, False)
    assert ("OpenTelemetry is not installed" in out.stderr) == (mode == "missing")
    (member,) = redqueue_redis.zrange(reply["items"], 0, -1)
    assert member.split(b":", 1)[1] == b"[[1],{}]"


def test_stored_contexts_survive_a_consumer_without_tracing(app, spans, tracer, wait_for):
    """A traced producer feeding a worker with tracing off: the calls run as usual."""
    done = []
    lock = threading.Lock()

    @app.task(base=PoolTask, pool_size=10)
    def record(x):
        with lock:
            done.append(x)

    carrier = {"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}
    record.pool.add([[1], {}, carrier])  # as a traced producer stores it
    record.send_drain()
    with running_worker(app):
        wait_for(lambda: done == [1], message="the call ran")
    assert not _process_spans(spans, record.name)


def test_a_traced_call_with_a_result_carries_both(
    traced_app, spans, tracer, redqueue_redis, redqueue_server_url, redqueue_prefix, wait_for
):
    """Per-call results share the stored call's third element with the trace context: both
    arrive (the result under the receipt's id, the link to the request)."""
    traced_app.conf.result_backend = redqueue_server_url
    traced_app.conf.result_backend_transport_options = {
        "global_keyprefix": f"{redqueue_prefix}:res:"
    }

    @traced_app.task(base=PoolTask, pool_results=True, pool_drain_interval=None)
    def square(i):
        return i * i

    receipts = []
    requests = _requests(tracer, 2, lambda i: receipts.append(square.delay(i + 3)))
    stored = [json.loads(p) for p in _stored_pool_payloads(redqueue_redis, square.pool)]
    assert sorted(meta["id"] for _, _, meta in stored) == sorted(r.id for r in receipts)
    assert all(meta["traceparent"].startswith("00-") for _, _, meta in stored)
    with running_worker(traced_app):
        assert [r.get(timeout=30) for r in receipts] == [9, 16]
        wait_for(lambda: len(_process_spans(spans, square.name)) == 2, message="2 spans")
    assert _linked(_process_spans(spans, square.name)) == requests


def test_a_by_name_call_links_to_the_worker_span_that_stored_it(
    traced_app, spans, tracer, wait_for, celery_instrumentation
):
    """``send_task`` by name (a service that does not import the task): the worker stores the
    call under the Celery instrumentation's run span of that message, in the sender's trace,
    and the span that processes the call links there."""
    done = []

    @traced_app.task(base=PoolTask, pool_size=100)
    def record(x):
        done.append(x)

    with running_worker(traced_app):
        with tracer.start_as_current_span("request") as request:
            traced_app.send_task(record.name, (5,))
        wait_for(lambda: _process_spans(spans, record.name), message="the process span")
    assert done == [5]
    (span,) = _process_spans(spans, record.name)
    (link,) = span.links
    stored_under = [
        s for s in spans.get_finished_spans() if s.context.span_id == link.context.span_id
    ]
    assert [s.name for s in stored_under] == [f"run/{record.name}"]
    assert link.context.trace_id == request.get_span_context().trace_id
