"""ctx.transaction(): the handler's rows and the job's done commit together, guarded by
the lease."""

from __future__ import annotations

import asyncio
import random
import signal
from subprocess import Popen

import asyncpg

from aiopgq import ConfigurationError, JobContext, JobStatus, LeaseLost, Queue

from ..support.cli import cli
from ..support.helpers import eventually
from .test_progress import FAST_RESCUE


async def test_rows_and_done_commit_together(queue: Queue, ledger: str) -> None:
    @queue.task(name="t.ok", max_attempts=1)
    async def ok(ctx: JobContext, fail: bool) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(
                f"INSERT INTO {ledger} (job_id, attempt, task) VALUES ($1, $2, 't.ok')",
                ctx.job_id,
                ctx.attempt,
            )
            ctx.set_result({"rows": 1})
            if fail:
                raise ValueError("rolled back with the row")

    good, bad = await ok.enqueue_many([{"fail": False}, {"fail": True}])
    await queue.worker().run(burst=True)
    assert (await queue.get_job(good.id)).result == {"rows": 1}
    failed = await queue.get_job(bad.id)
    assert failed.status is JobStatus.FAILED and "rolled back" in (failed.last_error or "")
    rows = await queue.pool.fetch(f"SELECT job_id FROM {ledger}")
    assert [r["job_id"] for r in rows] == [good.id]


async def test_a_stale_run_cannot_commit(queue: Queue, ledger: str) -> None:
    errors: list[BaseException] = []

    @queue.task(name="t.stale", max_attempts=5)
    async def stale(ctx: JobContext) -> None:
        if ctx.attempt > 1:
            return
        # Meanwhile the job was rescued (its lease expired, as after a long partition)
        # and claimed again elsewhere: this run's lease is gone.
        await queue.pool.execute(
            f'UPDATE "{queue.schema}".jobs SET attempts = attempts + 1, locked_by = $2 '
            "WHERE id = $1",
            ctx.job_id,
            "another-worker",
        )
        try:
            async with ctx.transaction() as conn:
                await conn.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
        except LeaseLost as exc:
            errors.append(exc)
            raise

    job = await stale.enqueue()
    await queue.worker().run(burst=True)
    [error] = errors
    assert f"job {job.id}: attempt 1 on worker" in str(error) and "rolled back" in str(error)
    assert await queue.pool.fetchval(f"SELECT count(*) FROM {ledger}") == 0
    row = await queue.get_job(job.id)
    assert (row.status, row.attempts, row.locked_by) == (JobStatus.RUNNING, 2, "another-worker")


async def test_one_transaction_per_run_and_not_in_hold_mode(queue: Queue) -> None:
    problems: list[str] = []

    @queue.task(name="t.twice")
    async def twice(ctx: JobContext) -> None:
        async with ctx.transaction():
            try:
                async with ctx.transaction():
                    pass
            except RuntimeError as exc:
                problems.append(str(exc))
        try:
            async with ctx.transaction():
                pass
        except (RuntimeError, ConfigurationError) as exc:
            problems.append(str(exc))

    job = await twice.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.DONE
    assert len(problems) == 2 and all("commits the job's done once" in p for p in problems)
    held = await twice.enqueue()
    await queue.worker(hold_transaction=True).run(burst=True)
    row = await queue.get_job(held.id)
    assert row.status is JobStatus.PENDING and "hold_transaction=True" in (row.last_error or "")


async def test_exactly_once_with_workers_killed_at_random(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    """Every job inserts one ledger row in ctx.transaction(); worker processes are
    SIGKILLed at random moments (inside transactions, between them, mid-commit) and
    replaced; at the end every job is done once and has exactly one row."""
    schema = f'"{queue.schema}"'
    await conn.execute(
        f"CREATE TABLE {schema}.transfers (job_id bigint, n int, attempt int, pid int)"
    )
    total = 600
    await queue.enqueue_many("app.transfer", [{"n": n} for n in range(total)], max_attempts=100)

    def start() -> Popen[str]:
        return cli(
            dsn,
            queue.schema,
            "worker",
            "tests.support.handlers_app:queue",
            "--concurrency",
            "8",
            *FAST_RESCUE,
        )

    workers = [start() for _ in range(3)]
    rng = random.Random(15)
    kills = 0
    try:
        await eventually(
            lambda: conn.fetchval(f"SELECT count(*) >= 30 FROM {schema}.transfers"), within=60
        )
        while kills < 8:
            await asyncio.sleep(rng.uniform(0.1, 0.5))
            done = await conn.fetchval(f"SELECT count(*) FROM {schema}.transfers")
            if done >= total - 50:
                break
            victim = rng.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait(10)
            kills += 1
            workers[victim] = start()

        async def all_done() -> bool:
            status = {r["status"]: r["jobs"] for r in await queue.status()}
            return status == {"done": total}

        await eventually(all_done, within=120)
    finally:
        for proc in workers:
            proc.kill()
            proc.wait(10)
    assert kills >= 3
    rows = await conn.fetch(f"SELECT job_id, count(*) AS n FROM {schema}.transfers GROUP BY 1")
    done_ids = {
        r["id"] for r in await conn.fetch(f"SELECT id FROM {schema}.jobs WHERE status = 'done'")
    }
    assert len(done_ids) == total
    assert {r["job_id"] for r in rows} == done_ids  # zero missing
    assert {r["n"] for r in rows} == {1}  # zero duplicates
    rerun = await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE attempts > 1")
    assert rerun > 0  # kills landed on running jobs, which ran again
    print(f"\n{kills} kills, {rerun} jobs ran more than once, each committed once")
