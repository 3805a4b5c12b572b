"""ctx.sleep, ctx.sleep_until, ctx.wait_event and Queue.emit_event: the job leaves its
worker while it waits and runs again from the top, its steps replayed."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import asyncpg

from aiopgq import JobContext, JobStatus, Queue, SyncQueue

from ..support.helpers import eventually


async def test_sleep_frees_the_job_and_resumes_with_its_steps(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    calls: list[str] = []

    @queue.task(name="sl.remind", max_attempts=1)  # a counted sleep would fail it
    async def remind(ctx: JobContext, user: str) -> str:
        calls.append("top")
        await ctx.step("welcome", lambda: calls.append("welcome"))
        await ctx.sleep(timedelta(seconds=1))
        return str(await ctx.step("remind", lambda: calls.append("remind") or "sent"))

    job = await remind.enqueue(user="ann")
    await queue.worker().run(burst=True)  # returns: the job sleeps, no slot held
    asleep = await queue.get_job(job.id)
    assert asleep.status is JobStatus.PENDING and asleep.attempts == 0
    assert asleep.locked_by is None and asleep.heartbeat_at is None
    assert calls == ["top", "welcome"]
    await asyncio.sleep(1.2)
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == "sent" and done.attempts == 1
    assert calls == ["top", "welcome", "top", "remind"]  # welcome replayed, not called
    kinds = await conn.fetch(
        f'SELECT name, kind FROM "{queue.schema}".job_steps WHERE job_id = $1 ORDER BY "position"',
        job.id,
    )
    assert [tuple(r) for r in kinds] == [
        ("welcome", "step"),
        ("sleep:1", "sleep"),
        ("remind", "step"),
    ]


async def test_sleep_until_a_time_past_returns_on_the_next_run(queue: Queue) -> None:
    runs: list[int] = []

    @queue.task(name="sl.until")
    async def until(ctx: JobContext) -> None:
        runs.append(len(runs))
        await ctx.sleep_until(datetime.now(timezone.utc) - timedelta(seconds=1))

    job = await until.enqueue()
    await queue.worker().run(burst=True)  # sleeps (run_at in the past), then runs again
    assert (await queue.get_job(job.id)).status is JobStatus.DONE
    assert runs == [0, 1]


async def test_a_sleeping_job_holds_no_slot(queue: Queue) -> None:
    """concurrency=1: the sleeper leaves its slot and another job runs meanwhile."""
    order: list[str] = []

    @queue.task(name="sl.long")
    async def long(ctx: JobContext) -> None:
        order.append("sleeper")
        await ctx.sleep(3600)

    @queue.task(name="sl.other")
    async def other() -> None:
        order.append("other")

    sleeper = await long.enqueue(priority=10)
    await other.enqueue()
    await queue.worker(concurrency=1).run(burst=True)
    assert order == ["sleeper", "other"]
    asleep = await queue.get_job(sleeper.id)
    # An hour ahead: waiting (off the claim's index) with a timer, at its wake time.
    assert asleep.status is JobStatus.WAITING
    assert asleep.run_at > datetime.now(timezone.utc) + timedelta(minutes=59)


async def test_an_event_emitted_while_the_job_waits_wakes_it(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    calls: list[str] = []

    @queue.task(name="ev.order", max_attempts=1)
    async def order(ctx: JobContext, order_id: int) -> dict[str, int]:
        await ctx.step("reserve", lambda: calls.append("reserve"))
        payment = await ctx.wait_event(f"payment:{order_id}")
        calls.append(f"paid {payment['amount']}")
        return dict(payment)

    job = await order.enqueue(order_id=7)
    await queue.worker().run(burst=True)
    waiting = await queue.get_job(job.id)
    assert waiting.status is JobStatus.WAITING and waiting.locked_by is None
    assert await queue.emit_event("payment:7", {"amount": 12}) == 1
    assert (await queue.get_job(job.id)).status is JobStatus.PENDING
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == {"amount": 12}
    assert calls == ["reserve", "paid 12"]
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".job_waits') == 0


async def test_an_event_emitted_before_the_wait_is_kept(queue: Queue) -> None:
    @queue.task(name="ev.late")
    async def late(ctx: JobContext) -> object:
        return await ctx.wait_event("ready")

    assert await queue.emit_event("ready", [1, 2]) == 0
    job = await late.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).result == [1, 2]


async def test_a_worker_that_runs_wakes_on_the_emit(queue: Queue) -> None:
    """No poller: the emit's transaction makes the job pending and notifies the queue."""

    @queue.task(name="ev.live")
    async def live(ctx: JobContext) -> object:
        return await ctx.wait_event("go")

    job = await live.enqueue()
    worker = queue.worker(poll_interval=3600)  # only a NOTIFY can wake it in time
    async with asyncio.TaskGroup() as group:
        running = group.create_task(worker.run())
        await eventually(lambda: queue.get_job(job.id), within=20)
        await eventually(lambda: _status_is(queue, job.id, JobStatus.WAITING), within=20)
        await queue.emit_event("go", "now")
        await eventually(lambda: _status_is(queue, job.id, JobStatus.DONE), within=20)
        worker.stop()
        await running
    assert (await queue.get_job(job.id)).result == "now"


async def _status_is(queue: Queue, job_id: int, status: JobStatus) -> bool:
    return (await queue.get_job(job_id)).status is status


async def test_a_wait_that_times_out_raises_at_the_resume(queue: Queue) -> None:
    seen: list[str] = []

    @queue.task(name="ev.timeout", max_attempts=1)
    async def timeout(ctx: JobContext) -> str:
        try:
            await ctx.wait_event("never", timeout=0.5)
        except TimeoutError as exc:
            seen.append(str(exc))
            return "gave up"
        return "emitted"

    job = await timeout.enqueue()
    await queue.worker().run(burst=True)
    waiting = await queue.get_job(job.id)
    assert waiting.status is JobStatus.PENDING  # at its deadline
    await asyncio.sleep(0.7)
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.result == "gave up" and "not emitted within" in seen[0]


async def test_sync_queue_and_sql_emit(queue: Queue, dsn: str) -> None:
    @queue.task(name="ev.sync")
    async def waits(ctx: JobContext, name: str) -> object:
        return await ctx.wait_event(name)

    a = await waits.enqueue(name="a")
    b = await waits.enqueue(name="b")
    await queue.worker().run(burst=True)
    with SyncQueue(dsn, schema=queue.schema) as sync:
        assert await asyncio.to_thread(sync.emit_event, "a", {"via": "sync"}) == 1
    await queue.pool.execute(f"""SELECT "{queue.schema}".emit_event('b', '"via sql"')""")
    await queue.worker().run(burst=True)
    assert (await queue.get_job(a.id)).result == {"via": "sync"}
    assert (await queue.get_job(b.id)).result == "via sql"
