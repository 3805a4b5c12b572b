"""Dispatcher: runs fetched jobs under the worker's task group and reports outcomes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from typing import Any

import asyncpg

from .._context import JobContext
from .._errors import LeaseLost
from .._models import Job, _current_job, job_from_claimed_row
from .completer import Completer, Sink
from .contracts import JobObserver, TaskSpec
from .failures import (
    CancelledFromInside,
    internal_error,
    job_fields,
    report_failure,
)
from .handlers import Handlers
from .invoke import invoke, job_arguments, record_result
from .job_tasks import (
    JOB_TASK_PREFIX,
    JobStarter,
    job_starter,
    plain_starter,
)
from .observing import LoggedSink, ObservedSink, decode_trace_context
from .plain_lane import start_plain
from .stops import StopRequests
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.worker")

# run_job or _run_logged, chosen once per batch.
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
        self.tasks = tasks
        self.completer = completer
        self._observer = observer
        self._traced = traced
        self._slot_freed = wakeups.progress
        self.running: dict[int, Job] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        # Inside start(): a job that ends eagerly there leaves the idle flag to start().
        self._starting = False
        self._stops = stops or StopRequests()
        self._handlers = handlers
        self.job_tasks: dict[int, asyncio.Task[None]] = {}  # by job id

    @property
    def releasing(self) -> bool:
        """Set at the shutdown deadline: cancelled jobs go back to pending."""
        return self._stops.all

    def start(
        self, rows: list[asyncpg.Record], sink: Sink | None = None
    ) -> list[asyncio.Task[None]]:
        """Start one task per claimed row; they are ours until they end or cancel_all()."""
        target = sink if sink is not None else self.completer
        debug = logger.isEnabledFor(logging.DEBUG)
        run = self._run_logged if debug else self.run_job
        if self._observer is not None or self._handlers is not None:  # per batch: the
            return self._start_extended(rows, target, run)  # loop below stays as it was
        loop = asyncio.get_running_loop()
        if sink is None and not debug:
            plain = plain_starter(loop)
            if plain is not None:
                return start_plain(self, rows, plain, loop)
        starter = job_starter(loop)
        started: list[asyncio.Task[None]] = []
        instants: dict[float, datetime] = {}
        self._starting = starter.eager
        try:
            with starter:
                for row in rows:
                    self.start_row(row, instants, starter, target, started, run)
        finally:
            self._settle_idle()
        return started

    def start_row(
        self,
        row: asyncpg.Record,
        instants: dict[float, datetime],
        starter: JobStarter,
        sink: Sink,
        started: list[asyncio.Task[None]],
        run: _Run | None = None,
    ) -> None:
        """One claimed row's task, started by `starter` (inside its batch's `with`)."""
        job, payload = job_from_claimed_row(row, instants)
        replacing = job.id in self.job_tasks
        if replacing:
            # We still run this job: its lease was lost meanwhile (rescued after missed
            # heartbeats, or cancelled and retried before we heard of it), so that run's
            # outcome can no longer be written. Stop it; this run replaces it (a task that
            # starts at the loop's next turn, never eagerly: the end of each run, in run_job,
            # tells which of the two the dispatcher keeps).
            self.cancel([job.id])
        self.running[job.id] = job
        # Plain asyncio tasks, owned by this dispatcher (cancel_all): a task group's
        # per-task bookkeeping costs more than a short job itself. Each task forgets
        # itself as it ends (no done callback: one loop turn less per job). With an eager
        # starter (job_tasks.py) a job may end here.
        make = asyncio.get_running_loop().create_task if replacing else starter.start
        job_run = (run or self.run_job)(job, payload, sink)
        task = make(job_run, name=f"{JOB_TASK_PREFIX}{job.id}")
        if task is not None:  # None: ended in its first step
            if self.running.get(job.id) is job:  # still runs: ours to keep
                self.job_tasks[job.id] = task
            started.append(task)

    def cancel(self, job_ids: Iterable[int]) -> int:
        """Stop the handlers of these jobs, which were cancelled in the database
        (cancel.sql): their runs write no outcome. Jobs we do not run are ignored.
        Returns how many handlers were stopped."""
        stops = self._stops
        stops.forget_ended(self.running)
        stopped = 0
        for job_id in job_ids:
            job, task = self.running.get(job_id), self.job_tasks.get(job_id)
            if job is None or task is None or stops.cancelling.get(job_id) is job:
                continue
            stops.cancelling[job_id] = job
            task.cancel()
            stopped += 1
        return stopped

    def fence(self, job_id: int, reason: str) -> None:
        """Cancel a running job whose lease this worker could not renew (leases.py); it
        ends with LeaseLost as its error, if that can still be written."""
        stops = self._stops
        job, task = self.running.get(job_id), self.job_tasks.get(job_id)
        if job is None or task is None or stops.stopping(job) or job_id in stops.settled:
            return
        stops.forget_ended(self.running)
        logger.warning("job %s: %s", job_id, reason, extra=job_fields(job))
        stops.fenced[job_id] = (job, reason)
        task.cancel()

    def _start_extended(
        self, rows: list[asyncpg.Record], sink: Sink, run: _Run
    ) -> list[asyncio.Task[None]]:
        """start(), with an observer (each job run by _run_observed) and/or handlers (each
        job of a task they want run through them): the rows have more columns, the trace
        context (traced) and the checkpoint (handlers), in that order."""
        observer, handlers, traced = self._observer, self._handlers, self._traced
        started = []
        instants: dict[float, datetime] = {}
        loop = asyncio.get_running_loop()
        starter = job_starter(loop)
        start_task = starter.start
        self._starting = starter.eager
        try:
            with starter:
                for row in rows:
                    job, payload = job_from_claimed_row(row[:9], instants)
                    trace = decode_trace_context(row[9]) if traced else None
                    checkpoint, handled = None, None
                    if handlers is not None:
                        checkpoint = row[-1]
                        wanted = handlers.wants(self.tasks.get(job.task))
                        handled = handlers if wanted else None
                    replacing = job.id in self.job_tasks
                    if replacing:  # we still run this job: see start()
                        self.cancel([job.id])
                    self.running[job.id] = job
                    if observer is None:
                        job_run = run(job, payload, sink, handled, checkpoint)
                    else:
                        job_run = self._run_observed(
                            job, payload, sink, observer, trace, run, handled, checkpoint
                        )
                    make = loop.create_task if replacing else start_task  # as in start()
                    task = make(job_run, name=f"{JOB_TASK_PREFIX}{job.id}")
                    if task is not None:
                        if self.running.get(job.id) is job:
                            self.job_tasks[job.id] = task
                        started.append(task)
        finally:
            self._settle_idle()
        return started

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
        tasks = list(self.job_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def batch_started(self) -> None:
        """A batch's jobs are being started (plain_lane.py): one that ends meanwhile
        leaves the idle flag to batch_ended()."""
        self._starting = True

    def batch_ended(self, freed: bool) -> None:
        """The batch is started; `freed`: some of its jobs ended in it (their slots are
        free again)."""
        if freed:
            self._slot_freed()
        self._settle_idle()

    def _settle_idle(self) -> None:
        """After a batch's loop: idle if no job runs (they may all have ended eagerly)."""
        self._starting = False
        if self.running:
            self._idle.clear()
        else:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return when no job is running."""
        await self._idle.wait()

    def stopped(
        self, task: TaskSpec, job: Job, sink: Sink, context: JobContext | None = None
    ) -> bool:
        """The run's asyncio task was cancelled: report how it ended (its job cancelled:
        nothing to write; the worker stopping: released; fenced or cancelled from inside:
        a failed attempt). True when the CancelledError must propagate."""
        stops = self._stops
        if stops.cancelling.get(job.id) is job:
            del stops.cancelling[job.id]
            logger.info(
                "job %s (%s) cancelled while running", job.id, job.task, extra=job_fields(job)
            )
            sink.cancelled(job)  # nothing to write: the database says cancelled already
            return False
        if stops.all:
            sink.release(job)
            return True
        fenced = stops.fenced.get(job.id)
        if fenced is not None and fenced[0] is job:
            del stops.fenced[job.id]
            report_failure(task, job, LeaseLost(fenced[1]), sink, context)
        else:
            report_failure(task, job, CancelledFromInside(), sink, context)
        return False

    async def run_job(
        self,
        job: Job,
        payload_text: str,
        sink: Sink,
        handlers: Handlers | None = None,
        checkpoint: str | None = None,
    ) -> None:
        task = self.tasks.get(job.task)
        try:
            arguments = job_arguments(task, job, payload_text, self.tasks, sink)
            if task is None or arguments is None:
                return  # failed at once: it can never run
            if handlers is not None:
                await handlers.call(self, task, job, arguments, sink, checkpoint)
                return
            # The plain call, written out here: one coroutine per job, not two.
            object.__setattr__(job, "payload", arguments)  # built by us, not yet shared
            token = _current_job.set(job)
            try:
                if task.timeout is None and task.is_async:  # the common case
                    result = await task.fn(**arguments)
                else:
                    result = await invoke(task, arguments)
            except BaseException as exc:
                self.raised(task, job, exc, sink)
            else:
                if result is None:  # the common case: no call
                    sink.done(job, None)
                else:
                    record_result(task, job, result, sink)
            finally:
                _current_job.reset(token)
        except Exception as exc:  # a bug of ours: the job's own exceptions are reported
            internal_error(task, job, exc, sink)
        finally:
            self._forget(job)

    def finish(self, task: TaskSpec, job: Job, end: BaseException) -> None:
        """A plain lane's job whose first step waited ended (job_tasks.Finishing): a
        StopIteration with what the handler returned, or what it raised. Reported as
        run_job reports it; a CancelledError that must propagate is raised again."""
        try:
            if type(end) is StopIteration:
                record_result(task, job, end.value, self.completer)
            else:
                self.raised(task, job, end, self.completer)
        finally:
            self._forget(job)

    def raised(self, task: TaskSpec, job: Job, exc: BaseException, sink: Sink) -> None:
        """A handler raised `exc`: a failed attempt, or a cancellation (stopped();
        raised again where it must propagate: the worker stopping)."""
        try:
            if not isinstance(exc, asyncio.CancelledError):
                report_failure(task, job, exc, sink)
            elif self.stopped(task, job, sink):
                raise exc
        except Exception as error:  # a bug of ours
            internal_error(task, job, error, sink)

    def _forget(self, job: Job) -> None:
        """A run of `job` that was a task ended: it no longer holds a slot."""
        mine = self.job_tasks.pop(job.id, None)  # by id: cheaper than current_task()
        newest = self.running.pop(job.id)
        if newest is not job:  # a newer run of this job replaced us (start): it stays
            self.running[job.id] = newest
            if mine is not None:
                self.job_tasks[job.id] = mine
        if not self.running and not self._starting:
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
        """run_job with a DEBUG line at the job's start and one at its end (DEBUG on only)."""
        extra = job_fields(job)
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
            await self.run_job(job, payload_text, observed, handlers, checkpoint)
        finally:
            logger.debug(
                "job %s (%s) ended after %.3f s: %s",
                job.id,
                job.task,
                time.monotonic() - started,
                observed.outcome,
                extra=extra,
            )
