"""Through pgbouncer in transaction mode: enqueue, claim, complete, heartbeats, maintenance.

Workers and producers get only pgbouncer's address. pgbouncer 1.18 does not carry named
prepared statements across transactions: aiopgq notices the pooler when it connects and
turns asyncpg's statement cache off for it (an explicit `statement_cache_size` wins).
LISTEN needs a direct connection (`listen_dsn`), or the worker polls. No session state may
stay behind on pgbouncer's server connections, which other clients share.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from aiopgq import JobStatus, Queue, Retry, SyncQueue
from aiopgq._db.pooler import behind_pooler, keeps_prepared_statements

from ..support.bouncer import Bouncer, start_pgbouncer
from ..support.helpers import eventually

NOTICED = "go through a connection pooler"  # the INFO that says the cache went off


async def bouncer_queue(bouncer: Bouncer, schema: str, **kwargs: Any) -> Queue:
    queue = Queue(bouncer.dsn, schema=schema, **kwargs)  # pgbouncer's address, nothing else
    await queue.migrate()  # the migrations too run through pgbouncer
    return queue


async def session_state_on_server_connections(conn: asyncpg.Connection, bouncer: Bouncer) -> Any:
    """Advisory locks held by pgbouncer's server connections outside a transaction."""
    return await conn.fetch(
        "SELECT a.pid, l.classid, l.objid, a.state FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND a.application_name = $1 AND a.state = 'idle'",
        bouncer.application_name,
    )


async def server_connections(conn: asyncpg.Connection, bouncer: Bouncer) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            bouncer.application_name,
        )
    )


async def test_enqueue_claim_complete_heartbeat_and_maintenance_through_pgbouncer(
    bouncer: Bouncer, dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    queue = await bouncer_queue(bouncer, schema)
    runs: dict[str, int] = {}
    fails_once: set[int] = set()

    @queue.task(name="quick")
    async def quick(n: int) -> int:
        runs[f"quick{n}"] = runs.get(f"quick{n}", 0) + 1
        return n * 2

    @queue.task(name="long")
    async def long(seconds: float) -> None:  # outlives the lease: heartbeats must extend it
        runs["long"] = runs.get("long", 0) + 1
        await asyncio.sleep(seconds)

    @queue.task(name="flaky", retry=Retry(base=0.1, factor=1, jitter=0))
    async def flaky(n: int) -> None:
        if n not in fails_once:
            fails_once.add(n)
            raise RuntimeError("first attempt fails")

    peak = 0
    async with queue:
        single = await quick.enqueue(0)
        many = await quick.enqueue_many([{"n": i} for i in range(1, 200)])
        copied = await queue.copy_many("quick", ({"n": i} for i in range(200, 300)))
        slow = await long.enqueue(9.0)
        retried = await flaky.enqueue(7)
        # A job whose worker died: running, its heartbeat long gone.
        orphan = await quick.enqueue(999)
        await conn.execute(
            f"UPDATE \"{schema}\".jobs SET status = 'running', attempts = 1, "
            "locked_by = 'gone:1:dead', heartbeat_at = now() - interval '1 hour' WHERE id = $1",
            orphan.id,
        )
        worker = queue.worker(
            concurrency=50,
            listen_dsn=dsn,
            heartbeat_interval=0.2,
            # 4 s: through 4 server connections on a loaded CI host a beat once waited
            # 1.8 s (the tests in 3 processes), and the lease fence (rightly) stopped the
            # long job; the job (9 s) still outlives the lease twice.
            visibility_timeout=4.0,
            maintenance_interval=0.2,
        )
        async with worker:
            assert worker.listener is not None
            await eventually(
                lambda: worker.listener is not None and worker.listener.connected.is_set()
            )

            async def all_done() -> bool:
                nonlocal peak
                peak = max(peak, await server_connections(conn, bouncer))
                assert not await session_state_on_server_connections(conn, bouncer)
                rows = await queue.status()
                return {r["status"]: r["jobs"] for r in rows} == {"done": 303}

            await eventually(all_done, within=30)
            assert worker.listener is not None and not worker.listener.pooled

        assert (await queue.get_job(single.id)).result == 0
        assert [(await queue.get_job(j.id)).result for j in many[:3]] == [2, 4, 6]
        assert copied == 100
        slow_job = await queue.get_job(slow.id)
        assert (slow_job.status, slow_job.attempts, runs["long"]) == (JobStatus.DONE, 1, 1)
        assert (await queue.get_job(retried.id)).attempts == 2
        rescued = await queue.get_job(orphan.id)
        assert (rescued.status, rescued.attempts, runs["quick999"]) == (JobStatus.DONE, 2, 1)
        assert all(count == 1 for count in runs.values()), runs

        # Pruning (maintenance) through pgbouncer too: every finished row is past retention.
        await queue.worker(retention=0.0, maintenance_interval=0.1, listen=False).run(burst=True)
        await eventually(
            lambda: conn.fetchval(f'SELECT count(*) = 0 FROM "{schema}".jobs'), within=10
        )
    await queue.close()
    assert 0 < peak <= bouncer.pool_size
    assert not await session_state_on_server_connections(conn, bouncer)


async def test_listener_through_pgbouncer_warns_polls_and_takes_no_session_locks(
    bouncer: Bouncer, schema: str, conn: asyncpg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a direct listen_dsn the listener would LISTEN through pgbouncer: it notices,
    warns with the fix, and takes no awake locks (they would stay on a shared server
    connection); the worker still runs every job by polling."""
    queue = await bouncer_queue(bouncer, schema)
    ran: list[int] = []

    @queue.task(name="note")
    async def note(n: int) -> None:
        ran.append(n)
        await asyncio.sleep(0.01)

    caplog.set_level(logging.WARNING, logger="aiopgq.listener")
    async with queue, queue.worker(poll_interval=0.2, concurrency=5) as worker:
        await eventually(lambda: worker.listener is not None and worker.listener.pooled)
        for i in range(30):
            await note.enqueue(i)
            assert not await session_state_on_server_connections(conn, bouncer)
        await eventually(lambda: len(ran) == 30)
        leftover = await conn.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND a.application_name = $1",
            bouncer.application_name,
        )
        assert leftover == 0
    assert any("connection pooler" in r.getMessage() for r in caplog.records)
    assert "--listen-dsn" in caplog.text


async def test_listen_dsn_wakes_the_worker_at_once(bouncer: Bouncer, dsn: str, schema: str) -> None:
    """Producers through pgbouncer, the listener direct: NOTIFY wakes an idle worker at once
    (the poll interval is 30 s), also for jobs enqueued while it is awake (their producers
    skip NOTIFY on the strength of the listener's awake locks)."""
    queue = await bouncer_queue(bouncer, schema)
    started: dict[int, float] = {}

    @queue.task(name="stamp")
    async def stamp(n: int) -> None:
        started[n] = time.monotonic()

    async with queue, queue.worker(poll_interval=30, listen_dsn=dsn) as worker:
        assert worker.listener is not None
        await eventually(lambda: worker.listener is not None and worker.listener.connected.is_set())
        await asyncio.sleep(0.3)  # idle: the fetcher sleeps on its 30 s poll
        latencies = []
        for n in range(20):
            enqueued = time.monotonic()
            await stamp.enqueue(n)
            await eventually(lambda n=n: n in started, within=5)
            latencies.append(started[n] - enqueued)
            await asyncio.sleep(0.05 if n % 2 else 0.3)  # awake, then idle again
    assert max(latencies) < 1.0, latencies


async def test_poll_only_through_pgbouncer_starts_jobs_within_the_poll_interval(
    bouncer: Bouncer, schema: str
) -> None:
    """listen=False: no LISTEN, no direct connection at all; a job waits at most about
    one poll interval (plus the claim) for an idle worker."""
    queue = await bouncer_queue(bouncer, schema)
    started: dict[int, float] = {}

    @queue.task(name="stamp")
    async def stamp(n: int) -> None:
        started[n] = time.monotonic()

    poll = 0.5
    async with queue, queue.worker(poll_interval=poll, listen=False) as worker:
        assert worker.listener is None
        latencies = []
        for n in range(6):
            await asyncio.sleep(0.37)  # land anywhere in the poll cycle
            enqueued = time.monotonic()
            await stamp.enqueue(n)
            await eventually(lambda n=n: n in started, within=5)
            latencies.append(started[n] - enqueued)
    assert max(latencies) < poll + 1.0, latencies


async def test_a_producer_and_a_worker_given_only_pgbouncers_address(
    bouncer: Bouncer, dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two Queues as two services would make them, each with pgbouncer's DSN and nothing
    else: the producer's enqueues and the worker's claims, completions and retries all go
    through pgbouncer 1.18, whose pooler each noticed (asyncpg's named statements would fail
    there once several clients share its 4 server connections)."""
    caplog.set_level(logging.INFO, logger="aiopgq.queue")
    producer = await bouncer_queue(bouncer, schema)
    consumer = Queue(bouncer.dsn, schema=schema)
    runs: dict[int, int] = {}

    @consumer.task(name="count", retry=Retry(base=0.1, factor=1, jitter=0))
    async def count(n: int) -> int:
        runs[n] = runs.get(n, 0) + 1
        if n % 50 == 0 and runs[n] == 1:
            raise RuntimeError("retried once")
        await asyncio.sleep(0.001)
        return n

    async with producer, consumer:
        worker = consumer.worker(concurrency=20, listen_dsn=dsn, poll_interval=0.2)
        async with worker:
            for n in range(0, 400, 8):  # many small transactions, from several connections
                await asyncio.gather(
                    *(producer.enqueue("count", {"n": i}) for i in range(n, n + 8)),
                )

            async def drained() -> bool:
                rows = await producer.status()
                return {r["status"]: r["jobs"] for r in rows} == {"done": 400}

            await eventually(drained, within=60)
    assert sorted(runs) == list(range(400))
    assert all(runs[n] == (2 if n % 50 == 0 else 1) for n in runs), runs
    noticed = [r for r in caplog.records if NOTICED in r.getMessage()]
    assert len(noticed) == 1, [r.getMessage() for r in noticed]  # once per process and address
    assert "statement_cache_size" in noticed[0].getMessage()


async def test_sync_producers_given_only_pgbouncers_address(
    bouncer: Bouncer, schema: str, conn: asyncpg.Connection
) -> None:
    """SyncQueue (psycopg) prepares a statement it ran 5 times on a connection: behind
    pgbouncer 1.18 the next run would find it missing, or find another client's under
    its name ("prepared statement _pg3_0 already exists"). It notices the pooler too."""
    await bouncer_queue(bouncer, schema)

    def produce() -> None:
        producers = [SyncQueue(bouncer.dsn, schema=schema) for _ in range(3)]
        try:
            for n in range(20):
                for producer in producers:
                    producer.enqueue("note", {"n": n})
        finally:
            for producer in producers:
                producer.close()

    await asyncio.to_thread(produce)
    assert await conn.fetchval(f'SELECT count(*) FROM "{schema}".jobs') == 60


async def test_an_explicit_statement_cache_size_wins(
    bouncer: Bouncer, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """connect_kwargs={"statement_cache_size": 0} (CLI --statement-cache-size 0), as before
    the detection: nothing is probed, and everything works through pgbouncer."""
    caplog.set_level(logging.DEBUG, logger="aiopgq.queue")
    queue = await bouncer_queue(bouncer, schema, connect_kwargs={"statement_cache_size": 0})
    ran: list[int] = []

    @queue.task(name="note")
    async def note(n: int) -> None:
        ran.append(n)

    async with queue:
        await note.enqueue_many([{"n": i} for i in range(100)])
        await queue.worker(concurrency=10, listen=False).run(burst=True)
    assert sorted(ran) == list(range(100))
    assert not [r for r in caplog.records if "pooler" in r.getMessage()]


async def test_the_pooler_is_noticed_and_no_prepared_statement_stays_behind(
    dsn: str, conn: asyncpg.Connection, tmp_path: Path
) -> None:
    """The two questions a new connection asks: a direct one (the test server, over a Unix
    socket when it is the embedded one) is not behind a pooler; one through pgbouncer 1.18
    is, and its pooler passes named statements through. Neither question leaves a prepared
    statement on pgbouncer's one server connection."""
    assert not await behind_pooler(conn)
    with start_pgbouncer(dsn, tmp_path / "one", pool_size=1) as bouncer:
        client = await asyncpg.connect(bouncer.dsn)  # asyncpg's defaults: the cache on
        try:
            assert await behind_pooler(client)
            assert not await keeps_prepared_statements(client)
            # One server connection: this (simple-protocol) query runs where the probes ran.
            assert await client.execute("SELECT 1 FROM pg_prepared_statements") == "SELECT 0"
        finally:
            await client.close()
