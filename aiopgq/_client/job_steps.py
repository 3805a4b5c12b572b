"""Reading a job's durable steps back (Queue.job_steps): `aiopgq job` and the dashboard."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from .._db.migrations import missing_schema_as_error
from .._steps import JobStep, JobSteps
from .core import Core


def _at(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, timezone.utc)


async def read_steps(core: Core, job_id: int) -> JobSteps:
    """The job's recorded steps and its current wait (an archived job has no steps)."""
    async with core.pool.acquire() as conn:
        with missing_schema_as_error(core.schema):
            rows = await conn.fetch(core.sql.job_steps, job_id)
            wait = await conn.fetchrow(core.sql.job_wait, job_id)
    steps = tuple(
        JobStep(
            name=r["name"],
            kind=r["kind"],
            attempt=r["attempt"],
            started_at=datetime.fromtimestamp(r["started"], timezone.utc),
            finished_at=datetime.fromtimestamp(r["finished"], timezone.utc),
            until=_at(r["until"]),
        )
        for r in rows
    )
    if wait is None:
        return JobSteps(steps)
    sleeping = None
    last = steps[-1] if steps else None
    if (
        wait["event"] is None
        and wait["status"] in ("pending", "waiting")  # a far wake time waits (job_timers)
        and last is not None
        and last.kind == "sleep"
        and wait["run_at"] > time.time()
    ):
        sleeping = _at(wait["run_at"])
    return JobSteps(steps, wait["event"], _at(wait["until"]), sleeping)
