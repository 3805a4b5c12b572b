"""The workers registry: each worker records itself on its heartbeat, leaves at a clean
stop, and the maintenance leader expires the rows of killed workers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket

import asyncpg

from aiopgq import Queue, __version__

from ..support.cli import cli, run_cli
from ..support.helpers import eventually


async def _rows(conn: asyncpg.Connection, schema: str) -> list[asyncpg.Record]:
    return await conn.fetch(f'SELECT * FROM "{schema}".workers ORDER BY started_at')


async def test_a_worker_records_itself_beats_while_idle_and_leaves_at_stop(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    worker = queue.worker(queues=["mail", "sms"], concurrency=7, heartbeat_interval=0.1)
    async with worker:
        rows = await _rows(conn, queue.schema)  # there as soon as the worker runs
        assert len(rows) == 1
        row = rows[0]
        assert row["id"] == worker.id
        assert (row["host"], row["pid"]) == (socket.gethostname(), os.getpid())
        assert (row["queues"], row["concurrency"]) == (["mail", "sms"], 7)
        assert row["version"] == __version__
        assert row["heartbeat_interval"] == 0.1
        first_seen = row["last_seen"]

        # No job is held, and the row is kept fresh all the same.
        async def seen_again() -> bool:
            rows = await _rows(conn, queue.schema)
            return bool(rows) and rows[0]["last_seen"] > first_seen

        await eventually(seen_again, within=5)
        assert (await _rows(conn, queue.schema))[0]["started_at"] == row["started_at"]
    assert await _rows(conn, queue.schema) == []  # a clean stop deregisters


async def test_one_registry_statement_per_heartbeat_never_per_job(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # Count the statements that write the registry with a statement-level trigger.
    schema = f'"{queue.schema}"'
    await conn.execute(
        f"CREATE TABLE {schema}.registry_writes (at timestamptz DEFAULT clock_timestamp());"
        f"CREATE FUNCTION {schema}.count_write() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN INSERT INTO {schema}.registry_writes DEFAULT VALUES; RETURN NULL; END $$;"
        f"CREATE TRIGGER counted AFTER INSERT ON {schema}.workers "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {schema}.count_write();"
    )

    @queue.task(name="tiny")
    async def tiny(i: int) -> None:
        pass

    await tiny.enqueue_many([{"i": i} for i in range(3000)])
    worker = queue.worker(concurrency=50, heartbeat_interval=0.25)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with worker:
        await eventually(
            lambda: conn.fetchval(
                f"SELECT count(*) = 3000 FROM {schema}.jobs WHERE status = 'done'"
            )
        )
        await asyncio.sleep(max(0.0, 2.0 - (loop.time() - started)))  # idle for the rest
    ran_for = loop.time() - started
    writes = await conn.fetchval(f"SELECT count(*) FROM {schema}.registry_writes")
    # One at start plus one per 0.25 s beat, busy or idle: never one per job (3,000).
    assert 4 <= writes <= 2 + ran_for / 0.25, (writes, ran_for)


async def test_killed_workers_expire_and_aiopgq_workers_lists_the_live_ones(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    await queue.enqueue("app.sleep", {"seconds": 30})
    procs = [
        cli(
            dsn,
            queue.schema,
            "worker",
            "tests.support.app:queue",
            "--concurrency",
            "3",
            "--heartbeat-interval",
            "0.2",
            "--visibility-timeout",
            "60",
            "--grace-period",
            "1",
            "--maintenance-interval",  # the expiry below waits for a maintenance pass
            "0.5",
        )
        for _ in range(2)
    ]
    try:
        rows = await eventually(lambda: _two(conn, queue.schema), within=30)
        pids = sorted(row["pid"] for row in rows)
        assert pids == sorted(p.pid for p in procs)
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 1 FROM {ledger}"))

        listed = run_cli(dsn, queue.schema, "--schema", queue.schema, "workers")
        assert listed.returncode == 0, listed.stderr
        for proc in procs:
            assert str(proc.pid) in listed.stdout
        as_json = json.loads(
            run_cli(dsn, queue.schema, "--schema", queue.schema, "workers", "--json").stdout
        )
        assert sorted(w["running"] for w in as_json) == [0, 1]  # the sleeping job's holder
        assert {w["concurrency"] for w in as_json} == {3}

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        # The survivor's maintenance leader expires the dead row after 3 missed beats.
        await eventually(lambda: _pids(conn, queue.schema, expect=[procs[1].pid]), within=20)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            finally:
                proc.kill()
    # The survivor stopped cleanly (SIGTERM): it left the registry itself.
    assert await _rows(conn, queue.schema) == []


async def _two(conn: asyncpg.Connection, schema: str) -> list[asyncpg.Record] | None:
    rows = await _rows(conn, schema)
    return rows if len(rows) == 2 else None


async def _pids(conn: asyncpg.Connection, schema: str, *, expect: list[int]) -> bool:
    return [row["pid"] for row in await _rows(conn, schema)] == expect


async def test_when_a_burst_returns_the_worker_has_left_and_closed_its_connection(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # The fetch connection closes at the very end, beside the registry row's delete
    # (worker.py): both are done by the time run() returns.
    worker = queue.worker(queues=["q"], concurrency=1)  # one job at a time on `conn`
    own_sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1"
    own_name = f"aiopgq-fetcher %{worker.id[:30]}%"
    seen: list[int] = []

    @queue.task(name="note", queue="q")
    async def note(n: int) -> None:
        seen.append(await conn.fetchval(own_sql, own_name))

    await note.enqueue_many([{"n": n} for n in range(3)])
    await worker.run(burst=True)
    assert seen == [1, 1, 1]  # its connection, while it ran
    assert await _rows(conn, queue.schema) == []
    assert await conn.fetchval(own_sql, own_name) == 0
