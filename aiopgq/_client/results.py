"""Results you can await: queue.result(), queue.wait_for_job() and Job.wait()."""

from __future__ import annotations

import os
from typing import Any

import anyio

from .._errors import Error
from .._models import Job, JobStatus, job_from_record
from .core import QueueCore
from .waiters import Waiters


class JobFailed(Error):
    """The awaited job ended failed: `job` as it ended, `error` (the exception's type and
    message, or the reason it could not run) and `traceback` (None when there is none).

    >>> try: await queue.result(job_id)
    ... except JobFailed as exc: print(exc.error, exc.job.attempts)
    """

    def __init__(self, job: Job) -> None:
        text = (job.last_error or "").strip()
        self.job = job
        self.traceback = text if text.startswith("Traceback") else None
        self.error = text.splitlines()[-1] if text else "no error recorded"
        super().__init__(
            f"job {job.id} ({job.task}) failed after {job.attempts} attempt"
            f"{'' if job.attempts == 1 else 's'}: {self.error}"
        )


class JobCancelled(Error):
    """The awaited job was cancelled before it ran: `job` as it ended.

    >>> try: await job.wait()
    ... except JobCancelled: print("cancelled")
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        super().__init__(f"job {job.id} ({job.task}) was cancelled")


class Results(QueueCore):
    # Seconds between reads of the awaited jobs while the waiters' LISTEN connection is
    # down: the longest a waiter waits past its job's end then.
    result_poll_interval: float = 1.0
    # Where the waiters LISTEN when the queue's database is behind pgbouncer in
    # transaction mode (LISTEN needs a session): a direct address; else $AIOPGQ_LISTEN_DSN,
    # else the queue's database.
    result_listen_dsn: str | None = None
    _waiters: Waiters | None = None

    @property
    def waiter_name(self) -> str:
        """application_name of the waiters' LISTEN connection (pg_stat_activity), shared by
        every Queue of this process on the same database."""
        return f"aiopgq-waiter {os.getpid()}"

    # The API: a timeout argument, as asyncio.wait_for has (ASYNC109).
    async def result(self, job_id: int, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """The stored return value of the job, waiting until it ends; JobFailed, JobCancelled,
        JobNotFound, or TimeoutError after `timeout` seconds.

        >>> job = await add.enqueue(1, b=2)
        >>> await queue.result(job.id, timeout=30)  # 3
        """
        return (await self.wait_for_job(job_id, timeout)).result

    async def wait_for_job(self, job_id: int, timeout: float | None = None) -> Job:  # noqa: ASYNC109
        """The job as it ended (done); JobFailed, JobCancelled, JobNotFound, or TimeoutError
        after `timeout` seconds. The waiters of every Queue of the process on one database
        share one LISTEN connection.

        >>> job = await queue.wait_for_job(job_id, timeout=30)
        >>> job.status, job.result, job.finished_at
        """
        self.pool  # noqa: B018 - raises QueueNotOpen when closed
        if self._waiters is None:
            self._waiters = Waiters(
                lambda: self.pool,
                self.sql,
                self._listen_args,
                lambda: self.result_poll_interval,
            )
        try:
            with anyio.fail_after(timeout):
                row = await self._waiters.wait(job_id)
        except TimeoutError:
            raise TimeoutError(f"job {job_id} has not ended within {timeout} s") from None
        job = job_from_record(row, owner=self)
        if job.status is JobStatus.FAILED:
            raise JobFailed(job)
        if job.status is JobStatus.CANCELLED:
            raise JobCancelled(job)
        return job

    def _listen_args(self) -> tuple[str | None, dict[str, Any]]:
        """Where the waiters' LISTEN connection goes: Queues with equal ones share it."""
        dsn, kwargs = self.connect_args()
        dsn = self.result_listen_dsn or os.environ.get("AIOPGQ_LISTEN_DSN") or dsn
        settings = {**kwargs.pop("server_settings", {}), "application_name": self.waiter_name}
        return dsn, {**kwargs, "server_settings": settings}

    async def _close_waiters(self) -> None:
        waiters, self._waiters = self._waiters, None
        if waiters is not None:
            await waiters.close()
