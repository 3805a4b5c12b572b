"""Dispatcher: runs fetched jobs under the worker's task group and reports outcomes."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import traceback
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any

import anyio
import asyncpg

from .._context import JobContext
from .._errors import Abort, LeaseLost, Snooze
from .._job import Job, _current_job, job_from_claimed_row
from .._payload import decode_payload, encode_result
from .completer import Completer, Sink
from .contracts import JobObserver, TaskSpec
from .handlers import Handlers, progress_columns, settle_signal
from .observing import LoggedSink, ObservedSink, decode_trace_context
from .stops import StopRequests
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.worker")

_MAX_ERROR_CHARS = 8000

# Each job runs in an asyncio task of this name plus its id: the watchdog reads it.
JOB_TASK_PREFIX = "aiopgq job "


def describe_error(exc: BaseException) -> str:
    """Exception type, message and traceback, trimmed for the last_error column."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:1000] + "\n...\n" + text[-(_MAX_ERROR_CHARS - 1000) :]
    return text


# _run or _run_logged, chosen once per batch.
_Run = Callable[..., Coroutine[Any, Any, None]]


class Dispatcher:
    """Starts one task per job and turns its ending into an outcome.

    Every job that ends failed is logged at WARNING (id, task, queue, reason); with
    DEBUG on, each job's start and end too. Whether DEBUG is on is asked once per
    batch: with it off, a job costs nothing more. With an `observer` (metrics, tracing),
    each job's task tells it when the job starts and how it ended; the claimed rows then
    carry the trace context as a tenth column when `traced`. With `handlers`, jobs of
    tasks that take a JobContext, or of a queue with middleware, run through them; the
    claimed rows then carry each job's checkpoint as their last column.
    """

    def __init__(
        self,
        tasks: Mapping[str, TaskSpec],
        completer: Completer,
        wakeups: Wakeups,
        *,
        observer: JobObserver | None = None,
        traced: bool = False,
        stops: StopRequests | None = None,
        handlers: Handlers | None = None,
    ) -> None:
        self._tasks = tasks
        self._completer = completer
        self._observer = observer
        self._traced = traced
        self._slot_freed = wakeups.progress
        self.running: dict[int, Job] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._stops = stops or StopRequests()
        self._handlers = handlers
        self._job_tasks: dict[int, asyncio.Task[None]] = {}  # by job id

    @property
    def releasing(self) -> bool:
        """Set at the shutdown deadline: cancelled jobs go back to pending."""
        return self._stops.all

    def start(
        self, rows: list[asyncpg.Record], sink: Sink | None = None
    ) -> list[asyncio.Task[None]]:
        """Start one task per claimed row; they are ours until they end or cancel_all()."""
        target = sink if sink is not None else self._completer
        run = self._run_logged if logger.isEnabledFor(logging.DEBUG) else self._run
        if self._observer is not None or self._handlers is not None:  # per batch: the
            return self._start_extended(rows, target, run)  # loop below stays as it was
        if rows:
            self._idle.clear()
        started = []
        instants: dict[float, datetime] = {}
        # The loop's own create_task: asyncio.create_task's wrapper looks the loop up and
        # names the task afterwards, per task; the task factory is the same.
        create_task = asyncio.get_running_loop().create_task
        for row in rows:
            job, payload = job_from_claimed_row(row, instants)
            self.running[job.id] = job
            # Plain asyncio tasks, owned by this dispatcher (cancel_all): a task group's
            # per-task bookkeeping costs more than the no-op jobs we are measured on. Each
            # task forgets itself as it ends (no done callback: one loop turn less per job).
            task = create_task(run(job, payload, target), name=f"{JOB_TASK_PREFIX}{job.id}")
            self._job_tasks[job.id] = task
            started.append(task)
        return started

    def _start_extended(
        self, rows: list[asyncpg.Record], sink: Sink, run: _Run
    ) -> list[asyncio.Task[None]]:
        """start(), with an observer (each job run by _run_observed) and/or handlers (each
        job of a task they want run through them): the rows have more columns, the trace
        context (traced) and the checkpoint (handlers), in that order."""
        observer, handlers, traced = self._observer, self._handlers, self._traced
        if rows:
            self._idle.clear()
        started = []
        instants: dict[float, datetime] = {}
        create_task = asyncio.get_running_loop().create_task
        for row in rows:
            job, payload = job_from_claimed_row(row[:9], instants)
            trace = decode_trace_context(row[9]) if traced else None
            checkpoint, handled = None, None
            if handlers is not None:
                checkpoint = row[-1]
                handled = handlers if handlers.wants(self._tasks.get(job.task)) else None
            self.running[job.id] = job
            if observer is None:
                job_run = run(job, payload, sink, handled, checkpoint)
            else:
                job_run = self._run_observed(
                    job, payload, sink, observer, trace, run, handled, checkpoint
                )
            task = create_task(job_run, name=f"{JOB_TASK_PREFIX}{job.id}")
            self._job_tasks[job.id] = task
            started.append(task)
        return started

    def fence(self, job_id: int, reason: str) -> None:
        """Cancel a running job whose lease this worker could not renew (leases.py); it
        ends with LeaseLost as its error, if that can still be written."""
        task = self._job_tasks.get(job_id)
        fenced = self._stops.fenced
        if task is None or job_id in fenced or job_id in self._stops.settled:
            return
        for gone in [i for i in fenced if i not in self.running]:  # ended without a word
            del fenced[gone]
        where = {"job_id": job_id, "task": self.running[job_id].task}
        logger.warning("job %s: %s", job_id, reason, extra=where)
        self._stops.fenced[job_id] = reason
        task.cancel()

    def fail_now(self, job: Job, reason: str, sink: Sink) -> None:
        _fail_now(job, reason, sink)

    def stop_reason(self, job: Job) -> BaseException:
        """Why a job's task was cancelled (not at shutdown): fenced, or from inside."""
        reason = self._stops.fenced.pop(job.id, None)
        return _Cancelled() if reason is None else LeaseLost(reason)

    async def _run_observed(
        self,
        job: Job,
        payload_text: str,
        sink: Sink,
        observer: JobObserver,
        trace: Mapping[str, str] | None,
        run: _Run,
        handlers: Handlers | None,
        checkpoint: str | None,
    ) -> None:
        # Called inside the job's own task: what the observer sets in the context (the
        # current span) is seen by the handler, and by no other job.
        try:
            observation = observer.job_started(job, trace)
        except Exception:
            logger.exception("an observer failed at the start of job %s", job.id)
            observation = None
        if observation is None:
            await run(job, payload_text, sink, handlers, checkpoint)
            return
        observed = ObservedSink(sink, observation)
        try:
            await run(job, payload_text, observed, handlers, checkpoint)
        finally:
            observed.settle()

    async def cancel_all(self) -> None:
        """Cancel every running job (they are released to pending) and wait for them."""
        self._stops.all = True
        tasks = list(self._job_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Return when no job is running."""
        await self._idle.wait()

    async def _run(
        self,
        job: Job,
        payload_text: str,
        sink: Sink,
        handlers: Handlers | None = None,
        checkpoint: str | None = None,
    ) -> None:
        task = self._tasks.get(job.task)
        try:
            if task is None:
                _fail_now(job, _unknown_task_message(job, self._tasks), sink)
                return
            try:
                payload = decode_payload(payload_text)
                if not isinstance(payload, dict):
                    raise TypeError(f"payload is a JSON {type(payload).__name__}, not an object")
                task.check_keywords(payload)
                arguments = payload
            except (TypeError, ValueError) as exc:
                message = (
                    f"job {job.id} of task {job.task} cannot run: its payload does not match "
                    f"the task's arguments ({exc}); fix the producer and enqueue it again"
                )
                _fail_now(job, message, sink)
                return
            if handlers is None:
                await self._call(task, job, arguments, sink)
            else:
                await handlers.call(self, task, job, arguments, sink, checkpoint)
        except Exception:  # a bug of ours: _call reports the job's own exceptions
            logger.exception("aiopgq internal error in job %s", job.id)
        finally:
            self._job_tasks.pop(job.id, None)  # by id: cheaper than asyncio.current_task()
            del self.running[job.id]
            if not self.running:
                self._idle.set()
            self._slot_freed()

    async def _run_logged(
        self,
        job: Job,
        payload_text: str,
        sink: Sink,
        handlers: Handlers | None = None,
        checkpoint: str | None = None,
    ) -> None:
        """_run with a DEBUG line at the job's start and one at its end (DEBUG on only)."""
        extra = _fields(job)
        logger.debug(
            "job %s (%s) started on queue %s, attempt %s/%s",
            job.id,
            job.task,
            job.queue,
            job.attempts,
            job.max_attempts,
            extra=extra,
        )
        observed = LoggedSink(sink)
        started = time.monotonic()
        try:
            await self._run(job, payload_text, observed, handlers, checkpoint)
        finally:
            logger.debug(
                "job %s (%s) ended after %.3f s: %s",
                job.id,
                job.task,
                time.monotonic() - started,
                observed.outcome,
                extra=extra,
            )

    async def _call(self, task: TaskSpec, job: Job, arguments: dict[str, Any], sink: Sink) -> None:
        job = _with_payload(job, arguments)
        token = _current_job.set(job)
        try:
            if task.timeout is None:  # the common case: no cancel scope to set up
                if task.is_async:  # awaited here: a coroutine frame less per job
                    result = await task.fn(**arguments)
                else:
                    result = await _invoke(task, arguments)
            else:
                with anyio.move_on_after(task.timeout) as deadline:
                    result = await _invoke(task, arguments)
                if deadline.cancelled_caught:
                    raise TimeoutError(f"task {task.name} exceeded its {task.timeout} s timeout")
        except asyncio.CancelledError:
            if self.releasing:
                sink.release(job)
                raise
            self.failed(task, job, self.stop_reason(job), sink)
        except BaseException as exc:
            self.failed(task, job, exc, sink)
        else:
            try:
                result_text = encode_result(result)
            except (TypeError, ValueError) as exc:
                message = (
                    f"task {task.name} returned a {type(result).__name__} that cannot be "
                    f"stored as JSON ({exc}); the job ran but its result is lost: return "
                    "JSON types (or None)"
                )
                _fail_now(job, message, sink)
                return
            sink.done(job, result_text)
        finally:
            _current_job.reset(token)

    def failed(
        self,
        task: TaskSpec,
        job: Job,
        exc: BaseException,
        sink: Sink,
        context: JobContext | None = None,
    ) -> None:
        """Report a failed run: retried after its backoff, failed at its last attempt; a
        Snooze or an Abort as such; with the progress its context reported, if any."""
        if isinstance(exc, (Snooze, Abort)):
            settle_signal(task, job, exc, describe_error(exc), sink, context)
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
                extra=_fields(job),
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
                extra=_fields(job),
            )
        if context is None or context.progress_value is None:
            sink.error(job, delay, describe_error(exc), False)
        else:
            error = describe_error(exc)
            sink.special(job, "error", delay=delay, error=error, **progress_columns(context))


def _fail_now(job: Job, reason: str, sink: Sink) -> None:
    """The job cannot run (or its result cannot be kept): failed at once, no retry."""
    logger.warning(
        "job %s (%s, queue %s) failed: %s", job.id, job.task, job.queue, reason, extra=_fields(job)
    )
    sink.error(job, 0.0, reason, True)


def _fields(job: Job) -> dict[str, Any]:
    """The structured fields of a job's log records."""
    return {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempts}


async def _invoke(task: TaskSpec, arguments: dict[str, Any]) -> Any:
    if task.is_async:
        return await task.fn(**arguments)
    call = functools.partial(task.fn, **arguments)
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)


class _Cancelled(Exception):
    def __str__(self) -> str:
        return "the job was cancelled from inside (CancelledError raised by the handler)"


def _with_payload(job: Job, arguments: dict[str, Any]) -> Job:
    object.__setattr__(job, "payload", arguments)  # built by us, not yet shared
    return job


def _unknown_task_message(job: Job, tasks: Mapping[str, TaskSpec]) -> str:
    known = ", ".join(sorted(tasks)) or "none"
    return (
        f"job {job.id}: no task named {job.task!r} is registered in this worker "
        f"(known: {known}); register it with @queue.task(name={job.task!r}) and "
        "enqueue the job again"
    )
