"""Handlers with the rest of aiopgq: cancelling running jobs, limited queues, the
partitioned archive, retrying failed jobs, and the operators' views of a job."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import httpx
import pytest

from aiopgq import Abort, JobCancelled, JobContext, JobStatus, Queue, Retry, Snooze
from aiopgq.dashboard import create_app

from ..support.cli import run_cli
from ..support.helpers import eventually
from .test_archive import maintain


async def running(queue: Queue, job_id: int) -> bool:
    return (await queue.get_job(job_id)).status is JobStatus.RUNNING


async def test_a_cancelled_running_job_ends_cancelled_through_handlers(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """Queue.cancel reaches handlers that take a JobContext, behind middleware: the async
    one is cancelled, the `def` one sees ctx.cancelled; both end `cancelled` (nothing
    written after the cancel), and their waiters get JobCancelled."""
    seen: dict[str, Any] = {}

    @queue.middleware
    async def around(ctx: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await call_next()
        except BaseException as exc:
            seen[f"middleware {ctx.task}"] = type(exc).__name__
            raise

    @queue.task(name="c.async")
    async def waits(ctx: JobContext) -> None:
        await ctx.progress(0.5, state={"half": True})
        await asyncio.sleep(3600)

    @queue.task(name="c.sync")
    def polls(ctx: JobContext) -> str:
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        seen["sync saw cancelled"] = ctx.cancelled
        return "stopped"

    jobs = [await waits.enqueue(), await polls.enqueue()]
    waiters = [asyncio.ensure_future(job.wait(timeout=30)) for job in jobs]
    with caplog.at_level(logging.INFO, logger="aiopgq.worker"):
        async with queue.worker(heartbeat_interval=0.2):
            for job in jobs:
                await eventually(lambda job=job: running(queue, job.id))
            for job in jobs:
                assert await queue.cancel(job.id)
            for waiter in waiters:
                with pytest.raises(JobCancelled):
                    await waiter
            await eventually(lambda: "sync saw cancelled" in seen)
    assert seen == {  # the thread runs on, abandoned, and sees ctx.cancelled stay true
        "middleware c.async": "CancelledError",
        "middleware c.sync": "CancelledError",
        "sync saw cancelled": True,
    }
    for job in jobs:
        row = await queue.get_job(job.id)
        assert (row.status, row.attempts, row.errors, row.result) == (
            JobStatus.CANCELLED,
            1,
            (),
            None,
        )
    stopped = [r for r in caplog.records if "cancelled while running" in r.getMessage()]
    assert {r.job_id for r in stopped} == {job.id for job in jobs}  # type: ignore[attr-defined]
    warned = [r for r in caplog.records if r.name.startswith("aiopgq") and r.levelno >= 30]
    assert not warned, caplog.text


async def test_limited_queues_announce_awaited_jobs_and_give_back_checkpoints(
    queue: Queue,
) -> None:
    """Jobs of a queue with limits are claimed by claim_limited(), whose claims carry the
    dones of the jobs before: those announce awaited jobs as the plain claim does (else
    their waiters would wait for the 30 s safety read), and its rows carry checkpoints."""
    await queue.configure("limited", concurrency=4)
    resumed: list[Any] = []

    @queue.task(name="l.quick", queue="limited")
    async def quick(n: int) -> int:
        return n

    @queue.task(name="l.pages", queue="limited", retry=Retry(base=0.1, jitter=0))
    async def pages(ctx: JobContext) -> int:
        resumed.append(ctx.checkpoint)
        if ctx.attempt == 1:
            await ctx.progress(0.3, state={"page": 3})
            raise ConnectionError("hung up at page 3")
        return int(ctx.checkpoint["page"])

    jobs = await quick.enqueue_many([{"n": n} for n in range(300)])
    resuming = await pages.enqueue()
    waiters = [asyncio.ensure_future(job.wait(timeout=20)) for job in [*jobs, resuming]]
    await asyncio.sleep(0.5)  # the waiters mark their jobs
    started = time.monotonic()
    async with queue.worker(queues=["limited"], concurrency=8):
        finished = await asyncio.gather(*waiters)
    assert [job.result for job in finished] == [*range(300), 3]
    assert resumed == [None, {"page": 3}]
    print(f"\n301 awaited jobs of a limited queue resolved in {time.monotonic() - started:.1f} s")


async def test_an_archived_job_is_still_awaited_and_keeps_its_progress_and_history(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="a.snoozy", max_attempts=1)
    async def snoozy(ctx: JobContext) -> str:
        await ctx.progress(1.0, state={"at": "end"})
        if ctx.checkpoint is None:
            raise Snooze(0)
        return "kept"

    @queue.task(name="a.aborts")
    async def aborts() -> None:
        raise Abort("not today")

    done, aborted = await snoozy.enqueue(), await aborts.enqueue()
    await queue.worker().run(burst=True)
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '10 minutes' "
        "WHERE finished_at IS NOT NULL"
    )
    await queue.enable_partitioning(archive_after=60, partition_width=3600)

    async def archived() -> bool:
        return bool(await conn.fetchval(f'SELECT count(*) = 2 FROM "{queue.schema}".jobs_archive'))

    await maintain(queue, conn, archived)
    assert await queue.result(done.id, timeout=10) == "kept"  # found in the archive
    row = await queue.get_job(done.id)
    assert (row.progress, row.checkpoint) == (1.0, {"at": "end"})
    assert [(e.event, e.seconds) for e in row.history] == [("snooze", 0.0)]
    failed = await queue.get_job(aborted.id)
    assert [e.reason for e in failed.history] == ["not today"]
    assert len(failed.errors) == 1 and "Abort: not today" in failed.errors[0].error


async def test_a_retried_job_snoozes_for_free_again(queue: Queue) -> None:
    runs: list[int] = []

    @queue.task(name="s.twice", max_attempts=1, max_snoozes=1)
    async def twice(ctx: JobContext) -> str:
        runs.append(ctx.attempt)
        if len(runs) <= 3:  # the second snooze is one too many: a failed attempt
            raise Snooze(0)
        return "done"

    job = await twice.enqueue()
    await queue.worker().run(burst=True)
    failed = await queue.get_job(job.id)
    assert failed.status is JobStatus.FAILED and "max_snoozes (1)" in (failed.last_error or "")
    assert [e.over_limit for e in failed.history] == [False, True]
    assert [e.error[:17] for e in failed.errors] == ["snoozed more than"]
    assert await queue.retry(job.id)
    await queue.worker().run(burst=True)
    row = await queue.get_job(job.id)
    assert (row.status, row.result) == (JobStatus.DONE, "done")  # its snooze was free again
    assert [e.over_limit for e in row.history] == [False, True, False]


async def test_the_job_command_shows_progress_checkpoint_and_events(dsn: str, queue: Queue) -> None:
    @queue.task(name="v.shown", max_attempts=2, retry=Retry(base=0, jitter=0))
    async def shown(ctx: JobContext) -> None:
        if ctx.checkpoint is None:
            await ctx.progress(0.25, state={"row": 250})
            raise Snooze(0)  # the next run has the same attempt, and the checkpoint
        raise Abort("bad input")

    job = await shown.enqueue()
    await queue.worker().run(burst=True)
    text = await asyncio.to_thread(
        run_cli, dsn, queue.schema, "--schema", queue.schema, "job", str(job.id)
    )
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "progress:  25%" in lines
    assert any(line.startswith("event:     attempt 1 snoozed for 0 s") for line in lines)
    assert any(line.startswith("event:     attempt 1 aborted: bad input") for line in lines)
    as_json = await asyncio.to_thread(
        run_cli, dsn, queue.schema, "--schema", queue.schema, "job", str(job.id), "--json"
    )
    shown_job = json.loads(as_json.stdout)
    assert (shown_job["progress"], shown_job["checkpoint"]) == (0.25, {"row": 250})
    assert [e["event"] for e in shown_job["history"]] == ["snooze", "abort"]
    assert shown_job["history"][1]["reason"] == "bad input"


async def test_the_dashboard_shows_progress_and_snoozes(queue: Queue) -> None:
    @queue.task(name="v.page")
    async def page(ctx: JobContext) -> None:
        if ctx.checkpoint is None:
            await ctx.progress(0.75, state={"row": 750})
            raise Snooze(0)

    job = await page.enqueue()
    await queue.worker().run(burst=True)
    transport = httpx.ASGITransport(app=create_app(queue))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        shown = await http.get(f"/jobs/{job.id}")
    assert shown.status_code == 200
    assert "<dt>Progress</dt><dd>75 %</dd>" in shown.text
    assert "attempt 1 snoozed for 0 s" in shown.text


@pytest.mark.parametrize("traced", [False, True])
async def test_the_limited_claim_returns_the_checkpoint_last(
    queue: Queue, conn: asyncpg.Connection, traced: bool
) -> None:
    await queue.configure("limited", concurrency=4)
    job = await queue.enqueue("l.any", {}, queue="limited")
    await conn.execute(
        f'UPDATE "{queue.schema}".jobs SET metadata = $2::jsonb WHERE id = $1',
        job.id,
        json.dumps({"checkpoint": {"page": 7}}),
    )
    claim = queue.sql.limited_claim(traced=traced, checkpoint=True)
    [row] = await conn.fetch(claim, ["limited"], 10, "a-worker", True, "{}", "{}", [], None)
    assert row["id"] == job.id and json.loads(row[-1]) == {"page": 7}
    assert len(row) == (11 if traced else 10)  # dequeue.sql's nine, then these
