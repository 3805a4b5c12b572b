"""Read: jobs, the queues' state and statistics, schedules: every read of the client."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import asyncpg

from .._db.migrations import missing_schema_as_error
from .._display import LIST_CHARS, VIEW_CHARS, decoded_job, view_job
from .._errors import ConfigurationError, shown
from .._models import Job, JobStatus, JobWaiter, QueueStats
from .._schedule import Schedule
from .core import Core


class Read:
    """Reading jobs and the queues' state."""

    def __init__(self, core: Core, waiter: JobWaiter) -> None:
        self._core = core
        self._waiter = waiter  # the Queue: Job.wait() of the Jobs read waits there

    async def get_job(self, job_id: int, *, preview: bool = False) -> Job:
        """The job's current row (JobNotFound when there is none); see Queue.get_job."""
        row = await self._job_row(job_id, VIEW_CHARS if preview else None)
        return view_job(row) if preview else decoded_job(row, self._waiter)

    async def _job_row(self, job_id: int, cap: int | None) -> asyncpg.Record:
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                row = await conn.fetchrow(self._core.sql.get_job, job_id, cap)
        if row is None:
            raise self._core.not_found(job_id)
        return row

    async def list_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        before: int | None = None,
        preview: bool = False,
    ) -> list[Job]:
        """The newest jobs (highest id first) with this status, queue and task, if given; ..."""
        cap = LIST_CHARS if preview else None
        statuses = [s.value for s in JobStatus]
        wanted = None if status is None else getattr(status, "value", status)
        if wanted is not None and wanted not in statuses:
            raise ValueError(f"status must be one of {', '.join(statuses)}, got {shown(status)}")
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {shown(limit)}")
        if before is not None and (isinstance(before, bool) or not isinstance(before, int)):
            raise ValueError(f"before must be a job id (an int) or None, got {shown(before)}")
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                rows = await conn.fetch(
                    self._core.sql.list_jobs, wanted, queue, task, limit, before, cap
                )
        if preview:
            return [view_job(row) for row in rows]
        return [decoded_job(row, self._waiter) for row in rows]

    async def status(self) -> list[dict[str, Any]]:
        """Job counts per queue and status over every retained job (the summary's rows)."""
        rows: list[dict[str, Any]] = []
        for q in await self.queue_stats(window=None):
            counts = (
                ("cancelled", q.cancelled, None, None),
                ("done", q.done, None, None),
                ("failed", q.failed, None, None),
                ("pending", q.runnable + q.scheduled, q.oldest_runnable_age, None),
                ("running", q.running, None, q.progress),
                ("waiting", q.waiting, None, None),
            )
            for status, jobs, age, progress in counts:
                if jobs:
                    rows.append(
                        {
                            "queue": q.queue,
                            "status": status,
                            "jobs": jobs,
                            "oldest_runnable_age": age,
                            "progress": progress,
                        }
                    )
        return rows

    async def blocked_sessions(self) -> list[dict[str, Any]]:
        """Sessions of this database waiting on a lock, with the pids blocking them."""
        async with self._core.pool.acquire() as conn:
            rows = await conn.fetch(self._core.sql.locks)
        return [dict(row) for row in rows]

    async def queue_stats(self, *, window: float | None = 60.0) -> list[QueueStats]:
        """Every known queue: with jobs now or in the window, settings, or a registered
        task (None: every job kept)."""
        if window is not None:
            if isinstance(window, bool) or not isinstance(window, (int, float)):
                raise TypeError(f"window must be seconds (a number > 0), got {shown(window)}")
            if not math.isfinite(window) or window <= 0:
                raise ValueError(f"window must be seconds > 0, got {shown(window)}")
        seconds = None if window is None else float(window)
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                rows = await conn.fetch(self._core.sql.queue_stats, seconds)
        return [QueueStats.of(row, math.inf if seconds is None else seconds) for row in rows]

    async def latest_failures(self, limit: int = 10, *, preview: bool = False) -> list[Job]:
        """The jobs that failed last, newest first (by when they failed)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {shown(limit)}")
        cap = LIST_CHARS if preview else None
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                rows = await conn.fetch(self._core.sql.latest_failures, limit, cap)
        if preview:
            return [view_job(row) for row in rows]
        return [decoded_job(row, self._waiter) for row in rows]

    async def schedule_status(self) -> list[dict[str, Any]]:
        """Every schedule in the database, with its last run and next run."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                rows = [dict(row) for row in await conn.fetch(self._core.sql.schedule_status)]
        now = datetime.now(timezone.utc)
        for row in rows:
            row["next_run"] = self._next_run(row, now)
        return rows

    def _next_run(self, row: dict[str, Any], now: datetime) -> datetime | None:
        """When a worker will enqueue the schedule's next tick, if one runs it by then."""
        schedule = self._core.schedules.get(row["name"])
        if schedule is None or schedule.cron != row["cron"]:
            try:  # a schedule of another program (the CLI has none)
                schedule = Schedule(row["cron"], name=row["name"], timezone=row["timezone"])
            except ConfigurationError:
                return None
        last = row["last_tick"] or row["since"]
        return schedule.next_after(max(now, last))
