"""Connection budget: a worker's connections do not grow with its concurrency, and a fleet
fits a small server through pgbouncer.

Per worker process: one LISTEN connection (direct), the fetcher's own connection, and a
pool of at most max_pool_size (default 10), of which the worker's own parts use at most 5
at once: a completion flush, the heartbeat, a maintenance batch, the wait for producers
that skipped NOTIFY and the read of paused and limited queues. Handlers that use
`queue.pool` share the rest.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from aiopgq import JobStatus, Queue
from aiopgq.embedded import EmbeddedServer, start_throwaway

from ..support.bouncer import start_pgbouncer
from ..support.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
WORKER_PARTS = 5  # completer, heartbeat, maintenance, skipped-NOTIFY wait, pauses


async def connections_named(conn: asyncpg.Connection, name: str) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name
        )
    )


@pytest.mark.parametrize("concurrency", [10, 100])
async def test_a_workers_connections_do_not_grow_with_its_concurrency(
    dsn: str, schema: str, conn: asyncpg.Connection, concurrency: int
) -> None:
    name = f"budget-{uuid.uuid4().hex[:8]}"
    queue = Queue(
        dsn, schema=schema, connect_kwargs={"server_settings": {"application_name": name}}
    )
    await queue.migrate()

    @queue.task(name="pause")
    async def pause(seconds: float) -> None:
        await asyncio.sleep(seconds)

    peak = peak_running = 0
    async with queue:
        jobs = await pause.enqueue_many([{"seconds": 0.3}] * (3 * concurrency))
        worker = queue.worker(
            concurrency=concurrency,
            heartbeat_interval=0.1,
            visibility_timeout=5,
            maintenance_interval=0.1,
        )
        async with worker:

            async def drained() -> bool:
                nonlocal peak, peak_running
                peak = max(peak, await connections_named(conn, name))
                peak_running = max(peak_running, worker.running_jobs)
                rows = await queue.status()
                return {r["status"]: r["jobs"] for r in rows} == {"done": len(jobs)}

            await eventually(drained, within=60, every=0.01)
            assert await connections_named(conn, worker.listener_name) == 1
            fetcher = f"aiopgq-fetcher {worker.id}"[:63]
            assert await connections_named(conn, fetcher) == 1
    assert peak_running == concurrency  # every slot was busy at some point
    assert 1 <= peak <= WORKER_PARTS, f"{peak} pool connections at concurrency {concurrency}"


@pytest.fixture(scope="module")
def small_server() -> Iterator[EmbeddedServer]:
    """A server of its own with max_connections = 20 (all superuser connections here)."""
    try:
        server = start_throwaway(settings={"max_connections": "20"})
    except Exception as exc:
        pytest.fail(f"the embedded PostgreSQL did not start ({exc})", pytrace=False)
    with server:
        yield server


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(args, env=env, cwd=ROOT, stdout=out, stderr=out)


def read(path: Path) -> str:
    return path.read_text(errors="replace")


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.needs("pgbouncer")
async def test_eight_workers_of_concurrency_100_fit_max_connections_20_through_pgbouncer(
    small_server: EmbeddedServer, tmp_path: Path
) -> None:
    """8 worker processes x 100 concurrency = 800 jobs at once, against a server that
    takes 20 connections: through pgbouncer (4 server connections) plus one direct
    LISTEN connection per worker. Directly, the pools alone could open 8 x 10."""
    processes, concurrency, pool_size = 8, 100, 4
    direct = small_server.ensure_database("budget")
    schema = "budget"
    queue = Queue(direct, schema=schema)
    await queue.migrate()
    assert await asyncpg_fetchval(direct, "SHOW max_connections") == "20"
    with start_pgbouncer(direct, tmp_path / "pgbouncer", pool_size=pool_size) as bouncer:
        env = {**os.environ, "AIOPGQ_DSN": bouncer.dsn, "AIOPGQ_TEST_SCHEMA": schema}
        env["PYTHONPATH"] = str(ROOT)
        env.pop("DATABASE_URL", None)
        args = [
            sys.executable,
            "-m",
            "aiopgq",
            "worker",
            "tests.support.budget_app:queue",
            "--processes",
            str(processes),
            "--concurrency",
            str(concurrency),
            "--listen-dsn",
            direct,
            "--poll-interval",
            "1",
        ]
        log = tmp_path / "workers.log"
        async with queue:
            jobs = await queue.enqueue_many("budget.pause", [{"seconds": 1.0}] * 2400)
            monitor = await asyncpg.connect(direct)
            proc = spawn(args, env, log)
            peaks = {"bouncer": 0, "listeners": 0, "backends": 0, "running": 0}
            try:

                async def drained() -> bool:
                    row = await monitor.fetchrow(
                        "SELECT count(*) FILTER (WHERE application_name = $1) AS bouncer, "
                        "count(*) FILTER (WHERE application_name LIKE 'aiopgq-listener %') "
                        "AS listeners, count(*) AS backends FROM pg_stat_activity "
                        "WHERE backend_type = 'client backend'",
                        bouncer.application_name,
                    )
                    running = await monitor.fetchval(
                        f"SELECT count(*) FROM {schema}.jobs WHERE status = 'running'"
                    )
                    for key, value in (*row.items(), ("running", running)):
                        peaks[key] = max(peaks[key], value)
                    pending = await monitor.fetchval(
                        f"SELECT count(*) FROM {schema}.jobs WHERE status <> 'done'"
                    )
                    return pending == 0

                await eventually(lambda: len(children(proc.pid)) == processes, within=60)
                await eventually(drained, within=120, every=0.05)
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                await asyncio.to_thread(proc.wait, 60)
                await monitor.close()
            done = [await queue.get_job(j.id) for j in jobs[:: len(jobs) // 20]]
        text = read(log)
        assert proc.returncode == 0, text[-3000:]
        assert "too many clients" not in text and "restarting in" not in text, text[-3000:]
        assert all((j.status, j.attempts) == (JobStatus.DONE, 1) for j in done)
        assert peaks["running"] > processes * concurrency / 2, peaks  # the concurrency was used
        assert peaks["bouncer"] <= pool_size, peaks
        assert peaks["listeners"] == processes, peaks
        assert peaks["backends"] <= 20, peaks


async def asyncpg_fetchval(dsn: str, sql: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()
