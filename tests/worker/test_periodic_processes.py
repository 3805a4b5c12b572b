"""Periodic jobs across worker processes: each tick once, and on when a worker dies."""

from __future__ import annotations

import signal
import subprocess
from datetime import datetime, timedelta

import asyncpg
import pytest

from aiopgq import Queue

from ..support.cli import cli
from ..support.helpers import eventually

WORKER_ARGS = (
    "worker",
    "tests.support.periodic_app:queue",
    "--maintenance-interval",
    "1",
    "--heartbeat-interval",
    "0.2",
    "--visibility-timeout",
    "2",
    "--poll-interval",
    "0.5",
)


async def ticks(conn: asyncpg.Connection, schema: str) -> list[datetime]:
    # By job id only: a tick's job that the killed worker held is rescued and retried
    # later, so its run_at is no longer the tick.
    rows = await conn.fetch(
        f'SELECT t.tick FROM "{schema}".periodic_ticks t JOIN "{schema}".jobs j '
        "ON j.id = t.job_id WHERE t.name = $1 ORDER BY t.tick",
        "every.second",
    )
    return [row["tick"] for row in rows]


def assert_consecutive(found: list[datetime]) -> None:
    """One job per second, none missing, none twice (jobs_tick_idx would refuse a twin;
    a gap would mean a tick was lost)."""
    assert found, "no tick was enqueued"
    assert found == [found[0] + timedelta(seconds=n) for n in range(len(found))]


def stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        finally:
            proc.kill()


# Worker processes wait out real ticks: the slow set (test_periodic.py runs three
# schedulers on one clock in the default set).
@pytest.mark.slow
async def test_three_workers_run_each_tick_of_a_one_second_schedule_once(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    procs = [cli(dsn, queue.schema, *WORKER_ARGS) for _ in range(3)]
    try:
        # All three schedule and run: wait for 8 ticks, run by at least two of them.
        async def ticks_run_by_several() -> bool:
            runners = await conn.fetchval(f"SELECT count(DISTINCT pid) FROM {ledger}")
            return len(await ticks(conn, queue.schema)) >= 8 and runners >= 2

        await eventually(ticks_run_by_several, within=60)
    finally:
        stop(procs)
    found = await ticks(conn, queue.schema)
    assert_consecutive(found)
    # Every tick's job ran exactly once (a clean stop finishes or releases running jobs).
    runs = await conn.fetch(
        f'SELECT t.tick, count(l.job_id) AS runs FROM "{queue.schema}".periodic_ticks t '
        f"LEFT JOIN {ledger} l ON l.job_id = t.job_id GROUP BY t.tick ORDER BY t.tick"
    )
    done = [row for row in runs if row["runs"]]
    assert len(done) >= len(found) - 3  # the last ticks may still be pending at the stop
    assert {row["runs"] for row in done} == {1}


@pytest.mark.slow
async def test_ticks_go_on_when_the_worker_that_took_the_last_one_is_killed(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    procs = {}
    for _ in range(3):
        proc = cli(dsn, queue.schema, *WORKER_ARGS)
        procs[proc.pid] = proc
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) >= 3 FROM {ledger}"), within=60)
        last_worker = await conn.fetchval(
            f'SELECT last_worker FROM "{queue.schema}".schedules WHERE name = $1', "every.second"
        )
        pid = int(last_worker.split(":")[1])  # worker ids are host:pid:random
        victim = procs.pop(pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = await conn.fetchval("SELECT now()")

        async def ticking_again() -> bool:
            row = await conn.fetchrow(
                f'SELECT last_tick, last_worker FROM "{queue.schema}".schedules'
            )
            return row["last_tick"] >= killed_at + timedelta(seconds=3) and (
                int(row["last_worker"].split(":")[1]) in procs
            )

        # Takeover within one maintenance interval (1 s): allow for slow starts.
        await eventually(ticking_again, within=20)
    finally:
        stop(list(procs.values()))
    assert_consecutive(await ticks(conn, queue.schema))
