"""Observers: the hooks aiopgq calls as jobs are enqueued, cancelled and run.

aiopgq.metrics.Metrics and aiopgq.tracing.Tracing are observers; so is any subclass
of Observer. A queue without observers calls none of this: its enqueue and its
workers' dispatcher take the paths they take without the feature.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal, Protocol

from ._models import Job

logger = logging.getLogger("aiopgq.observer")


# How a job's run ended, as an observer hears it: done; failed with attempts left;
# failed for good; given back to pending unfinished (the worker stopped).
Outcome = Literal["succeeded", "retried", "failed", "released", "cancelled"]


class JobObservation(Protocol):
    """One job's run as an observer follows it: told once how it ended."""

    def ended(self, outcome: Outcome, error: str | None) -> None: ...


class EnqueueObservation(Protocol):
    """One enqueue call as an observer follows it."""

    @property
    def trace_context(self) -> Mapping[str, str] | None:
        """Stored with the jobs (trace_context column); the worker hands it back to
        job_started. None: store nothing."""

    def ended(self, job_ids: Sequence[int] | None, error: BaseException | None) -> None:
        """The insert committed (job_ids; None for copy_many, which returns no ids),
        or raised `error`."""


class Observer:
    """Hooks called on the event loop as jobs are enqueued, cancelled and run.

    Subclass it and override what you need; keep each hook quick (no I/O: it runs
    once per job). A hook that raises is logged and the job goes on.

    >>> class Log(aiopgq.Observer):
    ...     def cancelled(self, job_id, task, queue): print("cancelled", job_id)
    >>> queue = Queue(dsn, observers=[Log()])
    """

    reads_trace_context: bool = False
    """True: workers claim each job with its trace context (one column more)."""

    def enqueue_started(self, task: str, queue: str, count: int) -> EnqueueObservation | None:
        """`count` jobs of `task` are about to be inserted into `queue`.

        Args:
            task: the task's name.
            queue: the queue's name.
            count: how many jobs the call inserts (1 for enqueue).

        Returns:
            An observation told how the insert ended, or None (the default) to follow
                nothing.
        """
        return None

    def cancelled(self, job_id: int, task: str, queue: str) -> None:
        """queue.cancel() cancelled a job (pending, or running: its run then ends "cancelled").

        Args:
            job_id: the cancelled job's id.
            task: its task's name.
            queue: its queue's name.
        """

    def job_started(
        self, job: Job, trace_context: Mapping[str, str] | None
    ) -> JobObservation | None:
        """A worker is about to run `job` (called inside the job's own asyncio task);
        the returned observation's ended(outcome, error) is called once when the run
        ends: outcome is "succeeded", "retried", "failed", "released" or "cancelled".

        Args:
            job: the job, as claimed (status running, `attempts` this run's).
            trace_context: what the enqueue's observation stored with the job (W3C trace
                headers), when `reads_trace_context` is True; else None.

        Returns:
            The run's observation, or None (the default) to follow nothing.
        """
        return None


def combine(observers: Sequence[Observer]) -> Observer | None:
    """The one observer a queue calls: None, the only one, or all of them in order."""
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]
    return _All(list(observers))


class _All(Observer):
    def __init__(self, observers: list[Observer]) -> None:
        self._observers = observers
        self.reads_trace_context = any(o.reads_trace_context for o in observers)

    # Each observer on its own: one that raises is logged, the others still hear.

    def enqueue_started(self, task: str, queue: str, count: int) -> EnqueueObservation | None:
        found = []
        for observer in self._observers:
            try:
                seen = observer.enqueue_started(task, queue, count)
            except Exception:
                logger.exception("observer %r failed at the start of an enqueue", observer)
                continue
            if seen is not None:
                found.append(seen)
        return _AllEnqueue(found) if found else None

    def cancelled(self, job_id: int, task: str, queue: str) -> None:
        for observer in self._observers:
            try:
                observer.cancelled(job_id, task, queue)
            except Exception:
                logger.exception("observer %r failed on the cancel of job %s", observer, job_id)

    def job_started(
        self, job: Job, trace_context: Mapping[str, str] | None
    ) -> JobObservation | None:
        found = []
        for observer in self._observers:
            try:
                seen = observer.job_started(job, trace_context)
            except Exception:
                logger.exception("observer %r failed at the start of job %s", observer, job.id)
                continue
            if seen is not None:
                found.append(seen)
        return _AllRun(found) if found else None


class _AllEnqueue:
    def __init__(self, parts: list[EnqueueObservation]) -> None:
        self._parts = parts
        contexts = [p.trace_context for p in parts if p.trace_context is not None]
        self.trace_context = contexts[0] if contexts else None

    def ended(self, job_ids: Sequence[int] | None, error: BaseException | None) -> None:
        for part in reversed(self._parts):  # the last started ends first, like nested spans
            try:
                part.ended(job_ids, error)
            except Exception:
                logger.exception("an observer failed at the end of an enqueue")


class _AllRun:
    def __init__(self, parts: list[JobObservation]) -> None:
        self._parts = parts

    def ended(self, outcome: Outcome, error: str | None) -> None:
        for part in reversed(self._parts):
            try:
                part.ended(outcome, error)
            except Exception:
                logger.exception("an observer failed at the end of a job")


class ObservedEnqueue:
    """An observed enqueue call: the trace context to store, then the ids made."""

    def __init__(self, observation: EnqueueObservation | None) -> None:
        self._observation = observation
        context = observation.trace_context if observation is not None else None
        self.trace: str | None = json.dumps(dict(context)) if context else None
        self.job_ids: Sequence[int] | None = None


@contextlib.contextmanager
def observe_enqueue(
    observer: Observer, task: str, queue: str, count: int
) -> Iterator[ObservedEnqueue]:
    """Around one observed enqueue: set `job_ids` on what it yields before leaving."""
    try:
        observation = observer.enqueue_started(task, queue, count)
    except Exception:
        logger.exception("an observer failed at the start of an enqueue of %s", task)
        observation = None
    seen = ObservedEnqueue(observation)
    try:
        yield seen
    except BaseException as exc:
        _end(observation, None, exc)
        raise
    _end(observation, seen.job_ids, None)


def _end(
    observation: EnqueueObservation | None,
    job_ids: Sequence[int] | None,
    error: BaseException | None,
) -> None:
    if observation is None:
        return
    try:
        observation.ended(job_ids, error)
    except Exception:
        logger.exception("an observer failed at the end of an enqueue")
