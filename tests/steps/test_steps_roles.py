"""Durable steps with least privilege: a worker role (grant_worker) runs steps, sleeps and
waits; a producer role (grant_producer) emits events but reads none of them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import JobContext, Queue


@pytest.fixture
async def roles(queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    producer, worker = f"aiopgq_producer_{suffix}", f"aiopgq_worker_{suffix}"
    for role in (producer, worker):
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', producer)
    await conn.execute(f'SELECT "{queue.schema}".grant_worker($1)', worker)
    yield producer, worker
    for role in (producer, worker):
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


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
