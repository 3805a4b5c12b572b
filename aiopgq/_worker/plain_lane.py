"""The dispatcher's plain lane (CPython 3.11 to 3.13): a batch's jobs started with no
coroutine of ours around their handlers.

The common case: no observer, no handlers, no DEBUG, outcomes to the completer. A job of
an `async def` task without a timeout whose payload fits runs its handler's first step
here, in a task of its own (job_tasks.py: `asyncio.current_task()` is the task that
runs the rest, its context variables a copy of its own): one that ends there costs two
list appends (its `done` goes to the completer with the batch's), one that waits
becomes a task that runs the rest of the handler's coroutine through a Finishing, which
reports its end to Dispatcher.finish. Any other row (an unknown task, a payload that
does not fit, a job we still run, a sync task, a timeout) takes Dispatcher.start_row,
which reports it as run_job does.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

import asyncpg

from .._models import Job, _current_job, claimed_job
from .._payload import scan_json
from .completer import Completer, Sink
from .contracts import TaskSpec
from .invoke import record_result
from .job_tasks import (
    JOB_TASK_PREFIX,
    Finishing,
    JobStarter,
    StartNow,
    become_task,
    ended_task,
    enter_task,
    first_step_callbacks,
    leave_task,
    new_starting,
)


class LaneOwner(Protocol):
    """What the plain lane uses of the Dispatcher (dispatcher.py)."""

    tasks: Mapping[str, TaskSpec]
    running: dict[int, Job]
    job_tasks: dict[int, asyncio.Task[None]]
    completer: Completer

    def start_row(
        self,
        row: asyncpg.Record,
        instants: dict[float, datetime],
        starter: JobStarter,
        sink: Sink,
        started: list[asyncio.Task[None]],
    ) -> None: ...
    def raised(self, task: TaskSpec, job: Job, exc: BaseException, sink: Sink) -> None: ...
    def finish(self, task: TaskSpec, job: Job, end: BaseException) -> None: ...
    def batch_started(self) -> None: ...
    def batch_ended(self, freed: bool) -> None: ...


def start_plain(
    dispatcher: LaneOwner,
    rows: list[asyncpg.Record],
    starter: StartNow,
    loop: asyncio.AbstractEventLoop,
) -> list[asyncio.Task[None]]:
    """Dispatcher.start() for these rows: the tasks of the jobs that still run."""
    start_row, raised = dispatcher.start_row, dispatcher.raised
    tasks, job_tasks, running = dispatcher.tasks, dispatcher.job_tasks, dispatcher.running
    completer = dispatcher.completer
    started: list[asyncio.Task[None]] = []
    instants: dict[float, datetime] = {}  # for start_row
    done_ids: list[int] = []  # ended in their first step, returning None
    done_attempts: list[int] = []
    set_job = _current_job.set
    # Each job's context is a copy of ours with the job set in it; ours gets its
    # value back after the batch.
    outer: contextvars.Token[Job | asyncpg.Record] | None = None
    dispatcher.batch_started()
    try:
        with starter:
            for row in rows:
                job_id, _, name, text, _, attempts, _, _, _ = row
                spec = tasks.get(name)
                if (
                    spec is None
                    or job_id in job_tasks
                    or not spec.is_async
                    or spec.timeout is not None
                ):
                    start_row(row, instants, starter, completer, started)
                    continue
                try:  # decode_payload's common case, written out
                    payload, end = scan_json(text, 0)
                except Exception:  # start_row's decode_payload says what is wrong
                    end = -1
                if end != len(text) or type(payload) is not dict:
                    start_row(row, instants, starter, completer, started)
                    continue
                if payload.keys() != spec.check_keywords.names:  # else nothing to check
                    try:
                        spec.check_keywords(payload)
                    except TypeError:  # start_row reports it
                        start_row(row, instants, starter, completer, started)
                        continue
                # No Job yet: the row stands for it (current_job() and the watchdog make
                # one of it if they ask); one is made if the job fails, returns a value
                # or waits.
                if outer is None:
                    outer = set_job(row)
                else:
                    set_job(row)
                context = contextvars.copy_context()
                try:
                    coro = spec.fn(**payload)
                except BaseException as exc:
                    raised(spec, claimed_job(row, payload), exc, completer)
                    continue
                task = new_starting()
                task._started = coro
                task.job = row
                enter_task(loop, task)
                try:
                    waits_for = context.run(coro.send, None)
                except StopIteration as stop:
                    leave_task(loop, task)
                    if stop.value is None:
                        done_ids.append(job_id)
                        done_attempts.append(attempts)
                    else:
                        record_result(spec, claimed_job(row, payload), stop.value, completer)
                    if first_step_callbacks and task in first_step_callbacks:
                        become_task(
                            task, ended_task(coro), loop, context, f"{JOB_TASK_PREFIX}{job_id}"
                        )
                        started.append(task)
                    continue
                except BaseException as exc:
                    leave_task(loop, task)
                    first_step_callbacks.pop(task, None)  # it will never run
                    raised(spec, claimed_job(row, payload), exc, completer)
                    continue
                leave_task(loop, task)
                # It waits: from now on it is a running job like any other, one Job for
                # all who ask (current_job() in its context, the dispatcher, the watchdog).
                job = current_job_of(context, row, payload)
                task.job = job
                ended = functools.partial(dispatcher.finish, spec, job)
                name = f"{JOB_TASK_PREFIX}{job_id}"
                become_task(task, Finishing(coro, waits_for, ended), loop, context, name)
                running[job_id] = job
                job_tasks[job_id] = task
                started.append(task)
    finally:
        if outer is not None:
            _current_job.reset(outer)
        if done_ids:
            completer.done_many(done_ids, done_attempts)
        dispatcher.batch_ended(freed=len(started) < len(rows))  # some ended here
    return started


def current_job_of(context: contextvars.Context, row: asyncpg.Record, payload: object) -> Job:
    """The Job of a plain lane's job that waits, the one current_job() returns in its
    `context` (made there already if its handler asked)."""
    value = context.get(_current_job)
    if type(value) is Job:
        return value
    job = claimed_job(row, payload)
    context.run(_current_job.set, job)
    return job
