"""A starting worker makes its own connections (LISTEN, and the fetcher's) at the same
time, while its start-up statements run: its first claim waits for the slowest of them,
not for their sum; and the statements it waits for do not wait for a WAL flush."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg
import pytest

from aiopgq import Queue, SchemaError

from ..support.proxy import Proxy

DELAY = 1.0  # each new connection through the proxy reaches the server this late


async def test_a_starting_worker_connects_once_not_one_connection_after_the_other(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    ran = asyncio.Event()

    @queue.task(name="startup.first")
    async def first() -> None:
        ran.set()

    await first.enqueue()
    async with Proxy(dsn) as proxy:
        far = Queue(proxy.dsn, schema=queue.schema, min_pool_size=2)
        far.tasks.update(queue.tasks)
        async with far:  # the pool's connections are made here, before the delay
            proxy.slow_accept(DELAY)
            worker = far.worker(poll_interval=30)
            started = time.monotonic()
            async with worker:
                await asyncio.wait_for(ran.wait(), 10 * DELAY)
                took = time.monotonic() - started
                fetchers = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    f"aiopgq-fetcher {worker.id}"[:63],
                )
    # One after the other, the LISTEN connection and then the fetcher's took 2 x DELAY.
    assert DELAY <= took < 1.6 * DELAY, f"the first job started {took:.2f} s after the start"
    assert fetchers == 1  # the fetcher's first claim used the connection made ahead


async def test_the_start_up_upserts_commit_without_waiting_for_the_wal_flush(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    """The first claim waits for the task registration and the registry row; they turn
    synchronous_commit off for their own transaction only."""
    sql = queue.sql
    tasks = '[{"name": "s.t", "queue": "default", "priority": 0, "max_attempts": 5, ' + (
        '"arguments": [], "required": [], "any_keyword": true}]'
    )
    row = ("w:1", "host", 1, ["default"], 4, "0", 5.0)
    session = await conn.fetchval("SHOW synchronous_commit")
    for statement, args in ((sql.register_tasks, (tasks, "w:1")), (sql.worker_register, row)):
        async with conn.transaction():
            await conn.execute(statement, *args)
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == session
    assert await conn.fetchval(f"SELECT registered_by FROM {queue.schema}.tasks") == "w:1"
    assert await conn.fetchval(f"SELECT count(*) FROM {queue.schema}.workers") == 1


async def test_a_start_records_the_worker_and_its_tasks_in_one_transaction(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    """The schema check, the tasks record, the registry row and the read of the paused
    queues are one statement (sql/workers/worker_start.sql), not four transactions."""
    ran = asyncio.Event()

    @queue.task(name="startup.one")
    async def one() -> None:
        ran.set()

    await one.enqueue()
    async with queue.worker(poll_interval=30, heartbeat_interval=60, visibility_timeout=180):
        await asyncio.wait_for(ran.wait(), 10)
        tasks_xmin = await conn.fetchval(f"SELECT xmin::text FROM {queue.schema}.tasks")
        worker_xmin = await conn.fetchval(f"SELECT xmin::text FROM {queue.schema}.workers")
    assert tasks_xmin == worker_xmin


async def test_a_worker_role_without_the_tasks_table_still_starts_and_says_so(
    queue: Queue,
    conn: asyncpg.Connection,
    roles: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When the start statement fails (here: no INSERT on the tasks table), each step
    runs alone: the warning names the fix, the registry row is still written, the job
    runs."""
    _, role = roles
    await conn.execute(f'REVOKE INSERT, UPDATE ON {queue.schema}.tasks FROM "{role}"')
    seen: list[int] = []

    @queue.task(name="startup.revoked")
    async def revoked() -> None:
        seen.append(await conn.fetchval(f"SELECT count(*) FROM {queue.schema}.workers"))

    await revoked.enqueue()
    worker_queue = Queue(queue.dsn, schema=queue.schema, connect_kwargs={"user": role})
    worker_queue.tasks.update(queue.tasks)
    with caplog.at_level(logging.WARNING, logger="aiopgq"):
        await worker_queue.worker().run(burst=True)
    assert "cannot record its tasks" in caplog.text and "grant_worker" in caplog.text
    assert seen == [1]


async def test_a_worker_refused_by_the_schema_logs_no_start_and_leaves_nothing(
    queue: Queue, conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """The schema check is in the start statement now: a refused start raises SchemaError
    as before, says nothing of having started and deletes no registry row it never wrote."""

    @queue.task(name="startup.refused")
    async def refused() -> None: ...

    await conn.execute(f'INSERT INTO "{queue.schema}".schema_version VALUES (999)')
    with caplog.at_level(logging.INFO, logger="aiopgq"), pytest.raises(SchemaError):
        await queue.worker().run(burst=True)
    assert "started on queues" not in caplog.text
    assert "could not leave" not in caplog.text
    assert await conn.fetchval(f'SELECT count(*) FROM "{queue.schema}".tasks') == 0
