"""An application of durable steps for tests that SIGKILL worker processes (CLI):
tests/steps/test_steps_chaos.py."""

from __future__ import annotations

import asyncio
import os
import random

from aiopgq import JobContext, Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
SCHEMA = f'"{queue.schema}"'


async def _in_transaction(ctx: JobContext, step: str) -> str:
    """A step whose database effect commits with its record: exactly once."""
    async with ctx.transaction() as conn:
        await conn.execute(
            f"INSERT INTO {SCHEMA}.effects (job_id, step, attempt, pid) VALUES ($1, $2, $3, $4)",
            ctx.job_id,
            step,
            ctx.attempt,
            os.getpid(),
        )
        await asyncio.sleep(random.uniform(0, 0.02))  # a kill lands inside it too
    return f"{step} of {ctx.job_id}"


async def _outside(ctx: JobContext) -> int:
    """A step with an effect outside its record (its own commit, like an e-mail sent):
    at least once, and never after the step was recorded."""
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {SCHEMA}.outside (job_id, pid) VALUES ($1, $2)", ctx.job_id, os.getpid()
        )
    await asyncio.sleep(random.uniform(0, 0.02))
    return os.getpid()


@queue.task(name="steps.flow", max_attempts=100)
async def flow(ctx: JobContext, n: int) -> list[str]:
    debit = await ctx.step("debit", _in_transaction, ctx, "debit")
    await ctx.step("notify", _outside, ctx)
    if n % 3 == 0:
        await ctx.sleep(0.1)
    credit = await ctx.step("credit", _in_transaction, ctx, "credit")
    return [debit, credit]
