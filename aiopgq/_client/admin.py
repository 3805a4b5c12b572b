"""Control: what operators do to queues and jobs (pause, resume, cancel, retry)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import asyncpg

from .._db.connection import Connection
from .._db.migrations import missing_schema_as_error
from .._enqueue_options import check_queue_name
from .core import Core

logger = logging.getLogger("aiopgq.queue")

# Failed jobs re-queued per transaction by retry_failed().
_RETRY_PAGE = 1000


class Admin:
    """What operators do to queues and jobs: pause, resume, cancel, retry, NOTIFY switch."""

    def __init__(self, core: Core) -> None:
        self._core = core

    async def pause(self, queue: str) -> None:
        """Stop workers from claiming the queue's jobs (running jobs finish; enqueue works)."""
        await self._set_paused(queue, True)

    async def resume(self, queue: str) -> None:
        """Let workers claim the queue's jobs again, and wake them now."""
        await self._set_paused(queue, False)

    async def paused_queues(self) -> list[str]:
        """The paused queues, sorted."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                return list(await conn.fetchval(self._core.sql.paused_queues, None))

    async def cancel(self, job_id: int) -> bool:
        """Cancel a pending, waiting or running job: True if this call cancelled it, False if ..."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                row = await conn.fetchrow(self._core.sql.cancel, job_id, self._core.sql.channel)
        if row is None:
            raise self._core.not_found(job_id)
        if row["cancelled"] and self._core.observer is not None:
            try:
                self._core.observer.cancelled(job_id, row["task"], row["queue"])
            except Exception:
                logger.exception("an observer failed on the cancel of job %s", job_id)
        return bool(row["cancelled"])

    async def retry(self, job_id: int) -> bool:
        """Re-queue a failed or cancelled job as new (attempts reset, run now); its past ..."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                retried = await self._retry(conn, [job_id], ["failed", "cancelled"])
                if not retried:
                    await self._must_exist(conn, job_id)
        return bool(retried)

    async def retry_failed(self, queue: str | None = None, task: str | None = None) -> int:
        """Re-queue every failed job (of one queue and/or task, if given); returns how many."""
        if queue is not None:
            check_queue_name(queue)
        total, after = 0, 0
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                while True:
                    page = await conn.fetchrow(
                        self._core.sql.failed_jobs_page, queue, task, after, _RETRY_PAGE
                    )
                    assert page is not None  # an aggregate: always one row
                    ids: list[int] = page["ids"]
                    if not ids:
                        return total
                    total += len(await self._retry(conn, ids, ["failed"]))
                    after = page["last_id"]
                    if len(ids) < _RETRY_PAGE:
                        return total

    async def _retry(self, conn: Connection, ids: Sequence[int], statuses: list[str]) -> list[int]:
        retried = await self._retry_rows(conn, ids, statuses)
        if len(retried) < len(ids):
            done = set(retried)
            retried += await self._retry_archived(conn, [i for i in ids if i not in done], statuses)
        return retried

    async def _retry_rows(
        self, conn: Connection, ids: Sequence[int], statuses: list[str]
    ) -> list[int]:
        args = (list(ids), statuses, self._core.sql.channel)
        try:
            row = await conn.fetchrow(self._core.sql.retry_jobs, *args)
        except asyncpg.UniqueViolationError:
            # A job with one of their idempotency keys was enqueued meanwhile: once
            # more, and the statement sees it (see sql/admin/retry_jobs.sql).
            row = await conn.fetchrow(self._core.sql.retry_jobs, *args)
        assert row is not None  # aggregates: always one row
        return list(row["ids"])

    async def _retry_archived(
        self, conn: Connection, ids: Sequence[int], statuses: list[str]
    ) -> list[int]:
        """Jobs the partitioned layout moved to the archive come back to the jobs table and
        are re-queued in one transaction, so the maintenance leader cannot archive them
        again in between (they are invisible to it until they are pending). In the plain
        layout the archive is empty: one cheap statement, only when some ids were not
        retried."""
        for attempt in range(2):
            try:
                async with conn.transaction():
                    if not await conn.fetchval(self._core.sql.archive_restore, list(ids), statuses):
                        return []
                    row = await conn.fetchrow(
                        self._core.sql.retry_jobs, list(ids), statuses, self._core.sql.channel
                    )
                    assert row is not None  # aggregates: always one row
                    return list(row["ids"])
            except asyncpg.UniqueViolationError:
                if attempt:  # a live job took one of their idempotency keys meanwhile
                    raise
        return []

    async def set_notify(self, queue: str, enabled: bool) -> None:
        """Turn the insert trigger's NOTIFY on or off for a queue (off = poll-only)."""
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                await conn.execute(
                    self._core.sql.set_queue_notify, check_queue_name(queue), enabled
                )

    async def _set_paused(self, queue: str, paused: bool) -> None:
        async with self._core.pool.acquire() as conn:
            with missing_schema_as_error(self._core.schema):
                await conn.fetchval(
                    self._core.sql.set_queue_paused,
                    check_queue_name(queue),
                    paused,
                    self._core.sql.channel,
                )

    async def _must_exist(self, conn: Connection, job_id: int) -> None:
        if await conn.fetchrow(self._core.sql.get_job, job_id, 0) is None:
            raise self._core.not_found(job_id)
