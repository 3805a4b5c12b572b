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


SPANS = f'"{queue.schema}".spans'


@queue.task(name="app.span", queue="limited", max_attempts=5)
async def span(ms: float, key: str = "") -> None:
    """Sleep `ms` milliseconds, then record when the handler ran (this host's clock:
    every worker process of a test runs on it) in the test's spans table."""
    from aiopgq import current_job

    started = time.time()
    await asyncio.sleep(ms / 1000)
    ended = time.time()
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {SPANS} (job_id, pid, key, started, ended) VALUES ($1, $2, $3, $4, $5)",
            current_job().id,
            os.getpid(),
            key,
            started,
            ended,
        )
