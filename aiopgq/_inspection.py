"""Inspection: reading jobs and queue state, and the switches that need no worker."""

from __future__ import annotations

from typing import Any

import asyncpg

from ._core import QueueCore
from ._db.migrations import missing_schema_as_error
from ._display import LIST_CHARS, VIEW_CHARS, decoded_job, view_job
from ._enqueue import check_queue_name
from ._errors import JobNotFound
from ._job import Job, JobStatus


class Inspection(QueueCore):
    async def get_job(self, job_id: int) -> Job:
        """The job's current row; JobNotFound when no job has that id (never enqueued, or
        finished and pruned after the worker's retention).

        >>> job = await queue.get_job(job_id)
        >>> job.status, job.result, job.last_error
        """
        # The Queue this mixin is part of waits for jobs (_results.py): Job.wait() works.
        return decoded_job(await self._job_row(job_id, None), owner=self)  # type: ignore[arg-type]

    async def _view_job(self, job_id: int) -> Job:
        """The job to show (dashboard, CLI): payload, result and metadata cut to
        VIEW_CHARS, and placeholders for what cannot be shown (see _display.py)."""
        return view_job(await self._job_row(job_id, VIEW_CHARS))

    async def _job_row(self, job_id: int, cap: int | None) -> asyncpg.Record:
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                row = await conn.fetchrow(self.sql.get_job, job_id, cap)
        if row is None:
            raise self._not_found(job_id)
        return row

    def _not_found(self, job_id: int) -> JobNotFound:
        return JobNotFound(
            f"no job with id {job_id} in schema {self.schema} "
            "(never enqueued there, or finished and pruned after the retention period)"
        )

    async def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Job]:
        """The newest jobs (highest id first) with this status, queue and task, if given;
        with `before`, those with a lower id (the next page: pass the last id you got).

        >>> failed = await queue.list_jobs(status="failed", queue="emails", limit=20)
        >>> older = await queue.list_jobs(status="failed", limit=20, before=failed[-1].id)
        """
        rows = await self._job_rows(status, queue, task, limit, before, None)
        return [decoded_job(row, owner=self) for row in rows]  # type: ignore[arg-type]

    async def _view_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[Job]:
        """list_jobs to show (dashboard, CLI): see _view_job."""
        rows = await self._job_rows(status, queue, task, limit, before, LIST_CHARS)
        return [view_job(row) for row in rows]

    async def _view_latest_failures(self, limit: int) -> list[Job]:
        """latest_failures to show (the dashboard's overview): see _view_job."""
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                rows = await conn.fetch(self.sql.latest_failures, limit, LIST_CHARS)
        return [view_job(row) for row in rows]

    async def _job_rows(
        self,
        status: JobStatus | str | None,
        queue: str | None,
        task: str | None,
        limit: int,
        before: int | None,
        cap: int | None,
    ) -> list[asyncpg.Record]:
        statuses = [s.value for s in JobStatus]
        wanted = None if status is None else getattr(status, "value", status)
        if wanted is not None and wanted not in statuses:
            raise ValueError(f"status must be one of {', '.join(statuses)}, got {status!r}")
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise ValueError(f"before must be a job id (an int) or None, got {before!r}")
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                return await conn.fetch(self.sql.list_jobs, wanted, queue, task, limit, before, cap)

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
