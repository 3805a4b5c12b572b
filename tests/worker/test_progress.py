"""Progress and checkpoints: saved with heartbeats and outcomes, given back on a retry."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import asyncpg
import pytest

from aiopgq import Abort, JobContext, JobStatus, Queue, Retry, Snooze

from ..support.cli import cli, run_cli
from ..support.helpers import eventually

# Worker flags: leases of 1 s, rescued within 0.2 s of expiring.
FAST_RESCUE = (
    "--heartbeat-interval",
    "0.2",
    "--visibility-timeout",
    "1",
    "--maintenance-interval",
    "0.2",
)


class CountingConnection(asyncpg.Connection):  # type: ignore[misc]
    """Counts the statements the worker sends (the database is real; nothing is faked)."""

    statements = 0

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        CountingConnection.statements += 1
        return await super().execute(*args, **kwargs)

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        CountingConnection.statements += 1
        return await super().fetch(*args, **kwargs)


async def test_progress_rides_on_the_heartbeat(dsn: str, queue: Queue) -> None:
    pool = await asyncpg.create_pool(
        dsn, connection_class=CountingConnection, min_size=1, max_size=4
    )
    counted = Queue(pool=pool, schema=queue.schema)
    release = asyncio.Event()

    @counted.task(name="p.reporting")
    async def reporting(ctx: JobContext) -> None:
        before = CountingConnection.statements
        for i in range(1, 1001):
            await ctx.progress(i / 1000, state={"done": i})
        assert CountingConnection.statements == before  # a thousand reports, no statement
        await release.wait()

    job = await reporting.enqueue()
    try:
        async with counted.worker(heartbeat_interval=0.2, visibility_timeout=2):

            async def saved() -> bool:
                row = await queue.get_job(job.id)
                return row.progress == 1.0 and row.checkpoint == {"done": 1000}

            await eventually(saved)  # the next heartbeat wrote the last report
            running = await queue.get_job(job.id)
            assert running.status is JobStatus.RUNNING
            status = {(r["queue"], r["status"]): r for r in await queue.status()}
            assert status[("default", "running")]["progress"] == 1.0
            shown = await asyncio.to_thread(
                run_cli, dsn, queue.schema, "--schema", queue.schema, "status"
            )
            assert shown.returncode == 0, shown.stderr
            assert "progress" in shown.stdout.splitlines()[0]
            [line] = [s for s in shown.stdout.splitlines() if " running " in s]
            assert line.split()[-1] == "100%", shown.stdout
            release.set()
    finally:
        await pool.close()


async def test_progress_is_written_with_every_outcome(queue: Queue) -> None:
    @queue.task(name="p.outcomes", max_attempts=2, retry=Retry(base=3600))
    async def outcomes(ctx: JobContext, how: str) -> str:
        await ctx.progress(0.5, state={"how": how, "attempt": ctx.attempt})
        if how == "retry":
            raise RuntimeError("try again")
        if how == "snooze":
            raise Snooze(3600)
        if how == "fail":
            raise Abort("given up")
        return how

    done, retry, snooze, fail = await outcomes.enqueue_many(
        [{"how": "done"}, {"how": "retry"}, {"how": "snooze"}, {"how": "fail"}]
    )
    # No heartbeat during these short runs: only the outcome can have saved the progress.
    await queue.worker(heartbeat_interval=600, visibility_timeout=1200).run(burst=True)
    outcomes_seen = ((done, "done"), (retry, "pending"), (snooze, "pending"), (fail, "failed"))
    for job, status in outcomes_seen:
        row = await queue.get_job(job.id)
        assert row.status == status
        assert row.progress == 0.5, row
        assert row.checkpoint == {"how": job.payload["how"], "attempt": 1}
    assert (await queue.get_job(done.id)).result == "done"


async def test_a_retry_gets_the_last_saved_state_as_checkpoint(queue: Queue) -> None:
    seen: list[Any] = []

    @queue.task(name="p.resume", max_attempts=3, retry=Retry(base=0.01, jitter=0))
    async def resume(ctx: JobContext) -> int:
        seen.append(ctx.checkpoint)
        start = ctx.checkpoint["page"] if ctx.checkpoint else 0
        for page in range(start, 10):
            await ctx.progress(page / 10, state={"page": page})
            if page == 4 and ctx.attempt == 1:
                raise ConnectionError("upstream hung up")
        return start

    job = await resume.enqueue()
    async with queue.worker(heartbeat_interval=600, visibility_timeout=1200):
        final = await job.wait(timeout=30)
    assert final.status is JobStatus.DONE and final.result == 4
    assert seen == [None, {"page": 4}]
    assert final.checkpoint == {"page": 9} and final.progress == 0.9


async def test_bad_progress_is_refused_where_it_is_reported(queue: Queue) -> None:
    errors: list[str] = []

    @queue.task(name="p.bad")
    async def bad(ctx: JobContext) -> None:
        for fraction, state in ((1.5, None), (float("nan"), None), (0.1, {"x": object()})):
            try:
                await ctx.progress(fraction, state=state)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))
        with pytest.raises(ValueError, match="over 100000"):
            await ctx.progress(0.2, state={"blob": "x" * 200_000})

    job = await bad.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.DONE
    assert errors[0].startswith("progress: fraction must be from 0 to 1, got 1.5")
    assert "nan" in errors[1] and "cannot be stored as JSON" in errors[2]


async def test_a_job_killed_at_step_57_resumes_at_step_57(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    await conn.execute(
        f'CREATE TABLE "{queue.schema}".steps (job_id bigint, attempt int, step int)'
    )
    job = await queue.enqueue("app.steps", {"total": 100, "stall_at": 57}, max_attempts=3)
    proc = cli(dsn, queue.schema, "worker", "tests.support.handlers_app:queue", *FAST_RESCUE)
    try:

        async def stalled_at_57() -> bool:
            row = await queue.get_job(job.id)
            return row.checkpoint == {"step": 57}

        await eventually(stalled_at_57, within=60)  # saved by the worker's heartbeat
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert (await queue.get_job(job.id)).progress == 0.57
    # Another worker process rescues the job once its lease expires, and resumes it.
    rescuer = cli(dsn, queue.schema, "worker", "tests.support.handlers_app:queue", *FAST_RESCUE)
    try:
        final = await job.wait(timeout=60)
        rescuer.send_signal(signal.SIGTERM)
        assert rescuer.wait(20) == 0
    finally:
        rescuer.kill()
    assert final.status is JobStatus.DONE and final.result == 100 and final.attempts == 2
    rows = await conn.fetch(
        f'SELECT attempt, step FROM "{queue.schema}".steps WHERE job_id = $1 '
        "ORDER BY attempt, step",
        job.id,
    )
    first = [r["step"] for r in rows if r["attempt"] == 1]
    second = [r["step"] for r in rows if r["attempt"] == 2]
    assert first == list(range(58))  # steps 0 to 57, stalled in 57
    assert second == list(range(57, 100))  # resumed at 57, not at 0
