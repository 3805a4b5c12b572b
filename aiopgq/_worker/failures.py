"""Failures: how a run that did not succeed becomes its outcome, and its log line.

A failed attempt is retried after its backoff or fails for good; a Snooze or an Abort
has its own outcome; a job that reported progress carries it into every outcome
(sql/complete/complete_special.sql). The dispatcher and the handlers (handlers.py) both use these.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Mapping
from typing import Any

from .._context import JobContext
from .._errors import Abort, Snooze, shown
from .._models import Job
from .completer import Sink
from .contracts import TaskSpec

logger = logging.getLogger("aiopgq.worker")

_MAX_ERROR_CHARS = 8000


def describe_error(exc: BaseException) -> str:
    """Exception type, message and traceback, trimmed for the last_error column."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) > _MAX_ERROR_CHARS:  # the head says where, the tail what
        cut = "\n...\n"
        text = text[:1000] + cut + text[-(_MAX_ERROR_CHARS - 1000 - len(cut)) :]
    return text


def job_fields(job: Job) -> dict[str, Any]:
    """The structured fields of a job's log records."""
    return {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempts}


def report_failure(
    task: TaskSpec,
    job: Job,
    exc: BaseException,
    sink: Sink,
    context: JobContext | None = None,
) -> None:
    """Report a failed run: retried after its backoff, failed at its last attempt; a
    Snooze or an Abort as such; with the progress its context reported, if any."""
    if isinstance(exc, (Snooze, Abort)):
        _settle_signal(task, job, exc, describe_error(exc), sink, context)
        return
    final = job.attempts >= job.max_attempts
    delay = 0.0 if final else task.retry.delay(job.attempts)
    if final:
        logger.warning(
            "job %s (%s, queue %s) failed for good: attempt %s/%s raised %r",
            job.id,
            job.task,
            job.queue,
            job.attempts,
            job.max_attempts,
            exc,
            extra=job_fields(job),
        )
    elif logger.isEnabledFor(logging.WARNING):
        logger.warning(
            "job %s (%s) attempt %s/%s failed: %r; retrying in %.1f s",
            job.id,
            job.task,
            job.attempts,
            job.max_attempts,
            exc,
            delay,
            extra=job_fields(job),
        )
    if context is None or context.progress_value is None:
        sink.error(job, delay, describe_error(exc), False)
    else:
        error = describe_error(exc)
        sink.special(job, "error", delay=delay, error=error, **progress_columns(context))


def fail_now(job: Job, reason: str, sink: Sink) -> None:
    """The job cannot run (or its result cannot be kept): failed at once, no retry."""
    logger.warning(
        "job %s (%s, queue %s) failed: %s",
        job.id,
        job.task,
        job.queue,
        reason,
        extra=job_fields(job),
    )
    sink.error(job, 0.0, reason, True)


def internal_error(task: TaskSpec | None, job: Job, exc: Exception, sink: Sink) -> None:
    """A bug of aiopgq's stopped the job's run: logged, and the attempt failed (retried
    after its backoff), so that the job does not wait for its lease to run again."""
    logger.exception("aiopgq internal error in job %s", job.id, extra=job_fields(job))
    last = job.attempts >= job.max_attempts
    delay = 0.0 if last or task is None else task.retry.delay(job.attempts)
    error = "aiopgq internal error while running the job (a bug: please report it)\n"
    try:
        sink.error(job, delay, error + describe_error(exc), False)
    except Exception:  # the sink itself is at fault: the lease brings the job back
        logger.exception("job %s: could not record the internal error either", job.id)


def unstorable_result(task: TaskSpec, result: Any, exc: Exception) -> str:
    """Why a job whose result is not JSON fails."""
    return (
        f"task {task.name} returned a {type(result).__name__} that cannot be "
        f"stored as JSON ({exc}); the job ran but its result is lost: return "
        "JSON types (or None)"
    )


def unknown_task_message(job: Job, tasks: Mapping[str, TaskSpec]) -> str:
    known = ", ".join(sorted(tasks)) or "none"
    return (
        f"job {job.id}: no task named {shown(job.task)} is registered in this worker "
        f"(known: {known}); register it with @queue.task(name={shown(job.task)}) and "
        "enqueue the job again"
    )


class CancelledFromInside(Exception):
    def __str__(self) -> str:
        return "the job was cancelled from inside (CancelledError raised by the handler)"


def progress_columns(context: JobContext | None) -> dict[str, Any]:
    """The progress a job reported, for its outcome (nothing if it reported none)."""
    if context is None or context.progress_value is None:
        return {}
    return {"progress": context.progress_value, "state": context.state_text}


def _settle_signal(
    task: TaskSpec,
    job: Job,
    exc: Snooze | Abort,
    error: str,
    sink: Sink,
    context: JobContext | None,
) -> None:
    """A handler raised Snooze or Abort: the outcome, and the event for its history."""
    where = job_fields(job)
    if isinstance(exc, Snooze):
        logger.info("job %s (%s) snoozed for %g s", job.id, job.task, exc.seconds, extra=where)
        sink.special(
            job,
            "snooze",
            delay=exc.seconds,
            error=(
                f"snoozed more than its task's max_snoozes ({task.max_snoozes}) times: "
                "counted as a failed attempt"
            ),
            event=json.dumps({"event": "snooze", "seconds": exc.seconds}),
            max_snoozes=task.max_snoozes,
            **progress_columns(context),
        )
        return
    logger.warning("job %s (%s) aborted: %s", job.id, job.task, exc.reason, extra=where)
    sink.special(
        job,
        "error",
        error=error,
        final=True,
        event=json.dumps({"event": "abort", "reason": exc.reason}),
        **progress_columns(context),
    )
