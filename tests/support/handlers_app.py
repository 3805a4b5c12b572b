"""Tasks for tests that run workers as separate processes (CLI) with JobContext handlers."""

from __future__ import annotations

import asyncio
import os
import random

from aiopgq import JobContext, Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
SCHEMA = f'"{queue.schema}"'


@queue.task(name="app.steps", max_attempts=3)
async def steps(ctx: JobContext, total: int, stall_at: int) -> int:
    """`total` steps, resumable: each starts by saving its number as the checkpoint. The
    first run stalls at `stall_at` (the test kills it there)."""
    start = ctx.checkpoint["step"] if ctx.checkpoint else 0
    for step in range(start, total):
        await ctx.progress(step / total, state={"step": step})
        async with queue.pool.acquire() as conn:
            await conn.execute(
                f"INSERT INTO {SCHEMA}.steps (job_id, attempt, step) VALUES ($1, $2, $3)",
                ctx.job_id,
                ctx.attempt,
                step,
            )
        if step == stall_at and ctx.attempt == 1:
            await asyncio.sleep(3600)
    return total


@queue.task(name="app.transfer", max_attempts=100)
async def transfer(ctx: JobContext, n: int) -> None:
    """One ledger row per job, committed with the job's done (exactly once)."""
    await asyncio.sleep(random.uniform(0, 0.02))
    async with ctx.transaction() as conn:
        await conn.execute(
            f"INSERT INTO {SCHEMA}.transfers (job_id, n, attempt, pid) VALUES ($1, $2, $3, $4)",
            ctx.job_id,
            n,
            ctx.attempt,
            os.getpid(),
        )
        await asyncio.sleep(random.uniform(0, 0.1))  # a kill may land inside the transaction
