"""Observing: how a job's outcome reaches the queue's observer as well as the completer.

Used only when the queue has observers (metrics, tracing): the dispatcher then runs
each job through `ObservedSink`, and otherwise never touches this module.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from .._job import Job
from .completer import Sink
from .contracts import JobObservation, Outcome

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
        # The statement fails the job for good at its last attempt (sql/complete_error.sql).
        last = final or job.attempts >= job.max_attempts
        self._end("failed" if last else "retried", error)

    def release(self, job: Job) -> None:
        self._sink.release(job)
        self._end("released", None)

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


def decode_trace_context(text: str | None) -> Mapping[str, str] | None:
    """The trace_context column's JSON text as a carrier dict; None when absent or not
    an object of strings (a row written by hand)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return None
    return value
