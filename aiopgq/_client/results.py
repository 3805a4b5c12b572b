"""Results you can await: queue.result(), queue.wait_for_job() and Job.wait(), and the
errors they raise."""

from __future__ import annotations

import os
from typing import Any

import anyio

from .._errors import Error
from .._models import Job, JobStatus, JobWaiter, job_from_record
from .core import Core
from .waiters import Waiters


class JobFailed(Error):
    """The awaited job ended failed: `job` as it ended, `error` (the exception's type and
    message, or the reason it could not run) and `traceback` (None when there is none).

    >>> try: await queue.result(job_id)
    ... except JobFailed as exc: print(exc.error, exc.job.attempts)

    Args:
        job: the job as it ended; `error` and `traceback` are read from its last_error.
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
    """The awaited job ended cancelled (`Queue.cancel`, pending or running): `job` as it ended.

    >>> try: await job.wait()
    ... except JobCancelled: print("cancelled")

    Args:
        job: the job as it ended.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        super().__init__(f"job {job.id} ({job.task}) was cancelled")


class Results:
    """Waiting for jobs to end: result() and wait_for_job()."""

    def __init__(self, core: Core, waiter: JobWaiter) -> None:
        self._core = core
        self._waiter = waiter  # the Queue: Job.wait() of the Jobs it returns waits there
        # Seconds between reads of the awaited jobs while the waiters' LISTEN connection
        # is down: the longest a waiter waits past its job's end then.
        self.poll_interval = 1.0
        # Where the waiters LISTEN when the queue's database is behind pgbouncer in
        # transaction mode (LISTEN needs a session): a direct address; else
        # $AIOPGQ_LISTEN_DSN, else the queue's database.
        self.listen_dsn: str | None = None
        self.waiters: Waiters | None = None

    @property
    def waiter_name(self) -> str:
        """application_name of the waiters' LISTEN connection (pg_stat_activity), shared by
        every Queue of this process on the same database."""
        return f"aiopgq-waiter {os.getpid()}"

    # A timeout argument, as asyncio.wait_for has (ASYNC109).
    async def wait_for_job(self, job_id: int, timeout: float | None = None) -> Job:  # noqa: ASYNC109
        """The job as it ended; JobFailed, JobCancelled, JobNotFound, TimeoutError."""
        self._core.pool  # noqa: B018 - raises QueueNotOpen when closed
        if self.waiters is None:
            self.waiters = Waiters(
                lambda: self._core.pool,
                self._core.sql,
                self._listen_args,
                lambda: self.poll_interval,
            )
        try:
            with anyio.fail_after(timeout):
                row = await self.waiters.wait(job_id)
        except TimeoutError:
            raise TimeoutError(f"job {job_id} has not ended within {timeout} s") from None
        job = job_from_record(row, self._waiter)
        if job.status is JobStatus.FAILED:
            raise JobFailed(job)
        if job.status is JobStatus.CANCELLED:
            raise JobCancelled(job)
        return job

    def _listen_args(self) -> tuple[str | None, dict[str, Any]]:
        """Where the waiters' LISTEN connection goes: Queues with equal ones share it."""
        dsn, kwargs = self._core.connect_args()
        dsn = self.listen_dsn or os.environ.get("AIOPGQ_LISTEN_DSN") or dsn
        settings = {**kwargs.pop("server_settings", {}), "application_name": self.waiter_name}
        return dsn, {**kwargs, "server_settings": settings}

    async def close(self) -> None:
        waiters, self.waiters = self.waiters, None
        if waiters is not None:
            await waiters.close()
