"""OpenTelemetry: a span per enqueue and per run, the run's span a child of the
enqueuing request's trace, through the trace context stored with the job."""

from __future__ import annotations

import asyncpg
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aiopgq import Queue, Retry
from aiopgq.tracing import Tracing


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_the_run_span_is_a_child_of_the_enqueuing_request(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    provider, exporter = _provider()
    tracer = provider.get_tracer("test")
    queue = Queue(dsn, schema=schema, observers=[Tracing(tracer_provider=provider)])
    await queue.migrate()

    @queue.task(name="work")
    async def work(n: int) -> None:
        with tracer.start_as_current_span("inside the handler"):
            pass

    async with queue:
        with tracer.start_as_current_span("request") as request:
            job = await work.enqueue(1)
            batch = await work.enqueue_many([{"n": 2}, {"n": 3}])
        # The context travelled in the row: it is the enqueue span's traceparent.
        stored = await conn.fetchval(
            f"SELECT trace_context->>'traceparent' FROM \"{schema}\".jobs WHERE id = $1", job.id
        )
        await queue.worker().run(burst=True)

    spans = exporter.get_finished_spans()
    trace_id = request.get_span_context().trace_id
    enqueue, enqueue_many = _named(spans, "enqueue work")
    assert (
        enqueue.parent is not None and enqueue.parent.span_id == request.get_span_context().span_id
    )
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.attributes is not None
    assert enqueue.attributes["messaging.message.id"] == str(job.id)
    assert enqueue_many.attributes is not None
    assert enqueue_many.attributes["messaging.batch.message_count"] == 2
    assert stored.startswith(f"00-{trace_id:032x}-{enqueue.context.span_id:016x}-")

    runs = {span.attributes["messaging.message.id"]: span for span in _named(spans, "run work")}  # type: ignore[index]
    assert set(runs) == {str(job.id), *(str(j.id) for j in batch)}
    for span in runs.values():
        assert span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == trace_id  # the request's trace
        assert span.status.status_code is StatusCode.UNSET
    assert runs[str(job.id)].parent.span_id == enqueue.context.span_id  # type: ignore[union-attr]
    assert runs[str(batch[0].id)].parent.span_id == enqueue_many.context.span_id  # type: ignore[union-attr]
    # Spans the handler makes are children of its run span.
    run_ids = {span.context.span_id for span in runs.values()}
    inner = _named(spans, "inside the handler")
    assert len(inner) == 3
    assert {span.parent.span_id for span in inner} == run_ids  # type: ignore[union-attr]
    assert {span.context.trace_id for span in inner} == {trace_id}


async def test_a_failing_run_records_the_error_and_an_untraced_job_starts_a_trace(
    dsn: str, schema: str
) -> None:
    provider, exporter = _provider()
    traced = Queue(dsn, schema=schema, observers=[Tracing(tracer_provider=provider)])
    plain = Queue(dsn, schema=schema)  # a producer that does not trace
    await traced.migrate()

    @traced.task(name="boom", max_attempts=2, retry=Retry(base=0, jitter=0))
    async def boom() -> None:
        raise KeyError("missing")

    async with traced, plain:
        await plain.enqueue("boom", {}, max_attempts=2)
        await traced.worker().run(burst=True)

    runs = _named(exporter.get_finished_spans(), "run boom")
    assert [span.attributes["aiopgq.outcome"] for span in runs] == ["retried", "failed"]  # type: ignore[index]
    for span in runs:
        assert span.parent is None  # no stored context: a trace of its own
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "KeyError: 'missing'"
        (event,) = span.events
        assert event.name == "exception"
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "KeyError"
        assert "Traceback" in str(event.attributes["exception.stacktrace"])
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing leaked into our context
