"""Observing: how a job's outcome reaches the queue's observer (or the DEBUG log) as well
as the completer.

Used only when the queue has observers (metrics, tracing), or with DEBUG on: the
dispatcher then runs each job through `ObservedSink` (or `LoggedSink`), and otherwise
never touches these.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from .._models import Job
from .._observer import JobObservation, Outcome
from .completer import Sink

logger = logging.getLogger("aiopgq.worker")


class ObservedSink:
    """Passes each outcome on to `sink` first, then tells the observation once."""

    __slots__ = ("_observation", "_open", "_sink")

    def __init__(self, sink: Sink, observation: JobObservation) -> None:
        self._sink = sink
        self._observation = observation
        self._open = True

    def done(self, job: Job, result: str | None) -> None:
        self._sink.done(job, result)
        self._end("succeeded", None)

    def error(self, job: Job, delay: float, error: str, final: bool) -> None:
        self._sink.error(job, delay, error, final)
        # The statement fails the job for good at its last attempt
        # (sql/complete/complete_error.sql).
        last = final or job.attempts >= job.max_attempts
        self._end("failed" if last else "retried", error)

    def release(self, job: Job) -> None:
        self._sink.release(job)
        self._end("released", None)

    def special(self, job: Job, kind: str, **columns: Any) -> None:
        """A snooze (back to pending, as a release), an abort, or an outcome with progress."""
        self._sink.special(job, kind, **columns)
        if kind == "done":
            self._end("succeeded", None)
        elif kind == "snooze":
            self._end("released", None)
        else:
            last = bool(columns.get("final")) or job.attempts >= job.max_attempts
            self._end("failed" if last else "retried", columns.get("error"))

    def cancelled(self, job: Job) -> None:
        self._sink.cancelled(job)
        self._end("cancelled", None)

    def settle(self) -> None:
        """The job's task ended without an outcome (an internal error, logged): its
        lease brings it back, so to the observer it was released."""
        self._end("released", None)

    def _end(self, outcome: Outcome, error: str | None) -> None:
        if not self._open:
            return
        self._open = False
        try:
            self._observation.ended(outcome, error)
        except Exception:  # an observer's bug must not cost the job its outcome
            logger.exception("an observer failed at the end of a job")


class LoggedSink:
    """A sink that remembers the outcome it passed on (for the DEBUG line at a job's end)."""

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self.outcome = "no outcome (cancelled)"

    def done(self, job: Job, result: str | None) -> None:
        self.outcome = "done"
        self._sink.done(job, result)

    def error(self, job: Job, delay: float, error: str, final: bool) -> None:
        if final or job.attempts >= job.max_attempts:
            self.outcome = "failed"
        else:
            self.outcome = f"failed, retry in {delay:.1f} s"
        self._sink.error(job, delay, error, final)

    def release(self, job: Job) -> None:
        self.outcome = "released to pending (worker stopping)"
        self._sink.release(job)

    def special(self, job: Job, kind: str, **columns: Any) -> None:
        self.outcome = {"done": "done", "snooze": "snoozed"}.get(kind, "failed, or retried")
        self._sink.special(job, kind, **columns)

    def cancelled(self, job: Job) -> None:
        self.outcome = "cancelled while running"
        self._sink.cancelled(job)


def decode_trace_context(text: str | None) -> Mapping[str, str] | None:
    """The trace_context column's JSON text as a carrier dict; None when absent or not
    an object of strings (a row written by hand)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return None
    return value
