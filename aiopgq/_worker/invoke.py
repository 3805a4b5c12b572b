"""Calling a job's task: its arguments from the payload, a sync task in a thread, a
timeout, its result stored as JSON."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import anyio

from .._models import Job
from .._payload import decode_payload, encode_result
from .completer import Sink
from .contracts import TaskSpec
from .failures import fail_now, unknown_task_message, unstorable_result


def record_result(task: TaskSpec, job: Job, result: Any, sink: Sink) -> None:
    """A handler returned `result`: done with it, or failed when it cannot be stored as
    JSON."""
    if result is None:
        sink.done(job, None)
        return
    try:
        result_text = encode_result(result)
    except (TypeError, ValueError) as exc:
        fail_now(job, unstorable_result(task, result, exc), sink)
    else:
        sink.done(job, result_text)


def job_arguments(
    task: TaskSpec | None,
    job: Job,
    payload_text: str,
    tasks: Mapping[str, TaskSpec],
    sink: Sink,
) -> dict[str, Any] | None:
    """The job's keyword arguments; None when it can never run (reported failed)."""
    if task is None:
        fail_now(job, unknown_task_message(job, tasks), sink)
        return None
    try:
        payload = decode_payload(payload_text)
        if not isinstance(payload, dict):
            raise TypeError(f"payload is a JSON {type(payload).__name__}, not an object")
        if payload.keys() != task.check_keywords.names:  # exactly those: nothing to check
            task.check_keywords(payload)
    except (TypeError, ValueError) as exc:  # decode_payload: ValueError for any JSON
        # A payload cannot become valid: failed at once, not retried.
        message = (
            f"job {job.id} of task {job.task} cannot run: its payload does not match "
            f"the task's arguments ({exc}); fix the producer and enqueue it again"
        )
        fail_now(job, message, sink)
        return None
    return payload


async def invoke(task: TaskSpec, arguments: dict[str, Any]) -> Any:
    """Call a sync task in a thread, or any task under its timeout."""
    if task.timeout is not None:
        with anyio.move_on_after(task.timeout) as deadline:
            result = await call_fn(task, arguments)
        if deadline.cancelled_caught:
            raise TimeoutError(f"task {task.name} exceeded its {task.timeout} s timeout")
        return result
    return await call_fn(task, arguments)


async def call_fn(task: TaskSpec, arguments: dict[str, Any]) -> Any:
    if task.is_async:
        return await task.fn(**arguments)
    call = functools.partial(task.fn, **arguments)
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
