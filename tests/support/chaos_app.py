"""The application the chaos workers run (`python -m aiopgq worker tests.support.chaos_app:queue`).

Every handler first writes one ledger row per execution, in its own transaction, through the
worker's own pool, so the harness can count executions (and duplicates) per job. Each
execution gets a random token and the insert is retried on connection errors with the same
token: a write whose commit reply was lost with the connection is not counted twice, and a
killed backend does not fail the job (the ledger stays exactly one row per execution).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import asyncpg

from aiopgq import Queue, Retry, current_job

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_CHAOS_SCHEMA"])
LEDGER = f'"{queue.schema}".ledger'
# A retry, should a handler fail after all, comes back in well under a second.
QUICK_RETRY = Retry(base=0.2, factor=2, cap=1, jitter=0.1)


def _connection_trouble(exc: BaseException) -> bool:
    # InternalClientError: a pool connection whose backend was terminated while idle can
    # fail its next statement, or the reset when it goes back to the pool (after the
    # insert committed: the token makes the retry harmless).
    connection_errors = (
        OSError,
        asyncio.TimeoutError,
        asyncpg.InterfaceError,
        asyncpg.InternalClientError,
    )
    if isinstance(exc, connection_errors):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return isinstance(exc, asyncpg.PostgresError) and state[:2] in ("08", "53", "57")


async def record(task: str) -> None:
    """One ledger row for this execution of the current job."""
    job = current_job()
    token = uuid.uuid4()
    deadline = time.monotonic() + 30
    delay = 0.02
    while True:
        try:
            async with queue.pool.acquire() as conn:
                await conn.execute(
                    f"INSERT INTO {LEDGER} (token, job_id, attempt, pid, task) "
                    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (token) DO NOTHING",
                    token,
                    job.id,
                    job.attempts,
                    os.getpid(),
                    task,
                )
            return
        except Exception as exc:
            if not _connection_trouble(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


@queue.task(name="chaos.work", max_attempts=10, retry=QUICK_RETRY)
async def work(n: int, ms: int) -> None:
    """The bulk job: record, then sleep a few milliseconds (so jobs are in flight)."""
    await record("chaos.work")
    await asyncio.sleep(ms / 1000)


@queue.task(name="chaos.slow", max_attempts=10, retry=QUICK_RETRY)
async def slow(seconds: float) -> None:
    """A job that is still running when its worker is asked to stop."""
    await record("chaos.slow")
    await asyncio.sleep(seconds)


@queue.task(name="chaos.crash", max_attempts=2)
async def crash() -> None:
    """A poison job: it kills the process that runs it."""
    await record("chaos.crash")
    os.kill(os.getpid(), signal.SIGKILL)
