"""Far wake times (migrations/0028_job_timers.sql): a job that sleeps, or waits with a
timeout, more than a minute ahead waits in status 'waiting' with a timer, off the claim's
index; the maintenance leader makes it pending ahead of its time, at its exact run_at."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import asyncpg

from aiopgq import JobContext, JobStatus, Queue
from aiopgq._worker.maintenance import TIMER_AHEAD

from ..support.helpers import eventually


async def _timer(conn: asyncpg.Connection, queue: Queue, job_id: int) -> object:
    return await conn.fetchval(
        f'SELECT due_at FROM "{queue.schema}".job_timers WHERE job_id = $1', job_id
    )


async def test_a_far_sleep_waits_with_a_timer_and_is_made_pending_ahead_of_time(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    @queue.task(name="tm.far")
    async def far(ctx: JobContext) -> None:
        await ctx.sleep(timedelta(minutes=30))

    @queue.task(name="tm.near")
    async def near(ctx: JobContext) -> None:
        await ctx.sleep(30)

    slept, soon = await far.enqueue(), await near.enqueue()
    await queue.worker().run(burst=True)
    asleep = await queue.get_job(slept.id)
    assert asleep.status is JobStatus.WAITING and asleep.attempts == 0
    assert await _timer(conn, queue, slept.id) == asleep.run_at
    assert (await queue.job_steps(slept.id)).sleeping_until == asleep.run_at
    # Within a minute: pending at its wake time, as a retry waits; no timer.
    assert (await queue.get_job(soon.id)).status is JobStatus.PENDING
    assert await _timer(conn, queue, soon.id) is None

    # A leader that passes every 20 minutes looks 40 ahead: its first pass makes the
    # sleeper pending, at the same run_at (the claim then takes it at that time).
    async with queue.worker(maintenance_interval=1200, poll_interval=0.1):

        async def promoted() -> bool:
            return (await queue.get_job(slept.id)).status is JobStatus.PENDING

        await eventually(promoted, within=20)
    woke = await queue.get_job(slept.id)
    assert woke.run_at == asleep.run_at and woke.attempts == 0
    assert await _timer(conn, queue, slept.id) is None


async def test_a_far_timeout_waits_with_a_timer_that_the_emit_removes(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    got: list[object] = []

    @queue.task(name="tm.pay")
    async def pay(ctx: JobContext) -> None:
        got.append(await ctx.wait_event("tm.paid", timeout=3600))

    job = await pay.enqueue()
    await queue.worker().run(burst=True)
    waiting = await queue.get_job(job.id)
    assert waiting.status is JobStatus.WAITING
    assert await _timer(conn, queue, job.id) == waiting.run_at  # the deadline
    assert await queue.emit_event("tm.paid", {"ok": 1}) == 1
    assert await _timer(conn, queue, job.id) is None
    await queue.worker().run(burst=True)
    assert got == [{"ok": 1}]
    assert (await queue.get_job(job.id)).status is JobStatus.DONE


async def test_a_cancelled_sleeper_stays_cancelled_and_its_timer_goes_once_past(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    ran: list[str] = []

    @queue.task(name="tm.cancelled")
    async def sleeper(ctx: JobContext) -> None:
        await ctx.sleep(timedelta(hours=2))
        ran.append("woke")

    job = await sleeper.enqueue()
    await queue.worker().run(burst=True)
    assert await queue.cancel(job.id)
    # Its wake time long past (the clock moved on): the leader's pass deletes the timer
    # and leaves the job as it is.
    await conn.execute(
        f"UPDATE \"{queue.schema}\".job_timers SET due_at = now() - interval '1 hour' "
        "WHERE job_id = $1",
        job.id,
    )
    async with queue.worker(maintenance_interval=0.1, poll_interval=0.1):

        async def timer_gone() -> bool:
            return await _timer(conn, queue, job.id) is None

        await eventually(timer_gone, within=20)
    assert (await queue.get_job(job.id)).status is JobStatus.CANCELLED
    assert ran == []


def test_the_far_threshold_is_the_same_number_everywhere() -> None:
    """A suspension waits with a timer past TIMER_AHEAD seconds (sleep_job.sql, wait_event()
    in steps.sql); the leader looks at least that far ahead. Three places, one number: a
    suspension nearer than the leader looks would never be made pending."""
    root = Path(__file__).resolve().parents[2] / "sql"
    for path in (root / "complete" / "sleep_job.sql", root / "functions" / "steps.sql"):
        found = {
            float(s) for s in re.findall(r"now\(\) \+ interval '(\d+) seconds'", path.read_text())
        }
        assert found == {TIMER_AHEAD}, f"{path.name}: {found} vs TIMER_AHEAD {TIMER_AHEAD}"
