"""Durable steps with least privilege: a worker role (grant_worker) runs steps, sleeps and
waits; a producer role (grant_producer) emits events but reads none of them."""

from __future__ import annotations

import asyncpg
import pytest

from aiopgq import JobContext, Queue


async def test_steps_and_events_with_least_privilege(
    dsn: str, queue: Queue, roles: tuple[str, str]
) -> None:
    producer_role, worker_role = roles
    producer = Queue(dsn, schema=queue.schema, connect_kwargs={"user": producer_role})
    worker_queue = Queue(dsn, schema=queue.schema, connect_kwargs={"user": worker_role})

    @worker_queue.task(name="roles.flow")
    async def flow(ctx: JobContext) -> object:
        await ctx.step("one", lambda: 1)
        await ctx.sleep(0)
        return await ctx.wait_event("roles.go")

    async with producer:
        job = await producer.enqueue("roles.flow", {})
    await worker_queue.worker().run(burst=True)
    async with producer:
        assert await producer.emit_event("roles.go", {"ok": True}) == 1
        async with producer.pool.acquire() as pconn:
            for table in ("events", "job_steps", "job_waits"):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await pconn.fetch(f'SELECT * FROM "{queue.schema}".{table}')
    await worker_queue.worker().run(burst=True)
    async with worker_queue:
        assert (await worker_queue.get_job(job.id)).result == {"ok": True}
        assert [s.name for s in (await worker_queue.job_steps(job.id)).steps] == [
            "one",
            "sleep:1",
            "event:roles.go",
        ]
