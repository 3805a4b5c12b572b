"""The waiters of every Queue in a process share one LISTEN connection per database."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import Job, Queue, QueueNotOpen

from ..support.helpers import eventually


@pytest.fixture
async def other_schema(dsn: str) -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


async def listen_connections(conn: asyncpg.Connection, queue: Queue) -> list[asyncpg.Record]:
    """The waiters' LISTEN connections of this process on this database."""
    return await conn.fetch(
        "SELECT pid, usename FROM pg_stat_activity"
        " WHERE application_name = $1 AND datname = current_database()",
        queue.waiter_name,
    )


def listening(*queues: Queue) -> bool:
    return all(q._results.waiters is not None and q._results.waiters.listening for q in queues)


def echo_task(queue: Queue) -> None:
    @queue.task(name="s.echo")
    async def echo(n: int) -> int:
        return n


def waits(jobs: list[Job]) -> list[asyncio.Future[Job]]:
    return [asyncio.ensure_future(job.wait(timeout=15)) for job in jobs]


async def test_queues_on_two_schemas_share_one_listen_connection(
    dsn: str, queue: Queue, other_schema: str, conn: asyncpg.Connection
) -> None:
    other = Queue(dsn, schema=other_schema)
    await other.migrate()
    again = Queue(dsn, schema=queue.schema)  # the same schema opened twice
    echo_task(queue)
    echo_task(other)
    async with other, again:
        in_a = await queue.enqueue_many("s.echo", [{"n": n} for n in range(3)])
        in_b = await other.enqueue_many("s.echo", [{"n": n + 10} for n in range(3)])
        twice = await again.get_job(in_a[0].id)
        waiting = waits(in_a) + waits(in_b) + waits([twice])
        await eventually(lambda: listening(queue, other, again))
        assert len(await listen_connections(conn, queue)) == 1
        await queue.worker().run(burst=True)
        await other.worker().run(burst=True)
        done = await asyncio.gather(*waiting)  # announced: the safety poll is 30 s away
        assert [j.result for j in done] == [0, 1, 2, 10, 11, 12, 0]

        # Closing one Queue (on the same channel, then on another) leaves the rest alone.
        first = await queue.enqueue("s.echo", {"n": 20})
        mine = waits([first])
        theirs = waits([await again.get_job(first.id)])
        await asyncio.sleep(0.2)
        await again.close()
        with pytest.raises(QueueNotOpen):
            await theirs[0]
        in_other = waits([await other.enqueue("s.echo", {"n": 21})])
        await asyncio.sleep(0.2)
        await queue.worker().run(burst=True)
        assert (await mine[0]).result == 20
        await other.close()
        with pytest.raises(QueueNotOpen):
            await in_other[0]
        third = waits([await queue.enqueue("s.echo", {"n": 22})])
        await asyncio.sleep(0.2)
        await queue.worker().run(burst=True)
        assert (await third[0]).result == 22
        assert listening(queue)
        assert len(await listen_connections(conn, queue)) == 1
        assert queue._results.waiters is not None and queue._results.waiters.hub is not None
        assert queue._results.waiters.hub.connects == 1  # never reopened


async def test_killing_the_shared_connection_resolves_every_queue_s_waiters(
    dsn: str,
    queue: Queue,
    other_schema: str,
    conn: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="aiopgq")
    other = Queue(dsn, schema=other_schema)
    await other.migrate()
    echo_task(queue)
    echo_task(other)
    async with other:
        for q in (queue, other):
            q.result_poll_interval = 0.5
        for _ in range(2):
            in_a = await queue.enqueue_many("s.echo", [{"n": n} for n in range(3)])
            in_b = await other.enqueue_many("s.echo", [{"n": n} for n in range(3)])
            waiting = waits(in_a + in_b)
            await eventually(lambda: listening(queue, other))
            (killed,) = await listen_connections(conn, queue)
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", killed["pid"])
            await queue.worker().run(burst=True)
            await other.worker().run(burst=True)
            finished_at = time.monotonic()
            done = await asyncio.gather(*waiting)
            assert [j.result for j in done] == [0, 1, 2, 0, 1, 2]
            waited = time.monotonic() - finished_at
            assert waited < 0.5 + 1.5, waited  # one poll interval, and slack for a busy machine
            # It comes back, one connection again, for both.
            await eventually(lambda: listening(queue, other))

            async def replaced(killed: int = killed["pid"]) -> bool:
                pids = [r["pid"] for r in await listen_connections(conn, queue)]
                return len(pids) == 1 and pids != [killed]

            await eventually(replaced)
        assert queue._results.waiters is not None and other._results.waiters is not None
        assert queue._results.waiters.hub is other._results.waiters.hub
        assert queue._results.waiters.hub is not None and queue._results.waiters.hub.connects == 3
    # A lost connection is replaced at once, and says so at INFO: no warning (issue 13).
    loud = [r for r in caplog.records if r.name.startswith("aiopgq") and r.levelno > logging.INFO]
    assert not loud, [r.getMessage() for r in loud]
    assert "LISTEN connection of waiters lost" in caplog.text


async def test_other_credentials_get_their_own_connection(
    dsn: str, queue: Queue, other_schema: str, conn: asyncpg.Connection
) -> None:
    role = f"aiopgq_waiter_{uuid.uuid4().hex[:8]}"
    await conn.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    try:
        other = Queue(dsn, schema=other_schema, connect_kwargs={"user": role})
        await other.migrate()
        echo_task(queue)
        echo_task(other)
        async with other:
            waiting = waits(
                [await queue.enqueue("s.echo", {"n": 1}), await other.enqueue("s.echo", {"n": 2})]
            )
            await eventually(lambda: listening(queue, other))
            users = sorted(r["usename"] for r in await listen_connections(conn, queue))
            assert len(users) == 2 and role in users
            await queue.worker().run(burst=True)
            await other.worker().run(burst=True)
            assert [j.result for j in await asyncio.gather(*waiting)] == [1, 2]
        # Closing the other queue closed its connection; ours carries on.
        me = await conn.fetchval("SELECT current_user")

        async def only_ours() -> bool:
            return [r["usename"] for r in await listen_connections(conn, queue)] == [me]

        await eventually(only_ours)
    finally:
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


async def test_another_event_loop_gets_its_own_connection(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    echo_task(queue)
    here = waits([await queue.enqueue("s.echo", {"n": 1})])
    await eventually(lambda: listening(queue))

    async def elsewhere() -> int:
        other = Queue(dsn, schema=queue.schema)
        echo_task(other)
        async with other:
            job = await other.enqueue("s.echo", {"n": 2})
            there = waits([job])
            await eventually(lambda: listening(other))
            assert other._results.waiters is not None and queue._results.waiters is not None
            assert other._results.waiters.hub is not queue._results.waiters.hub
            async with other.pool.acquire() as mine:
                count = len(await listen_connections(mine, other))
            await other.worker().run(burst=True)
            result: int = (await there[0]).result
            assert result == 2
            return count

    assert await asyncio.to_thread(asyncio.run, elsewhere()) == 2
    await queue.worker().run(burst=True)
    assert (await here[0]).result == 1
    assert len(await listen_connections(conn, queue)) == 1
