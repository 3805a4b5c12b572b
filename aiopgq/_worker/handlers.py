"""Handlers: runs a job through the queue's middleware and hands its handler a JobContext.

Only jobs whose task declares a JobContext parameter, or of a queue with middleware,
come here; the dispatcher runs every other job as it always did.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio
import asyncpg

from .._context import JobContext, Middleware
from .._db.statements import Statements
from .._models import Job, _current_job
from .._payload import encode_result
from .._steps import LastStep, StepRun, Suspended
from .completer import Sink
from .contracts import QueueSpec, TaskSpec
from .failures import fail_now, progress_columns, report_failure, unstorable_result
from .invoke import call_fn
from .progress import ProgressBoard
from .stops import StopRequests

logger = logging.getLogger("aiopgq.worker")


def make_handlers(
    queue: QueueSpec,
    pool: asyncpg.Pool,
    worker_id: str,
    stops: StopRequests,
    progress: ProgressBoard,
    hold_transaction: bool,
) -> Handlers | None:
    """Handlers for a worker of `queue`, if a task takes a JobContext or the queue has
    middleware; else None (the dispatcher's plain path, and the claim without checkpoints)."""
    middleware = queue.middlewares
    if not middleware and all(t.context_parameter is None for t in queue.tasks.values()):
        return None
    return Handlers(
        pool,
        queue.sql,
        worker_id,
        middleware,
        stops,
        progress,
        holds_transactions=hold_transaction,
    )


class Settling(Protocol):
    """What a handled job needs of the dispatcher to settle its ending."""

    def stopped(
        self, task: TaskSpec, job: Job, sink: Sink, context: JobContext | None = None
    ) -> bool: ...


class Handlers:
    """The worker's side of JobContext (ContextServices), and the middleware chain."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        worker_id: str,
        middleware: Sequence[Middleware],
        stops: StopRequests,
        progress: ProgressBoard,
        *,
        holds_transactions: bool,
    ) -> None:
        self.pool = pool
        self.sql = sql
        self.worker_id = worker_id
        self.holds_transactions = holds_transactions
        self._middleware = tuple(middleware)
        self._stops = stops
        self._progress = progress
        self._warned: set[str] = set()  # tasks that returned a value after committing

    def cancel_requested(self, job: Job) -> bool:
        return self._stops.requested(job)

    def progress_reported(self, context: JobContext) -> None:
        self._progress.reported(context)

    def transaction_committed(self, context: JobContext) -> None:
        self._stops.settled.add(context.job_id)  # no lease left to fence

    def wants(self, task: TaskSpec | None) -> bool:
        """Whether jobs of `task` run here (else the dispatcher's plain path runs them)."""
        return task is not None and (bool(self._middleware) or task.context_parameter is not None)

    async def call(
        self,
        settling: Settling,
        task: TaskSpec,
        job: Job,
        arguments: dict[str, Any],
        sink: Sink,
        checkpoint_text: str | None,
    ) -> None:
        """Run the job and report its ending to `sink` (the dispatcher's _call, with a
        JobContext, middleware, and outcomes that carry progress)."""
        object.__setattr__(job, "payload", arguments)  # built by us, not yet shared
        context = JobContext(job, self, checkpoint_text=checkpoint_text)
        if task.context_parameter is not None:
            arguments = {**arguments, task.context_parameter: context}  # not in job.payload
        token = _current_job.set(job)
        try:
            chain = self._chain(context, functools.partial(call_fn, task, arguments))
            if task.timeout is None:
                result = await chain()
            else:
                with anyio.move_on_after(task.timeout) as deadline:
                    result = await chain()
                if deadline.cancelled_caught:
                    raise TimeoutError(f"task {task.name} exceeded its {task.timeout} s timeout")
        except Suspended:  # ctx.sleep or ctx.wait_event wrote the job's state
            return
        except asyncio.CancelledError:
            context.stopped = True
            if context.step_run is not None:
                await _steps_recorded(context.step_run, context)
            if context.committed or settling.stopped(task, job, sink, context):
                raise
        except BaseException as exc:
            if context.committed:
                logger.warning(
                    "job %s (%s) raised after ctx.transaction() committed it: it stays done (%r)",
                    job.id,
                    job.task,
                    exc,
                    extra={"job_id": job.id, "task": job.task, "queue": job.queue},
                )
                return
            if context.step_run is not None:  # a retry replays the steps that returned
                await _steps_recorded(context.step_run, context)
            report_failure(task, job, exc, sink, context)
        else:
            steps = context.step_run
            if steps is None:
                self._succeeded(task, job, result, sink, context)
            else:
                await self._succeeded_after_steps(task, job, result, sink, context, steps)
        finally:
            context.ended = True
            if context.progress_value is not None:
                self._progress.forget(job.id)
            if context.committed:
                self._stops.settled.discard(job.id)
            _current_job.reset(token)

    def _chain(
        self, context: JobContext, handler: Callable[[], Awaitable[Any]]
    ) -> Callable[[], Awaitable[Any]]:
        """The handler wrapped in the middleware: the first registered is the outermost."""
        call_next = handler
        for middleware in reversed(self._middleware):
            call_next = functools.partial(_step, middleware, context, _Once(call_next))
        return call_next

    def _succeeded(
        self,
        task: TaskSpec,
        job: Job,
        result: Any,
        sink: Sink,
        context: JobContext,
    ) -> None:
        if context.committed:  # its done is written: nothing left to write
            self._returned_after_commit(task, job, result)
            return
        try:
            result_text = encode_result(result)
        except (TypeError, ValueError) as exc:
            fail_now(job, unstorable_result(task, result, exc), sink)
            return
        _done(job, result_text, sink, context)

    def _returned_after_commit(self, task: TaskSpec, job: Job, result: Any) -> None:
        if result is not None and task.name not in self._warned:
            self._warned.add(task.name)
            logger.warning(
                "task %s returned a value after ctx.transaction() committed its job: it "
                "is not stored; call ctx.set_result(value) inside the transaction",
                task.name,
                extra={"job_id": job.id, "task": job.task, "queue": job.queue},
            )

    async def _succeeded_after_steps(
        self,
        task: TaskSpec,
        job: Job,
        result: Any,
        sink: Sink,
        context: JobContext,
        steps: StepRun,
    ) -> None:
        """A run with durable steps returned: a step that was its last action goes with the
        done (one batched statement for both); else the steps' rows are written first."""
        if context.committed:
            await _steps_recorded(steps, context)
            self._returned_after_commit(task, job, result)
            return
        try:
            result_text = encode_result(result)
        except (TypeError, ValueError) as exc:
            await _steps_recorded(steps, context)  # the job fails; a retry replays them
            fail_now(job, unstorable_result(task, result, exc), sink)
            return
        last = steps.take_last()
        if last is None:
            try:
                await steps.settle()
            except Exception as exc:  # LeaseLost, or the write's connection failed
                report_failure(task, job, exc, sink, context)
                return
        _done(job, result_text, sink, context, last)


def _done(
    job: Job, result_text: str | None, sink: Sink, context: JobContext, last: LastStep | None = None
) -> None:
    """A run returned `result_text`: its done, with its progress and its last step (if
    any: written in the done's statement)."""
    if context.progress_value is None and last is None:
        sink.done(job, result_text)
    else:
        sink.special(job, "done", result=result_text, step=last, **progress_columns(context))


async def _steps_recorded(steps: StepRun, context: JobContext) -> None:
    """Wait for the row of a step that returned before the run ended otherwise; what its
    write met does not change how the run ended (a lost lease fences the outcome too)."""
    try:
        await steps.settle()
    except Exception as exc:
        logger.warning(
            "job %s (%s): its last step's row was not written (%r); a retry runs the step again",
            context.job_id,
            context.job.task,
            exc,
            extra={"job_id": context.job_id, "task": context.job.task, "queue": context.job.queue},
        )


class _Once:
    """call_next: runs the rest of the chain, at most once."""

    def __init__(self, call: Callable[[], Awaitable[Any]]) -> None:
        self._call = call
        self._called = False

    async def __call__(self) -> Any:
        if self._called:
            raise RuntimeError("a middleware called call_next() twice; call it once")
        self._called = True
        return await self._call()


async def _step(middleware: Middleware, context: JobContext, call_next: _Once) -> Any:
    return await middleware(context, call_next)
