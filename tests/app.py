"""A small application for tests that run workers as separate processes (CLI)."""

from __future__ import annotations

import asyncio
import os

from aiopgq import Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
LEDGER = f'"{queue.schema}".ledger'


async def record(name: str) -> None:
    """Write one row per execution, in its own transaction."""
    from aiopgq import current_job

    job = current_job()
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {LEDGER} (job_id, attempt, pid, task) VALUES ($1, $2, $3, $4)",
            job.id,
            job.attempts,
            os.getpid(),
            name,
        )


@queue.task(name="app.noop", max_attempts=5)
async def noop(n: int) -> None:
    await record("app.noop")


@queue.task(name="app.sleep", max_attempts=3)
async def sleep(seconds: float) -> None:
    await record("app.sleep")
    await asyncio.sleep(seconds)


@queue.task(name="app.crash", max_attempts=2)
async def crash() -> None:
    await record("app.crash")
    os.kill(os.getpid(), 9)


@queue.task(name="app.mail", queue="emails", max_attempts=2, priority=3)
async def mail(to: str, subject: str = "") -> None:
    await record("app.mail")
