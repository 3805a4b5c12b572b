"""Producers when connections fail: dead pool connections replaced, and quiet pools (a
proxy between the Queue and the server breaks connections on cue; the server itself
serves the other tests undisturbed)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from aiopgq import Queue

from .proxy import FaultyProxy


@pytest.fixture
async def proxy(dsn: str) -> AsyncIterator[FaultyProxy]:
    async with FaultyProxy(dsn) as p:
        yield p


async def rows(queue: Queue) -> int:
    return int(await queue.pool.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs'))


def producer(proxy: FaultyProxy, queue: Queue, **options: object) -> Queue:
    """A Queue on the schema of `queue`, through the proxy, with one pool connection."""
    return Queue(proxy.dsn, schema=queue.schema, min_pool_size=1, max_pool_size=1, **options)  # type: ignore[arg-type]


async def test_pool_connection_closed_by_the_server_is_replaced_before_anything_is_sent(
    proxy: FaultyProxy, queue: Queue, conn: asyncpg.Connection
) -> None:
    # The server's goodbye (FATAL, terminating connection) reaches an idle pool
    # connection; the end of the stream comes later. Meanwhile the connection looked
    # open, the pool handed it out, and the enqueue failed with asyncpg's
    # "cannot switch to state 12; another operation (2) is in progress" (nothing sent).
    proxy.linger_close(1.0)
    async with producer(proxy, queue) as p:
        await p.enqueue("t", {"i": 0})
        pid = await p.pool.fetchval("SELECT pg_backend_pid()")
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        await asyncio.sleep(0.2)  # the FATAL has arrived, the close has not
        job = await p.enqueue("t", {"i": 1})
        jobs = await p.enqueue_many("t", [{"i": 2}, {"i": 3}])
        assert await p.pool.fetchval("SELECT pg_backend_pid()") != pid
    assert job.id and len(jobs) == 2
    assert await rows(queue) == 4


async def test_a_pool_with_a_minimum_size_logs_no_tracebacks_while_the_server_is_away(
    proxy: FaultyProxy, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    # asyncpg 0.32 restores a pool's min_size in the background and logs every failed
    # try with a traceback ("Failed to restore the pool connection floor"), every 1-2 s.
    async with producer(proxy, queue) as p:
        await p.enqueue("t", {})
        with caplog.at_level(logging.DEBUG):
            proxy.refuse()
            await asyncio.sleep(3.5)
        proxy.accept()
        assert (await p.enqueue("t", {})).id  # the pool connects again when used
    noisy = [r for r in caplog.records if r.exc_info or r.name.startswith("asyncpg")]
    assert not noisy, [r.getMessage() for r in noisy]
