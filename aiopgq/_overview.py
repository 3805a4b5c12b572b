"""Queue statistics for live views: depth, recent rates and pause state per queue."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._core import QueueCore
from ._db.migrations import missing_schema_as_error
from ._display import decoded_job
from ._job import Job


@dataclass(frozen=True)
class QueueStats:
    """One queue now, and what went through it in the last `window` seconds.

    >>> for q in await queue.queue_stats(window=60):
    ...     print(q.queue, q.runnable, q.running, f"{q.rate_in:.1f}/s", q.paused)
    """

    queue: str
    runnable: int  # pending jobs whose run_at has come
    scheduled: int  # pending jobs due later
    running: int
    arrived: int  # jobs enqueued in the window (and not pruned since)
    done: int  # jobs that finished in the window, by outcome
    failed: int
    cancelled: int
    oldest_runnable_age: float | None  # seconds the oldest runnable job has waited
    paused: bool
    window: float

    @property
    def rate_in(self) -> float:
        """Jobs enqueued per second over the window."""
        return self.arrived / self.window

    @property
    def rate_out(self) -> float:
        """Jobs finished (done, failed or cancelled) per second over the window."""
        return (self.done + self.failed + self.cancelled) / self.window


class Overview(QueueCore):
    async def queue_stats(self, *, window: float = 60.0) -> list[QueueStats]:
        """Every queue with jobs pending, running or finished in the last `window` seconds,
        or paused: its depth, what arrived and finished in the window, its pause state.

        It reads the partial indexes of pending, running and recently finished jobs, not
        the table: cheap enough to poll every second or two.

        >>> stats = await queue.queue_stats(window=60)
        >>> {q.queue: q.runnable for q in stats}
        """
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise TypeError(f"window must be seconds (a number > 0), got {window!r}")
        if not math.isfinite(window) or window <= 0:
            raise ValueError(f"window must be seconds > 0, got {window!r}")
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                rows = await conn.fetch(self.sql.queue_stats, float(window))
        return [QueueStats(**dict(row), window=float(window)) for row in rows]

    async def latest_failures(self, limit: int = 10) -> list[Job]:
        """The jobs that failed last, newest first (by when they failed).

        Unlike `list_jobs(status="failed")`, which walks jobs in id order, it reads the
        index of finished jobs backwards: cheap to poll under millions of done jobs.

        >>> for job in await queue.latest_failures(5): print(job.id, job.last_error)
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                rows = await conn.fetch(self.sql.latest_failures, limit, None)
        return [decoded_job(row) for row in rows]
