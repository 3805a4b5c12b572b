"""The application that tests/workflows/test_sequences.py runs in worker processes: a step
of a sequence that records its start and its end in the test's ledger table, and fails
while the test's switch table says so."""

from __future__ import annotations

import asyncio
import os

from aiopgq import JobContext, Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
LEDGER = f'"{queue.schema}".ledger'
SWITCH = f'"{queue.schema}".switch'


async def _record(ctx: JobContext, key: str, n: int, phase: str) -> None:
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {LEDGER} (job_id, pid, key, n, phase) VALUES ($1, $2, $3, $4, $5)",
            ctx.job_id,
            os.getpid(),
            key,
            n,
            phase,
        )


@queue.task(name="seq.step", max_attempts=1)
async def step(ctx: JobContext, key: str, n: int, fail: bool = False) -> int:
    await _record(ctx, key, n, "start")
    await asyncio.sleep(0.01)
    if fail:
        async with queue.pool.acquire() as conn:
            if await conn.fetchval(f"SELECT count(*) > 0 FROM {SWITCH}"):
                await _record(ctx, key, n, "fail")
                raise RuntimeError(f"step {key}/{n} fails while the switch is on")
    await _record(ctx, key, n, "end")
    return n


@queue.task(name="seq.crash")
async def crash(ctx: JobContext, key: str, n: int) -> int:
    """Kills its worker process on its first attempt; done on the next."""
    await _record(ctx, key, n, "start")
    if ctx.attempt == 1:
        os.kill(os.getpid(), 9)
    await _record(ctx, key, n, "end")
    return n
