"""Nothing fails silently: every job that ends failed is logged with its reason."""

from __future__ import annotations

import logging

import asyncpg
import pytest

from aiopgq import JobStatus, Queue

from ..support.helpers import eventually


def failures(caplog: pytest.LogCaptureFixture) -> dict[int, logging.LogRecord]:
    """WARNING records about jobs that ended failed, by job id."""
    return {
        r.job_id: r  # type: ignore[attr-defined]
        for r in caplog.records
        if r.levelno == logging.WARNING and hasattr(r, "job_id") and " failed" in r.getMessage()
    }


async def test_jobs_that_cannot_run_are_logged_with_id_task_queue_and_reason(
    dsn: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.task(name="log.typed", queue="logq")
    async def typed(n: int) -> object:
        return object()  # cannot be stored as JSON

    # Enqueued by a process that knows no task, before any worker registered one.
    async with Queue(dsn, schema=queue.schema) as producer:
        unknown = await producer.enqueue("log.nobody", {}, queue="logq")
        misfit = await producer.enqueue("log.typed", {"m": 1}, queue="logq")
    unstorable = await typed.enqueue(n=1)

    with caplog.at_level(logging.WARNING, logger="aiopgq"):
        await queue.worker().run(burst=True)

    logged = failures(caplog)
    for job, reason in (
        (unknown, "no task named 'log.nobody' is registered in this worker"),
        (misfit, "its payload does not match the task's arguments"),
        (unstorable, "returned a object that cannot be stored as JSON"),
    ):
        assert (await queue.get_job(job.id)).status is JobStatus.FAILED
        record = logged[job.id]
        message = record.getMessage()
        assert str(job.id) in message and job.task in message and "logq" in message
        assert reason in message, message
        assert (record.task, record.queue) == (job.task, "logq")  # type: ignore[attr-defined]


async def test_last_attempt_failing_is_logged_as_failed_for_good(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.task(name="log.raises", max_attempts=1)
    async def raises() -> None:
        raise ValueError("the reason")

    job = await raises.enqueue()
    with caplog.at_level(logging.WARNING, logger="aiopgq"):
        await queue.worker().run(burst=True)
    message = failures(caplog)[job.id].getMessage()
    assert "failed for good" in message and "ValueError('the reason')" in message
    assert "log.raises" in message and "default" in message


async def test_lease_lost_on_the_last_attempt_is_logged(
    queue: Queue, conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    # A job whose worker died on its last attempt (no heartbeat for an hour).
    job_id = await conn.fetchval(
        f'INSERT INTO "{queue.schema}".jobs (task, queue, status, attempts, max_attempts, '
        "locked_by, heartbeat_at) VALUES ('log.lost', 'lostq', 'running', 2, 2, 'gone', "
        "now() - interval '1 hour') RETURNING id"
    )
    with caplog.at_level(logging.WARNING, logger="aiopgq"):
        async with queue.worker(queues=["lostq"], maintenance_interval=0.05):

            async def failed() -> bool:
                return (await queue.get_job(job_id)).status is JobStatus.FAILED

            await eventually(failed)
    message = failures(caplog)[job_id].getMessage()
    assert "log.lost" in message and "lostq" in message and "lease expired" in message


@pytest.mark.parametrize("hold_transaction", [False, True])
async def test_debug_logs_each_jobs_start_and_end(
    queue: Queue, caplog: pytest.LogCaptureFixture, hold_transaction: bool
) -> None:
    @queue.task(name="log.ok")
    async def ok(n: int) -> int:
        return n

    @queue.task(name="log.retry", max_attempts=2)
    async def retry() -> None:
        raise RuntimeError("again")

    jobs = await ok.enqueue_many([{"n": 1}, {"n": 2}])
    retried = await retry.enqueue()
    with caplog.at_level(logging.DEBUG, logger="aiopgq.worker"):
        await queue.worker(hold_transaction=hold_transaction).run(burst=True)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    for job in jobs:
        assert f"job {job.id} (log.ok) started on queue default, attempt 1/5" in lines, lines
        assert any(line.startswith(f"job {job.id} (log.ok) ended after") for line in lines)
        assert any(f"job {job.id} (log.ok) ended" in x and x.endswith(": done") for x in lines)
    assert any(
        f"job {retried.id} (log.retry) ended" in line and "failed, retry in" in line
        for line in lines
    ), lines


async def test_nothing_below_warning_is_logged_per_job_at_info(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    @queue.task(name="log.quiet")
    async def quiet(n: int) -> None:
        pass

    await quiet.enqueue_many([{"n": i} for i in range(50)])
    with caplog.at_level(logging.INFO, logger="aiopgq"):
        await queue.worker().run(burst=True)
    per_job = [r for r in caplog.records if hasattr(r, "job_id")]
    assert per_job == []
    assert any("started on queues" in r.getMessage() for r in caplog.records)
