"""Lease fencing: a worker cut off from the database stops its handlers before their
leases run out, so the rescued copy of a job never runs beside the stale one."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiopgq import JobContext, JobStatus, LeaseLost, Queue

from ..support.helpers import eventually
from ..support.proxy import Proxy

HEARTBEAT, VISIBILITY = 0.5, 2.0  # the fence acts 0.5 s before a lease runs out


# The default run checks the fence twice; `pytest -m slow` repeats it.
@pytest.mark.parametrize("runs", [2, pytest.param(10, marks=pytest.mark.slow)])
async def test_a_partitioned_worker_stops_its_job_before_the_rescued_copy_starts(
    dsn: str, queue: Queue, runs: int
) -> None:
    events: list[tuple[str, int, float, bool]] = []  # (what, attempt, when, ctx.cancelled)

    async def handler(ctx: JobContext, n: int) -> int:
        events.append(("start", ctx.attempt, time.monotonic(), ctx.cancelled))
        if ctx.attempt > 1:
            return n
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append(("cancelled", ctx.attempt, time.monotonic(), ctx.cancelled))
            raise
        return n

    queue.task(name="f.long", max_attempts=10)(handler)
    gaps = []
    for n in range(runs):
        events.clear()
        async with Proxy(dsn) as proxy:
            cut_off = Queue(proxy.dsn, schema=queue.schema)
            cut_off.task(name="f.long", max_attempts=10)(handler)
            job = await queue.enqueue("f.long", {"n": n})
            stale = cut_off.worker(heartbeat_interval=HEARTBEAT, visibility_timeout=VISIBILITY)
            async with cut_off, stale:
                await eventually(lambda: events)
                await asyncio.sleep(HEARTBEAT * 1.5)  # a heartbeat renewed its lease
                proxy.partition()  # nothing passes: no heartbeat, no outcome, no error
                rescuer = queue.worker(
                    heartbeat_interval=HEARTBEAT,
                    visibility_timeout=VISIBILITY,
                    maintenance_interval=0.1,
                )
                async with rescuer:
                    final = await job.wait(timeout=30)
                proxy.heal()
                proxy.cut()  # its connections fail now: it notices and stops
        assert final.status is JobStatus.DONE and final.attempts == 2
        [(_, _, started, _), (_, _, cancelled, flagged), (_, second, rescued, _)] = events
        assert second == 2 and flagged, events
        assert started < cancelled < rescued, events  # the stale copy ended first
        gaps.append(rescued - cancelled)
    assert min(gaps) > 0
    print(
        f"\nstale handler stopped before the rescued copy started in {runs} of {runs} runs, by "
        f"{min(gaps):.2f} to {max(gaps):.2f} s"
    )


async def test_the_fenced_job_records_why(dsn: str, queue: Queue) -> None:
    """The stale run's outcome (a failed attempt: lease lost) is written if the worker gets
    through before any rescue."""

    @queue.task(name="f.sleepy", max_attempts=3)
    async def sleepy() -> None:
        await asyncio.sleep(3600)

    async with Proxy(dsn) as proxy:
        cut_off = Queue(proxy.dsn, schema=queue.schema)
        cut_off.tasks.update(queue.tasks)
        job = await queue.enqueue("f.sleepy", {})
        stale = cut_off.worker(heartbeat_interval=HEARTBEAT, visibility_timeout=VISIBILITY)
        async with cut_off, stale:

            async def running() -> bool:
                return (await queue.get_job(job.id)).status is JobStatus.RUNNING

            await eventually(running)
            proxy.partition()
            await eventually(lambda: stale.running_jobs == 0, within=VISIBILITY * 3)
            proxy.heal()  # before any rescue (no other worker runs maintenance)

            async def recorded() -> bool:
                return (await queue.get_job(job.id)).status is JobStatus.PENDING

            await eventually(recorded)
            stale.stop()
    row = await queue.get_job(job.id)
    assert row.attempts == 1 and row.last_error is not None
    assert LeaseLost.__name__ in row.last_error and "could not renew it" in row.last_error


async def test_a_job_whose_lease_is_gone_is_stopped_at_the_next_heartbeat(queue: Queue) -> None:
    """The heartbeat names every job it holds and learns which it renewed: a job the
    database no longer has running on this worker is stopped at once, not at the end of
    its visibility timeout."""
    stopped: list[float] = []

    @queue.task(name="f.taken")
    async def taken() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.append(time.monotonic())
            raise

    job = await taken.enqueue()
    async with queue.worker(heartbeat_interval=0.2, visibility_timeout=30):

        async def running() -> bool:
            return (await queue.get_job(job.id)).status is JobStatus.RUNNING

        await eventually(running)
        # Taken over by hand, as a rescue (or an operator) would.
        await queue.pool.execute(
            f'UPDATE "{queue.schema}".jobs SET attempts = attempts + 1, locked_by = $2 '
            "WHERE id = $1",
            job.id,
            "someone-else",
        )
        taken_at = time.monotonic()
        await eventually(lambda: stopped, within=10)
    assert stopped[0] - taken_at < 5  # a heartbeat or two, not the 30 s lease
    row = await queue.get_job(job.id)
    assert (row.status, row.locked_by, row.attempts) == (JobStatus.RUNNING, "someone-else", 2)


async def test_a_handler_that_committed_its_job_is_not_stopped(queue: Queue, ledger: str) -> None:
    finished: list[bool] = []

    @queue.task(name="f.after")
    async def after(ctx: JobContext) -> None:
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {ledger} (job_id) VALUES ($1)", ctx.job_id)
        await asyncio.sleep(1.0)  # several heartbeats find the job done, not running
        finished.append(True)

    job = await after.enqueue()
    async with queue.worker(heartbeat_interval=0.1, visibility_timeout=0.4):
        await eventually(lambda: finished, within=10)
    assert (await queue.get_job(job.id)).status is JobStatus.DONE


# A wrong fence shows ~70 % of the time per round: `pytest -m slow` runs four rounds.
@pytest.mark.parametrize("rounds", [1, pytest.param(4, marks=pytest.mark.slow)])
async def test_a_job_after_an_idle_spell_is_not_stopped(queue: Queue, rounds: int) -> None:
    """A worker that was idle for longer than a lease must not count a new job's lease
    from the last claim before the idle spell (the heartbeat, idle, forgets those claims)."""
    outcomes: list[str] = []

    @queue.task(name="f.idle")
    async def idle(seconds: float) -> None:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            outcomes.append("stopped")
            raise
        outcomes.append("done")

    async with queue.worker(heartbeat_interval=0.9, visibility_timeout=2):
        for _ in range(rounds):
            await (await idle.enqueue(0)).wait(timeout=10)  # a claim, its job ended at once
            await asyncio.sleep(2.5)  # idle for longer than a lease
            await (await idle.enqueue(1.5)).wait(timeout=10)
    assert "stopped" not in outcomes and outcomes.count("done") == 2 * rounds
