"""An application whose task declares its queue's key limit, for worker processes."""

from __future__ import annotations

import asyncio
import os
import time

from aiopgq import Queue, current_job

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
SPANS = f'"{queue.schema}".spans'


@queue.task(name="declared.span", queue="declared", key_concurrency=2)
async def span(ms: float, key: str) -> None:
    """Sleep `ms` milliseconds, then record when the handler ran (this host's clock:
    every worker process of a test runs on it) in the test's spans table."""
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
