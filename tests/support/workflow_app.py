"""The application that tests/workflows runs in worker processes: members of a fan-in
and the job that joins them, each run recorded in the test's ledger table."""

from __future__ import annotations

import asyncio
import os

from aiopgq import JobContext, Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
LEDGER = f'"{queue.schema}".ledger'


async def _record(ctx: JobContext, task: str, value: int) -> None:
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {LEDGER} (job_id, attempt, pid, task, value) VALUES ($1, $2, $3, $4, $5)",
            ctx.job_id,
            ctx.attempt,
            os.getpid(),
            task,
            value,
        )


@queue.task(name="wf.member")
async def member(ctx: JobContext, n: int) -> int:
    await _record(ctx, "wf.member", n)
    return n


@queue.task(name="wf.join")
async def join(ctx: JobContext) -> int:
    results = await ctx.parent_results()
    total = sum(results.values())
    await _record(ctx, "wf.join", len(results))
    return total


@queue.task(name="wf.crash", max_attempts=1)
async def crash(ctx: JobContext) -> None:
    await _record(ctx, "wf.crash", 0)
    os.kill(os.getpid(), 9)


@queue.task(name="wf.gmember", max_attempts=100)  # SIGKILLs cost attempts
async def group_member(ctx: JobContext, n: int) -> int:
    await _record(ctx, "wf.gmember", n)
    # 10,000 x 50 ms over 60 slots: ~8 s of members, so the kills land while they run
    # however fast the machine and the counting are.
    await asyncio.sleep(0.05)
    return n


@queue.task(name="wf.gcallback", max_attempts=100)
async def group_callback(ctx: JobContext) -> int:
    results = await ctx.parent_results()
    await _record(ctx, "wf.gcallback", len(results))
    return sum(results.values())
