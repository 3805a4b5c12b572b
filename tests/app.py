"""A small application for tests that run workers as separate processes (CLI)."""

from __future__ import annotations

import asyncio
import os
import time

from aiopgq import Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
LEDGER = f'"{queue.schema}".ledger'


async def record(name: str, at: float | None = None) -> None:
    """Write one row per execution, in its own transaction (`at`: when, else now)."""
    from aiopgq import current_job

    job = current_job()
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {LEDGER} (job_id, attempt, pid, task, at) "
            "VALUES ($1, $2, $3, $4, coalesce(to_timestamp($5), clock_timestamp()))",
            job.id,
            job.attempts,
            os.getpid(),
            name,
            at,
        )


_recording: set[asyncio.Task[None]] = set()


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


@queue.task(name="app.block", max_attempts=3)
async def block(seconds: float) -> None:
    """Runs until cancelled; records when the cancellation reached the handler."""
    await record("app.block")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        at = time.time()  # the moment the worker stopped us; written by another task
        writer = asyncio.get_running_loop().create_task(record("app.block.cancelled", at))
        _recording.add(writer)
        writer.add_done_callback(_recording.discard)
        raise


@queue.task(name="app.mail", queue="emails", max_attempts=2, priority=3)
async def mail(to: str, subject: str = "") -> None:
    await record("app.mail")
