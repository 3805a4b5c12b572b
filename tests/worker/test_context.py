"""JobContext: injected into handlers that declare it, never part of the payload."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest

from aiopgq import Job, JobContext, JobStatus, Lease, Queue, current_job

from ..support.helpers import eventually


async def test_a_handler_that_declares_a_context_gets_one(queue: Queue) -> None:
    seen: dict[str, Any] = {}

    @queue.task(name="ctx.show", max_attempts=3)
    async def show(ctx: JobContext, a: int, *, b: int = 2) -> int:
        seen.update(
            job_id=ctx.job_id,
            attempt=ctx.attempt,
            max_attempts=ctx.max_attempts,
            queue=ctx.queue,
            task=ctx.task,
            enqueued_at=ctx.enqueued_at,
            scheduled_at=ctx.scheduled_at,
            tick=ctx.tick,
            cancelled=ctx.cancelled,
            checkpoint=ctx.checkpoint,
            lease=ctx.lease,
            current=current_job(),
        )
        return a + b

    before = datetime.now(timezone.utc)
    job = await show.enqueue(1, b=5)  # positional binding skips the context parameter
    assert job.payload == {"a": 1, "b": 5}
    worker = queue.worker()
    await worker.run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == 6
    assert seen["job_id"] == job.id and seen["attempt"] == 1 and seen["max_attempts"] == 3
    assert (seen["queue"], seen["task"]) == ("default", "ctx.show")
    assert seen["enqueued_at"] == job.created_at and seen["scheduled_at"] == job.run_at
    assert seen["enqueued_at"].tzinfo is not None and seen["scheduled_at"].tzinfo is not None
    assert seen["enqueued_at"] >= before - timedelta(seconds=60)  # the server's clock
    assert seen["tick"] is None and seen["cancelled"] is False and seen["checkpoint"] is None
    assert seen["lease"] == Lease(job.id, 1, worker.id)
    current: Job = seen["current"]  # current_job() keeps working, without the context
    assert current.id == job.id and current.payload == {"a": 1, "b": 5}


async def test_the_context_parameter_is_not_part_of_the_payload(queue: Queue) -> None:
    @queue.task(name="ctx.only")
    async def only(ctx: JobContext) -> None: ...

    with pytest.raises(TypeError, match="unexpected keyword argument 'ctx'"):
        await only.enqueue(ctx=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'ctx'"):
        await queue.enqueue("ctx.only", {"ctx": 1})
    job = await only.enqueue()
    assert job.payload == {}


def test_a_string_annotation_is_recognised(queue: Queue) -> None:
    async def handler(context: JobContext, n: int) -> None: ...

    handler.__annotations__["context"] = "aiopgq.JobContext"  # as under PEP 563
    task = queue.task(name="ctx.str")(handler)
    assert task.context_parameter == "context"
    with pytest.raises(TypeError, match="more than one parameter is a JobContext"):

        @queue.task(name="ctx.two")
        async def two(a: JobContext, b: JobContext) -> None: ...


async def test_context_logger_carries_the_job(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.task(name="ctx.log")
    def log(ctx: JobContext) -> None:  # a `def` handler (in a thread) gets one too
        ctx.logger.info("hello from %s", ctx.task, extra={"mine": 1})
        anyio.from_thread.run(ctx.progress, 0.5)  # its coroutines, from the thread

    job = await log.enqueue()
    with caplog.at_level(logging.INFO, logger="aiopgq.job"):
        await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).progress == 0.5
    [record] = [r for r in caplog.records if r.name == "aiopgq.job"]
    assert record.getMessage() == "hello from ctx.log"
    assert (record.job_id, record.task, record.queue, record.attempt, record.mine) == (  # type: ignore[attr-defined]
        job.id,
        "ctx.log",
        "default",
        1,
        1,
    )


async def test_a_periodic_job_has_its_tick_in_the_context(queue: Queue) -> None:
    seen: list[tuple[datetime | None, datetime | None]] = []

    @queue.periodic("* * * * * *", name="ctx.every.second")
    async def every_second(ctx: JobContext) -> None:  # no default: the worker fills it
        seen.append((ctx.tick, current_job().tick))

    async with queue.worker(maintenance_interval=0.5):
        await eventually(lambda: seen, within=20)
    tick, job_tick = seen[0]
    assert tick is not None and tick == job_tick and tick.microsecond == 0
