"""Inspection: reading jobs and queue state, and the switches that need no worker."""

from __future__ import annotations

import logging
from typing import Any

from ._core import QueueCore
from ._db.migrations import missing_schema_as_error
from ._enqueue import check_queue_name
from ._errors import JobNotFound
from ._job import Job, job_from_record

logger = logging.getLogger("aiopgq.queue")


class Inspection(QueueCore):
    async def get_job(self, job_id: int) -> Job:
        """The job's current row; JobNotFound when no job has that id (never enqueued, or
        finished and pruned after the worker's retention).

        >>> job = await queue.get_job(job_id)
        >>> job.status, job.result, job.last_error
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                row = await conn.fetchrow(self.sql.get_job, job_id)
        if row is None:
            raise self._not_found(job_id)
        # The Queue this mixin is part of waits for jobs (_results.py): Job.wait() works.
        return job_from_record(row, owner=self)  # type: ignore[arg-type]

    async def cancel(self, job_id: int) -> bool:
        """Cancel a job that has not started: True if this call cancelled it, False if it is
        running or finished (it is left alone); JobNotFound, as get_job, when no job has
        that id.

        >>> if not await queue.cancel(job.id): print("too late: it started")
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                row = await conn.fetchrow(self.sql.cancel, job_id)
        if row is None:
            raise self._not_found(job_id)
        if row["cancelled"] and self._observer is not None:
            try:
                self._observer.cancelled(job_id, row["task"], row["queue"])
            except Exception:
                logger.exception("an observer failed on the cancel of job %s", job_id)
        return bool(row["cancelled"])

    def _not_found(self, job_id: int) -> JobNotFound:
        return JobNotFound(
            f"no job with id {job_id} in schema {self.schema} "
            "(never enqueued there, or finished and pruned after the retention period)"
        )

    async def set_notify(self, queue: str, enabled: bool) -> None:
        """Turn the insert trigger's NOTIFY on or off for a queue (off = poll-only)."""
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                await conn.execute(self.sql.set_queue_notify, check_queue_name(queue), enabled)

    async def status(self) -> list[dict[str, Any]]:
        """Job counts per queue and status, with the age of the oldest runnable job."""
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                rows = await conn.fetch(self.sql.status)
        return [dict(row) for row in rows]

    async def blocked_sessions(self) -> list[dict[str, Any]]:
        """Sessions of this database waiting on a lock, with the pids blocking them."""
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(self.sql.locks)
        return [dict(row) for row in rows]
