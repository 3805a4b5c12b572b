"""Control: what operators do to queues and jobs (pause, resume, cancel, retry)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import asyncpg

from ._db.connection import Connection
from ._db.migrations import missing_schema_as_error
from ._enqueue import check_queue_name
from ._inspection import Inspection

logger = logging.getLogger("aiopgq.queue")

# Failed jobs re-queued per transaction by retry_failed().
_RETRY_PAGE = 1000


class Control(Inspection):
    async def pause(self, queue: str) -> None:
        """Stop workers from claiming the queue's jobs (running jobs finish; enqueue works).

        Workers hear of it at once by NOTIFY, and in any case within one poll interval.

        >>> await queue.pause("emails")
        >>> await queue.resume("emails")  # workers claim again at once
        """
        await self._set_paused(queue, True)

    async def resume(self, queue: str) -> None:
        """Let workers claim the queue's jobs again, and wake them now.

        >>> await queue.resume("emails")
        """
        await self._set_paused(queue, False)

    async def paused_queues(self) -> list[str]:
        """The paused queues, sorted.

        >>> await queue.paused_queues()
        ['emails']
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                return list(await conn.fetchval(self.sql.paused_queues, None))

    async def cancel(self, job_id: int) -> bool:
        """Cancel a pending or running job: True if this call cancelled it, False if it had
        finished (nothing changes); JobNotFound, as get_job, when no job has that id.

        A running job ends `cancelled` at once and is not retried; its worker stops the
        handler as soon as it hears of it (by NOTIFY, else at its next heartbeat). A `def`
        handler running in a thread cannot be interrupted: its result is discarded.

        >>> if await queue.cancel(job.id): print("cancelled, running or not")
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                row = await conn.fetchrow(self.sql.cancel, job_id, self.sql.channel)
        if row is None:
            raise self._not_found(job_id)
        if row["cancelled"] and self._observer is not None:
            try:
                self._observer.cancelled(job_id, row["task"], row["queue"])
            except Exception:
                logger.exception("an observer failed on the cancel of job %s", job_id)
        return bool(row["cancelled"])

    async def retry(self, job_id: int) -> bool:
        """Re-queue a failed or cancelled job as new (attempts reset, run now); its past
        errors stay in `Job.errors`. False if the job is in another state, or a live job
        holds its idempotency key; JobNotFound if there is no such job.

        >>> await queue.retry(job.id)
        True
        """
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                retried = await self._retry(conn, [job_id], ["failed", "cancelled"])
                if not retried:
                    await self._must_exist(conn, job_id)
        return bool(retried)

    async def retry_failed(self, queue: str | None = None, task: str | None = None) -> int:
        """Re-queue every failed job (of one queue and/or task, if given); returns how many.

        Cancelled jobs are left alone (retry them one by one with `retry`). Of several
        failed jobs with the same idempotency key, only the newest is re-queued, and
        none while a live job holds the key.

        >>> await queue.retry_failed(queue="emails")
        12
        """
        if queue is not None:
            check_queue_name(queue)
        total, after = 0, 0
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                while True:
                    page = await conn.fetchrow(
                        self.sql.failed_jobs_page, queue, task, after, _RETRY_PAGE
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
        args = (list(ids), statuses, self.sql.channel)
        try:
            row = await conn.fetchrow(self.sql.retry_jobs, *args)
        except asyncpg.UniqueViolationError:
            # A job with one of their idempotency keys was enqueued meanwhile: once
            # more, and the statement sees it (see sql/retry_jobs.sql).
            row = await conn.fetchrow(self.sql.retry_jobs, *args)
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
                    if not await conn.fetchval(self.sql.archive_restore, list(ids), statuses):
                        return []
                    row = await conn.fetchrow(
                        self.sql.retry_jobs, list(ids), statuses, self.sql.channel
                    )
                    assert row is not None  # aggregates: always one row
                    return list(row["ids"])
            except asyncpg.UniqueViolationError:
                if attempt:  # a live job took one of their idempotency keys meanwhile
                    raise
        return []

    async def _set_paused(self, queue: str, paused: bool) -> None:
        async with self.pool.acquire() as conn:
            with missing_schema_as_error(self.schema):
                await conn.fetchval(
                    self.sql.set_queue_paused, check_queue_name(queue), paused, self.sql.channel
                )

    async def _must_exist(self, conn: Connection, job_id: int) -> None:
        if await conn.fetchrow(self.sql.get_job, job_id, 0) is None:
            raise self._not_found(job_id)
