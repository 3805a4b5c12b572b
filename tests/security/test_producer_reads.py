"""A producer reads its own jobs' statuses (job_status) and no other role's keys or
statuses."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import Queue


@pytest.fixture
async def producers(queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    roles = (f"aiopgq_producer_a_{suffix}", f"aiopgq_producer_b_{suffix}")
    for role in roles:
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
        await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', role)
    yield roles
    for role in roles:
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


async def test_a_producer_reads_only_its_own_jobs_keys_and_statuses(
    dsn: str, queue: Queue, producers: tuple[str, str]
) -> None:
    a, b = producers
    as_b = Queue(dsn, schema=queue.schema, connect_kwargs={"user": b})
    async with as_b:
        secret = await as_b.enqueue("t", {}, idempotency_key="customer-42-refund")
        plain = await as_b.enqueue("t", {}, concurrency_key="c")
        await as_b.enqueue_many("t", [{}, {}])
        await as_b.copy_many("t", [{}, {}])
        async with as_b.pool.acquire() as conn:
            mine = await conn.fetchrow(f'SELECT * FROM "{queue.schema}".job_status($1)', secret.id)
    assert mine["status"] == "pending"

    conn = await asyncpg.connect(dsn, user=a)
    try:
        for column in ("idempotency_key", "status"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch(f'SELECT {column} FROM "{queue.schema}".jobs')
        assert not await conn.fetch(f'SELECT * FROM "{queue.schema}".job_status($1)', plain.id)
        # The same key from another role: refused, without the holder's row.
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="another role"):
            await conn.fetchval(
                f"SELECT \"{queue.schema}\".enqueue('t', '{{}}', "
                "idempotency_key => 'customer-42-refund')"
            )
        # Its own enqueue paths still work, and it reads its own job back.
        own = await conn.fetchval(
            f"SELECT \"{queue.schema}\".enqueue('t', '{{}}', idempotency_key => 'a-1')"
        )
        again = await conn.fetchval(
            f"SELECT \"{queue.schema}\".enqueue('t', '{{}}', idempotency_key => 'a-1')"
        )
        assert own == again
        assert (await conn.fetchrow(f'SELECT * FROM "{queue.schema}".job_status($1)', own))[
            "status"
        ] == "pending"
    finally:
        await conn.close()
