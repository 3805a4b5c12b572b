"""OpenTelemetry tracing of aiopgq (the `otel` extra): a span per enqueue and per run.

>>> queue = Queue(dsn, observers=[aiopgq.tracing.Tracing()])
>>> await add.enqueue(1, b=2)  # inside your request's span: "enqueue demo.add" is its child

The enqueue span's context (W3C `traceparent`, `tracestate` and baggage, through the
globally configured propagator) is stored with the job (the `trace_context` column,
schema version 13); the worker's "run <task>" span is its child, and the current
span while the handler runs, so spans the handler makes belong to the same trace.
Only the producers and workers that trace write or read that column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from ._models import Job
from ._observer import Observer, Outcome
from ._version import __version__


class Tracing(Observer):
    """Spans for enqueues and runs, from `tracer_provider` (default: the global one).

    >>> queue = Queue(dsn, observers=[Tracing()])
    >>> worker = queue.worker()  # the same Queue (with Tracing) in the worker process

    Args:
        tracer_provider: the OpenTelemetry TracerProvider its spans come from (default
            None: the global one).
    """

    reads_trace_context = True

    def __init__(self, *, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("aiopgq", __version__, tracer_provider=tracer_provider)

    def enqueue_started(self, task: str, queue: str, count: int) -> _EnqueueSpan:
        attributes: dict[str, str | int] = {
            "messaging.system": "aiopgq",
            "messaging.operation.type": "send",
            "messaging.destination.name": queue,
            "aiopgq.task": task,
        }
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        span = self._tracer.start_span(
            f"enqueue {task}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        token = context.attach(trace.set_span_in_context(span))
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the current context: this span
        return _EnqueueSpan(span, token, carrier or None)

    def job_started(self, job: Job, trace_context: Mapping[str, str] | None) -> _RunSpan:
        # From the stored context only: a job enqueued without one starts a trace.
        parent = propagate.extract(trace_context) if trace_context else None
        parent = parent if parent is not None else Context()
        span = self._tracer.start_span(
            f"run {job.task}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "aiopgq",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "aiopgq.task": job.task,
                "aiopgq.attempt": job.attempts,
            },
        )
        # Inside the job's own task: the handler sees this span as current.
        token = context.attach(trace.set_span_in_context(span, parent))
        return _RunSpan(span, token)


class _EnqueueSpan:
    def __init__(self, span: trace.Span, token: object, carrier: dict[str, str] | None) -> None:
        self._span = span
        self._token = token
        self.trace_context = carrier

    def ended(self, job_ids: Sequence[int] | None, error: BaseException | None) -> None:
        span = self._span
        if job_ids is not None and len(job_ids) == 1:
            span.set_attribute("messaging.message.id", str(job_ids[0]))
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
        context.detach(self._token)  # type: ignore[arg-type]  # the token attach() gave


class _RunSpan:
    def __init__(self, span: trace.Span, token: object) -> None:
        self._span = span
        self._token = token

    def ended(self, outcome: Outcome, error: str | None) -> None:
        span = self._span
        span.set_attribute("aiopgq.outcome", outcome)
        if error is not None:
            kind, message = _exception_of(error)
            span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}" if kind else message))
            event = {"exception.message": message, "exception.stacktrace": error}
            if kind:
                event["exception.type"] = kind
            span.add_event("exception", event)
        span.end()
        context.detach(self._token)  # type: ignore[arg-type]


def _exception_of(error: str) -> tuple[str, str]:
    """(type, message) from the last_error text: a traceback's last line, or a message."""
    text = error.strip()
    if not text.startswith("Traceback"):
        return "", text
    last = text.splitlines()[-1]
    kind, _, message = last.partition(": ")
    return kind, message
