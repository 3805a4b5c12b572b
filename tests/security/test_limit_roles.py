"""Least privilege with limits: producers set keys, workers keep the token bucket."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import Queue

from ..support.legacy_schema import install_up_to


@pytest.fixture
async def role_names(conn: asyncpg.Connection) -> AsyncIterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    producer, worker = f"aiopgq_producer_{suffix}", f"aiopgq_worker_{suffix}"
    for role in (producer, worker):
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    yield producer, worker
    for role in (producer, worker):
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


async def use_limits_as(dsn: str, schema: str, admin: Queue, producer: str, worker: str) -> None:
    """Keyed enqueues as the producer; limited queues drained by the worker role."""
    await admin.configure("rated", rate=1000.0)
    await admin.configure("keyed", key_concurrency=1, concurrency=5)
    as_producer = Queue(dsn, schema=schema, connect_kwargs={"user": producer})
    async with as_producer:
        await as_producer.enqueue("job", {}, queue="rated")
        await as_producer.enqueue("job", {}, queue="keyed", concurrency_key="tenant:1")
        await as_producer.enqueue_many("job", [{}, {}], queue="keyed", concurrency_key="t2")
    as_worker = Queue(dsn, schema=schema, connect_kwargs={"user": worker})
    ran: list[str] = []

    @as_worker.task(name="job")
    async def job() -> None:
        ran.append("job")

    await as_worker.worker(queues=["rated", "keyed"], poll_interval=0.1).run(burst=True)
    assert len(ran) == 4
    async with admin.pool.acquire() as conn:
        settings = await conn.fetchrow(
            f'SELECT q.tokens, q.key_cursor FROM "{schema}".queues q WHERE q.queue = $1', "rated"
        )
        assert settings["tokens"] is not None  # the worker role wrote its bucket
        cursor = await conn.fetchval(
            f"SELECT key_cursor FROM \"{schema}\".queues WHERE queue = 'keyed'"
        )
        assert cursor in ("tenant:1", "t2")


async def test_roles_granted_now_can_use_limits(
    dsn: str, queue: Queue, conn: asyncpg.Connection, role_names: tuple[str, str]
) -> None:
    producer, worker = role_names
    await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', producer)
    await conn.execute(f'SELECT "{queue.schema}".grant_worker($1)', worker)
    await use_limits_as(dsn, queue.schema, queue, producer, worker)
    # Still least privilege: the worker cannot change a queue's limits.
    as_worker = await asyncpg.connect(dsn, user=worker)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await as_worker.execute(
                f'UPDATE "{queue.schema}".queues SET concurrency = 100 WHERE queue = $1', "keyed"
            )
    finally:
        await as_worker.close()


async def test_roles_granted_before_the_upgrade_get_what_limits_need(
    dsn: str, schema: str, conn: asyncpg.Connection, role_names: tuple[str, str]
) -> None:
    producer, worker = role_names
    quoted = f'"{schema}"'
    await install_up_to(conn, schema, 15)
    await conn.execute(f"SELECT {quoted}.grant_producer($1)", producer)
    await conn.execute(f"SELECT {quoted}.grant_worker($1)", worker)
    admin = Queue(dsn, schema=schema)
    await install_up_to(conn, schema, 19, after=15)
    assert 21 in await admin.migrate()
    async with admin:
        await use_limits_as(dsn, schema, admin, producer, worker)
