"""Producers when connections fail: dead pool connections replaced, enqueue retries that
never run an insert twice, and quiet pools (a proxy between the Queue and the server
breaks connections on cue; the server itself serves the other tests undisturbed)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest

from aiopgq import ConfigurationError, Queue

from ..support.proxy import Proxy


@pytest.fixture
async def proxy(dsn: str) -> AsyncIterator[Proxy]:
    async with Proxy(dsn) as p:
        yield p


async def rows(queue: Queue) -> int:
    return int(await queue.pool.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs'))


def producer(proxy: Proxy, queue: Queue, **options: object) -> Queue:
    """A Queue on the schema of `queue`, through the proxy, with one pool connection."""
    return Queue(proxy.dsn, schema=queue.schema, min_pool_size=1, max_pool_size=1, **options)  # type: ignore[arg-type]


async def test_pool_connection_closed_by_the_server_is_replaced_before_anything_is_sent(
    proxy: Proxy, queue: Queue, conn: asyncpg.Connection
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


async def test_enqueue_waits_out_a_database_it_cannot_reach(
    proxy: Proxy, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    async with producer(proxy, queue, enqueue_retry_for=10) as p:
        await p.enqueue("t", {"i": 0})
        with caplog.at_level(logging.INFO, logger="aiopgq"):
            proxy.refuse()
            await asyncio.sleep(0.1)  # the pool has seen its connection go (else: sent, lost)
            started = time.monotonic()
            sending = asyncio.create_task(p.enqueue("t", {"i": 1}))
            await asyncio.sleep(1.0)
            assert not sending.done(), "the enqueue gave up while the server was away"
            proxy.accept()
            job = await asyncio.wait_for(sending, 10)
        waited = time.monotonic() - started
    assert job.id and waited >= 1.0
    assert await rows(queue) == 2
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    warnings = [m for level, m in messages if level == "WARNING"]
    assert len(warnings) == 1 and "enqueue failed" in warnings[0], messages
    assert any(level == "INFO" and "enqueue works again after" in m for level, m in messages)


async def test_without_a_retry_time_enqueue_fails_at_once_and_a_call_can_ask_for_one(
    proxy: Proxy, queue: Queue
) -> None:
    async with producer(proxy, queue) as p:
        await p.enqueue("t", {"i": 0})
        proxy.refuse()
        await asyncio.sleep(0.1)  # the pool has seen its connection go
        started = time.monotonic()
        with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
            await p.enqueue("t", {"i": 1})
        assert time.monotonic() - started < 2
        sending = asyncio.create_task(
            p.enqueue_many("t", [{"i": 2}], enqueue_retry_for=timedelta(seconds=10))
        )
        await asyncio.sleep(0.5)
        assert not sending.done()
        proxy.accept()
        assert len(await asyncio.wait_for(sending, 10)) == 1
    assert await rows(queue) == 2


async def test_retrying_gives_up_after_its_time_with_the_last_error(
    proxy: Proxy, queue: Queue
) -> None:
    async with producer(proxy, queue, enqueue_retry_for=1.0) as p:
        await p.enqueue("t", {"i": 0})
        proxy.refuse()
        await asyncio.sleep(0.1)
        started = time.monotonic()
        with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
            await p.copy_many("t", [{"i": 1}])
        gave_up = time.monotonic() - started
    assert 0.9 < gave_up < 5, gave_up
    assert await rows(queue) == 1


async def test_an_insert_whose_reply_was_lost_is_not_sent_again(proxy: Proxy, queue: Queue) -> None:
    # The insert committed; only its reply is lost. Sending it again would enqueue the
    # job twice: the error goes to the caller, who cannot know whether it committed.
    async with producer(proxy, queue, enqueue_retry_for=10) as p:
        await p.enqueue("t", {"i": 0})  # prepares the insert on the one connection
        await p.enqueue_many("t", [{"i": 0}])
        proxy.lose_next_reply()
        started = time.monotonic()
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await p.enqueue("t", {"i": 1})
        await p.enqueue_many("t", [{"i": 0}])  # a new connection: prepare it again
        proxy.lose_next_reply()
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await p.enqueue_many("t", [{"i": 2}, {"i": 3}])
        assert time.monotonic() - started < 5, "a lost reply was retried"
    assert await rows(queue) == 6  # each insert ran once


async def test_a_keyed_insert_whose_reply_was_lost_is_retried_and_finds_its_job(
    proxy: Proxy, queue: Queue
) -> None:
    async with producer(proxy, queue, enqueue_retry_for=10) as p:
        await p.enqueue("t", {"i": 0}, idempotency_key="warm")
        proxy.lose_next_reply()
        job = await p.enqueue("t", {"i": 1}, idempotency_key="order-1")
    stored = await queue.pool.fetch(
        f'SELECT id FROM "{queue.schema}".jobs WHERE idempotency_key = $1', "order-1"
    )
    assert [r["id"] for r in stored] == [job.id]


async def test_a_keyed_insert_that_could_not_return_its_own_job_is_not_sent_again(
    proxy: Proxy, queue: Queue
) -> None:
    # on_conflict="raise": sent again, the insert would find its own first job and raise
    # DuplicateJob; a batch with a job without a key would enqueue that job twice.
    async with producer(proxy, queue, enqueue_retry_for=10) as p:
        await p.enqueue("t", {"i": 0}, idempotency_key="warm", on_conflict="raise")
        proxy.lose_next_reply()
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await p.enqueue("t", {"i": 1}, idempotency_key="k1", on_conflict="raise")
        await p.enqueue_many("t", [{"i": 0}], idempotency_keys=["warm-2"])
        proxy.lose_next_reply()
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await p.enqueue_many("t", [{"i": 2}, {"i": 3}], idempotency_keys=["k2", None])
        await p.enqueue_many("t", [{"i": 0}], idempotency_keys=["warm-3"])
        proxy.lose_next_reply()
        jobs = await p.enqueue_many("t", [{"i": 4}, {"i": 5}], idempotency_keys=["k4", "k5"])
    assert len(jobs) == 2
    keys = await queue.pool.fetch(
        f'SELECT idempotency_key, count(*) AS n FROM "{queue.schema}".jobs GROUP BY 1'
    )
    assert {r["idempotency_key"]: r["n"] for r in keys} == {
        "warm": 1,
        "k1": 1,
        "warm-2": 1,
        "k2": 1,
        None: 1,
        "warm-3": 1,
        "k4": 1,
        "k5": 1,
    }


async def test_task_shortcuts_take_the_retry_time(proxy: Proxy, queue: Queue) -> None:
    async with producer(proxy, queue) as p:

        @p.task(name="t")
        async def t(i: int) -> None: ...

        await t.enqueue(0)
        proxy.refuse()
        await asyncio.sleep(0.1)
        sending = asyncio.create_task(t.enqueue(1, enqueue_retry_for=10))
        await asyncio.sleep(0.5)
        proxy.accept()
        assert (await asyncio.wait_for(sending, 10)).id
    assert await rows(queue) == 2


async def test_retry_time_is_checked_and_refused_with_the_callers_connection(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    for bad in (-1, "5", 86401):
        with pytest.raises(ConfigurationError, match="enqueue_retry_for"):
            Queue(queue.dsn, schema=queue.schema, enqueue_retry_for=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="retry the transaction"):
        await queue.enqueue("t", {}, connection=conn, enqueue_retry_for=5)
    retrying = Queue(queue.dsn, schema=queue.schema, enqueue_retry_for=5)
    async with retrying:  # the queue's default does not apply to the caller's connection
        job = await retrying.enqueue("t", {}, connection=conn)
    assert job.id


async def test_a_pool_with_a_minimum_size_logs_no_tracebacks_while_the_server_is_away(
    proxy: Proxy, queue: Queue, caplog: pytest.LogCaptureFixture
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
