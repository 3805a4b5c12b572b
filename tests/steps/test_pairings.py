"""Durable steps with the features that change a job's state: cancel, retry, unique keys,
limits, dependencies, retention and the archive."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from aiopgq import JobContext, JobStatus, Queue, Retry

from ..support.helpers import eventually

NOW = Retry(base=0, jitter=0)


async def _steps(conn: asyncpg.Connection, schema: str, job_id: int) -> list[str]:
    rows = await conn.fetch(
        f'SELECT name FROM "{schema}".job_steps WHERE job_id = $1 ORDER BY "position"', job_id
    )
    return [r["name"] for r in rows]


async def test_cancel_a_sleeping_and_a_waiting_job(queue: Queue) -> None:
    ran: list[str] = []

    @queue.task(name="p.sleeps")
    async def sleeps(ctx: JobContext) -> None:
        await ctx.sleep(0.3)
        ran.append("woke")

    @queue.task(name="p.waits")
    async def waits(ctx: JobContext) -> None:
        await ctx.wait_event("p.never")
        ran.append("emitted")

    sleeper, waiter = await sleeps.enqueue(), await waits.enqueue()
    await queue.worker().run(burst=True)
    assert await queue.cancel(sleeper.id) and await queue.cancel(waiter.id)
    await queue.emit_event("p.never")  # the cancelled waiter stays cancelled
    await eventually(lambda: True)
    await queue.worker().run(burst=True)
    for job in (sleeper, waiter):
        assert (await queue.get_job(job.id)).status is JobStatus.CANCELLED
    assert ran == []


async def test_a_manual_retry_of_a_failed_job_replays_its_steps(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    """Retry keeps the steps: the failed job charged the card in step 1; the operator
    fixes what failed in step 2 and retries: the card is not charged again."""
    charges: list[int] = []
    broken = [True]

    @queue.task(name="p.order", max_attempts=2, retry=NOW)
    async def order(ctx: JobContext) -> str:
        await ctx.step("charge", lambda: charges.append(1) or "ch_1")
        if broken[0]:
            raise RuntimeError("ship: the warehouse API is down")
        return str(await ctx.step("ship", lambda: "shipped"))

    job = await order.enqueue()
    await queue.worker().run(burst=True)
    assert (await queue.get_job(job.id)).status is JobStatus.FAILED
    broken[0] = False
    assert await queue.retry(job.id)
    await queue.worker().run(burst=True)
    done = await queue.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == "shipped"
    assert charges == [1]
    assert await _steps(conn, queue.schema, job.id) == ["charge", "ship"]


async def test_a_sleeping_job_keeps_its_unique_key(queue: Queue) -> None:
    @queue.task(name="p.unique")
    async def unique(ctx: JobContext) -> None:
        await ctx.sleep(3600)

    first = await unique.enqueue(idempotency_key="k")
    await queue.worker().run(burst=True)
    again = await unique.enqueue(idempotency_key="k")
    assert again.id == first.id  # the sleeping job still holds the key


async def test_a_sleeping_job_frees_its_key_limit(queue: Queue) -> None:
    """key_concurrency=1: a job of the key that sleeps lets the next job of the key run."""
    ran: list[str] = []

    @queue.task(name="p.keyed", key_concurrency=1)
    async def keyed(ctx: JobContext, n: str) -> None:
        ran.append(n)
        if n == "a":
            await ctx.sleep(3600)

    await keyed.enqueue(n="a", concurrency_key="tenant-1", priority=5)
    await keyed.enqueue(n="b", concurrency_key="tenant-1")
    await queue.worker().run(burst=True)
    assert ran == ["a", "b"]


async def test_a_child_waits_for_a_parent_that_sleeps_or_waits(queue: Queue) -> None:
    @queue.task(name="p.parent")
    async def parent(ctx: JobContext) -> str:
        return str(await ctx.wait_event("p.go"))

    @queue.task(name="p.child")
    async def child(ctx: JobContext) -> object:
        return await ctx.parent_results()

    up = await parent.enqueue()
    down = await child.enqueue(depends_on=up)
    await queue.worker().run(burst=True)
    # The parent is waiting for its event, not finished: the child is still waiting.
    assert (await queue.get_job(up.id)).status is JobStatus.WAITING
    assert (await queue.get_job(down.id)).status is JobStatus.WAITING
    await queue.emit_event("p.go", "went")
    await queue.worker().run(burst=True)
    assert (await queue.get_job(down.id)).result == {str(up.id): "went"}


async def test_a_waiting_child_of_a_retried_parent_keeps_waiting_for_its_event(
    queue: Queue,
) -> None:
    """on_parent_failure="run": the child runs after its parent failed and waits for an
    event; the parent is retried and finishes. Its end settles the child's edge: the
    child may wake early, but it waits again for its event (a wake-up is a hint)."""

    runs: list[int] = []

    @queue.task(name="p.bad", max_attempts=1)
    async def bad() -> str:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("first run fails")
        return "ok"

    @queue.task(name="p.listener")
    async def listener(ctx: JobContext) -> object:
        return await ctx.wait_event("p.signal")

    up = await bad.enqueue()
    down = await listener.enqueue(depends_on=up, on_parent_failure="run")
    await queue.worker().run(burst=True)
    assert (await queue.get_job(up.id)).status is JobStatus.FAILED
    assert (await queue.get_job(down.id)).status is JobStatus.WAITING
    assert await queue.retry(up.id)
    await queue.worker().run(burst=True)
    assert (await queue.get_job(up.id)).status is JobStatus.DONE
    assert (await queue.get_job(down.id)).status is JobStatus.WAITING
    await queue.emit_event("p.signal", 1)
    await queue.worker().run(burst=True)
    assert (await queue.get_job(down.id)).result == 1


async def test_pruning_deletes_steps_and_waits(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="p.pruned")
    async def pruned(ctx: JobContext) -> None:
        await ctx.step("a", lambda: 1)

    @queue.task(name="p.waiter")
    async def waiter(ctx: JobContext) -> None:
        await ctx.wait_event("p.nobody")

    done, waiting = await pruned.enqueue(), await waiter.enqueue()
    await queue.worker().run(burst=True)
    assert await queue.cancel(waiting.id)
    await conn.execute(f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '1 day'")
    assert await _steps(conn, queue.schema, done.id) == ["a"]
    async with queue.worker(
        queues=["nothing"],
        maintenance_interval=0.05,
        retention=timedelta(seconds=1),
        cancelled_retention=timedelta(seconds=1),
    ):

        async def gone() -> bool:
            return await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0

        await eventually(gone, within=20)
    for table in ("job_steps", "job_waits"):
        assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".{table}') == 0


async def test_archiving_deletes_steps(queue: Queue, conn: asyncpg.Connection) -> None:
    @queue.task(name="p.archived")
    async def archived(ctx: JobContext) -> int:
        return int(await ctx.step("a", lambda: 1))

    job = await archived.enqueue()
    await queue.worker().run(burst=True)
    await conn.execute(
        f"UPDATE \"{queue.schema}\".jobs SET finished_at = now() - interval '1 hour'"
    )
    await queue.enable_partitioning(archive_after=60, partition_width=3600)

    async def moved() -> bool:
        return await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs') == 0

    async with queue.worker(queues=["nothing"], maintenance_interval=0.05):
        await eventually(moved, within=20)
    assert (await queue.get_job(job.id)).result == 1  # read from the archive
    assert await _steps(conn, queue.schema, job.id) == []


async def test_a_job_waiting_for_an_event_keeps_its_unique_key(queue: Queue) -> None:
    """A keyed waiter waits pending (run_at infinity), not 'waiting': the key's holder
    must be pending or running, for plain keys and for unique_for windows alike."""

    @queue.task(name="p.keyed_wait")
    async def keyed(ctx: JobContext) -> object:
        return await ctx.wait_event("p.keyed")

    plain = await keyed.enqueue(idempotency_key="k")
    windowed = await keyed.enqueue(idempotency_key="w", unique_for=timedelta(hours=1))
    await queue.worker().run(burst=True)
    assert (await queue.get_job(plain.id)).status is JobStatus.PENDING
    assert (await keyed.enqueue(idempotency_key="k")).id == plain.id
    again = await keyed.enqueue(idempotency_key="w", unique_for=timedelta(hours=1))
    assert again.id == windowed.id
    assert await queue.emit_event("p.keyed", "go") == 2
    await queue.worker().run(burst=True)
    assert (await queue.get_job(plain.id)).result == "go"
