"""A periodic task for tests that run workers as separate processes (CLI)."""

from __future__ import annotations

import os
from datetime import datetime

from aiopgq import Queue, current_job

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])
LEDGER = f'"{queue.schema}".ledger'


@queue.periodic("* * * * * *", name="every.second", missed="all")
async def every_second(tick: datetime) -> None:
    """Record each run of each tick (one row per execution)."""
    job = current_job()
    assert job.tick == tick
    async with queue.pool.acquire() as conn:
        await conn.execute(
            f"INSERT INTO {LEDGER} (job_id, attempt, pid, task) VALUES ($1, $2, $3, $4)",
            job.id,
            job.attempts,
            os.getpid(),
            tick.isoformat(),
        )
