"""Middleware around handlers, and on_enqueue hooks: order and errors."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiopgq import Job, JobContext, JobStatus, Queue

CallNext = Callable[[], Awaitable[Any]]


async def test_middleware_wraps_handlers_first_registered_outermost(queue: Queue) -> None:
    calls: list[str] = []

    @queue.middleware
    async def outer(ctx: JobContext, call_next: CallNext) -> Any:
        calls.append(f"outer in {ctx.task} {ctx.attempt}")
        result = await call_next()
        calls.append("outer out")
        return result

    @queue.middleware
    async def inner(ctx: JobContext, call_next: CallNext) -> Any:
        calls.append("inner in")
        result = await call_next()
        calls.append("inner out")
        return {"wrapped": result}  # what the outermost returns is the job's result

    @queue.task(name="m.plain")
    async def plain(n: int) -> int:  # no JobContext parameter: middleware still applies
        calls.append(f"handler {n}")
        return n

    job = await plain.enqueue(4)
    await queue.worker().run(burst=True)
    assert calls == ["outer in m.plain 1", "inner in", "handler 4", "inner out", "outer out"]
    assert (await queue.get_job(job.id)).result == {"wrapped": 4}


async def test_a_middleware_that_raises_fails_the_job_not_the_worker(queue: Queue) -> None:
    @queue.middleware
    async def picky(ctx: JobContext, call_next: CallNext) -> Any:
        if ctx.job.payload["n"] == 1:
            raise PermissionError("tenant 1 is suspended")
        result = await call_next()
        if ctx.job.payload["n"] == 2:
            raise RuntimeError("metrics backend down")
        return result

    ran: list[int] = []

    @queue.task(name="m.work", max_attempts=2)
    async def work(n: int) -> int:
        ran.append(n)
        return n

    jobs = await work.enqueue_many([{"n": n} for n in range(4)])
    worker = queue.worker()
    await worker.run(burst=True)
    final = {j.id: await queue.get_job(j.id) for j in jobs}
    # The middleware's errors are the jobs' errors, retried by the task's policy.
    for job, needle in ((jobs[1], "tenant 1 is suspended"), (jobs[2], "metrics backend down")):
        row = final[job.id]
        assert row.status is JobStatus.PENDING and row.attempts == 1, row  # retried later
        assert row.last_error is not None and needle in row.last_error
    assert sorted(ran) == [0, 2, 3]  # the handler of job 1 never ran
    assert final[jobs[0].id].status is JobStatus.DONE and final[jobs[3].id].result == 3


async def test_a_middleware_may_skip_the_handler_but_not_call_it_twice(queue: Queue) -> None:
    @queue.middleware
    async def gate(ctx: JobContext, call_next: CallNext) -> Any:
        mode = ctx.job.payload["mode"]
        if mode == "skip":
            return "skipped"
        if mode == "twice":
            await call_next()
            return await call_next()
        return await call_next()

    ran: list[str] = []

    @queue.task(name="m.gated", max_attempts=1)
    async def gated(mode: str) -> str:
        ran.append(mode)
        return mode

    skip, twice, once = await gated.enqueue_many(
        [{"mode": "skip"}, {"mode": "twice"}, {"mode": "once"}]
    )
    await queue.worker().run(burst=True)
    assert (await queue.get_job(skip.id)).result == "skipped"
    assert (await queue.get_job(once.id)).result == "once"
    failed = await queue.get_job(twice.id)
    assert failed.status is JobStatus.FAILED
    assert failed.last_error is not None and "call_next() twice" in failed.last_error
    assert sorted(ran) == ["once", "twice"]


def test_middleware_must_be_async(queue: Queue) -> None:
    def sync(ctx: JobContext, call_next: CallNext) -> Any: ...

    with pytest.raises(TypeError, match="must be an `async def fn"):
        queue.middleware(sync)  # type: ignore[arg-type]


async def test_without_middleware_or_contexts_the_worker_runs_the_plain_path(
    queue: Queue,
) -> None:
    @queue.task(name="m.none")
    async def none() -> None: ...

    worker = queue.worker()
    await none.enqueue()
    await worker.run(burst=True)
    assert worker._dispatcher is not None and worker._dispatcher._handlers is None


async def test_on_enqueue_hooks_see_every_job_in_order_and_cannot_fail_an_enqueue(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, int]] = []

    @queue.on_enqueue
    def first(job: Job) -> None:
        seen.append(("first", job.id))

    @queue.on_enqueue
    async def broken(job: Job) -> None:
        raise RuntimeError("tracing exporter is down")

    @queue.on_enqueue
    async def last(job: Job) -> None:
        seen.append(("last", job.id))

    with caplog.at_level(logging.ERROR, logger="aiopgq.queue"):
        one = await queue.enqueue("h.task", {"n": 1})
        many = await queue.enqueue_many("h.task", [{"n": 2}, {"n": 3}])
        assert await queue.copy_many("h.task", [{"n": 4}]) == 1  # no Jobs: no hooks
    ids = [one.id, *(j.id for j in many)]
    assert seen == [(name, i) for i in ids for name in ("first", "last")]
    errors = [r for r in caplog.records if r.name == "aiopgq.queue"]
    assert [r.getMessage().split(" failed for job ")[1] for r in errors] == [
        f"{i} (the job is enqueued)" for i in ids
    ]
    assert all("tracing exporter is down" in (r.exc_text or "") for r in errors)
    assert (await queue.get_job(one.id)).status is JobStatus.PENDING  # enqueued all the same
