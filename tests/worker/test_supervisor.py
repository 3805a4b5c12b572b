"""`aiopgq worker --processes N` and `aiopgq.run_workers`: worker processes under a supervisor.

The supervisor restarts a child that died (kill -9 here) and no job is lost; one SIGTERM
stops every child gracefully within the grace period, a second one aborts.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest

import aiopgq
from aiopgq import ConfigurationError, JobStatus, Queue

from ..support.cli import ROOT, cli, run_cli
from ..support.helpers import eventually


def children(pid: int) -> list[int]:
    """Live child processes of `pid` (Linux /proc)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def running_by(conn: asyncpg.Connection, schema: str, pid: int) -> set[int]:
    rows = await conn.fetch(
        f"SELECT id FROM \"{schema}\".jobs WHERE status = 'running' AND locked_by LIKE $1",
        f"%:{pid}:%",
    )
    return {r["id"] for r in rows}


def stop(proc: subprocess.Popen[str], within: float = 30) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=within)
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_kill_9_of_a_child_restarts_it_and_loses_no_job(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    jobs = await queue.enqueue_many("app.sleep", [{"seconds": 0.3}] * 60, max_attempts=3)
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--processes",
        "3",
        "--concurrency",
        "4",
        "--heartbeat-interval",
        "0.2",
        "--visibility-timeout",
        "1",
        "--maintenance-interval",
        "0.5",
        "--grace-period",
        "5",
    )
    try:
        first = await eventually(lambda: len(children(proc.pid)) == 3 and children(proc.pid))

        async def busy_child() -> tuple[int, set[int]] | None:
            for pid in children(proc.pid):
                held = await running_by(conn, queue.schema, pid)
                if held:
                    return pid, held
            return None

        victim, in_flight = await eventually(busy_child)
        os.kill(victim, signal.SIGKILL)
        replaced = await eventually(
            lambda: (now := children(proc.pid)) and len(now) == 3 and victim not in now and now,
            within=30,
        )
        assert set(replaced) - set(first), "no new child process replaced the killed one"

        async def settled() -> bool:
            rows = await queue.status()
            return {r["status"]: r["jobs"] for r in rows} == {"done": len(jobs)}

        await eventually(settled, within=60)
        # The restarted child works too. Its peers may have drained the first jobs before it
        # came up (a loaded machine), so give it work only it can take: 12 long jobs for
        # three children of 4 slots each.
        jobs += await queue.enqueue_many("app.sleep", [{"seconds": 5}] * 12, max_attempts=3)
        fresh = set(replaced) - set(first)

        async def fresh_child_works() -> bool:
            return any([await running_by(conn, queue.schema, pid) for pid in fresh])

        await eventually(fresh_child_works, within=60)
        await eventually(settled, within=60)
        assert proc.poll() is None
    finally:
        _out, err = stop(proc)
    assert proc.returncode == 0, err
    assert "restarting in" in err and f"pid {victim}" in err
    runs = await conn.fetch(f"SELECT job_id, count(*) AS n FROM {ledger} GROUP BY job_id")
    counts = {r["job_id"]: r["n"] for r in runs}
    assert set(counts) == {j.id for j in jobs}, "a job finished without running"
    repeated = {job_id for job_id, n in counts.items() if n > 1}
    assert repeated <= in_flight, (repeated, in_flight)  # only the killed child's jobs ran twice
    pids = {r["pid"] for r in await conn.fetch(f"SELECT DISTINCT pid FROM {ledger}")}
    assert len(pids) >= 3


async def test_sigterm_stops_every_child_within_the_grace_period(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    """Short jobs in flight finish and commit; a job longer than the grace period goes back
    to pending without losing its attempt; every process is gone by the deadline."""
    grace = 3.0
    short = await queue.enqueue_many("app.sleep", [{"seconds": 1.0}] * 4, priority=1)
    long = await queue.enqueue("app.sleep", {"seconds": 60}, max_attempts=3)
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--processes",
        "2",
        "--concurrency",
        "3",
        "--grace-period",
        str(grace),
    )
    try:
        kids = await eventually(lambda: len(children(proc.pid)) == 2 and children(proc.pid))
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 5 FROM {ledger}"))
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, grace + 20)
        took = time.monotonic() - stopped_at
    finally:
        _out, err = stop(proc)
    assert proc.returncode == 0, err
    assert took < grace + 5, f"stop took {took:.1f} s with a grace period of {grace} s"
    assert not any(alive(pid) for pid in kids)
    assert [(await queue.get_job(j.id)).status for j in short] == [JobStatus.DONE] * 4
    released = await queue.get_job(long.id)
    assert (released.status, released.attempts) == (JobStatus.PENDING, 0)


async def test_second_signal_aborts_at_once(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    jobs = await queue.enqueue_many("app.sleep", [{"seconds": 60}] * 4, max_attempts=3)
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--processes",
        "2",
        "--concurrency",
        "2",
        "--grace-period",
        "60",
    )
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 4 FROM {ledger}"))
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)  # Ctrl-C counts as the second signal
        await asyncio.to_thread(proc.wait, 30)
        took = time.monotonic() - started
    finally:
        _out, err = stop(proc)
    assert proc.returncode == 130, err
    assert took < 15, f"abort took {took:.1f} s (grace period 60 s)"
    statuses = [(await queue.get_job(j.id)).status for j in jobs]
    assert statuses == [JobStatus.PENDING] * 4  # handed back, not left running


async def test_run_workers_from_python(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    jobs = await queue.enqueue_many("app.sleep", [{"seconds": 0.2}] * 30)
    code = (
        "import sys, aiopgq\n"
        "from datetime import timedelta\n"
        "sys.exit(aiopgq.run_workers('tests.support.app:queue', processes=2, burst=True,"
        " concurrency=3, queues=['default'], retention=None,"
        " poll_interval=timedelta(seconds=0.5), listen=False))\n"
    )
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": queue.schema}
    env["PYTHONPATH"] = str(ROOT)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [(await queue.get_job(j.id)).status for j in jobs] == [JobStatus.DONE] * 30
    pids = await conn.fetchval(f"SELECT count(DISTINCT pid) FROM {ledger}")
    assert pids == 2


async def test_bad_processes_and_bad_target_are_refused_before_any_child_starts(
    dsn: str, queue: Queue
) -> None:
    bad_count = run_cli(dsn, queue.schema, "worker", "tests.support.app:queue", "--processes", "0")
    assert bad_count.returncode == 2
    assert "processes must be an int >= 1 or 'auto'" in bad_count.stderr
    bad_target = run_cli(dsn, queue.schema, "worker", "tests.support.app:nope", "--processes", "2")
    assert bad_target.returncode == 2
    assert "'nope' is not an aiopgq.Queue" in bad_target.stderr
    assert "started" not in bad_target.stderr


def test_run_workers_refuses_unknown_options_and_bad_counts_before_importing() -> None:
    with pytest.raises(ConfigurationError, match="unknown option 'concurency'"):
        aiopgq.run_workers("no_such_module:queue", processes=2, concurency=5)
    with pytest.raises(ConfigurationError, match="processes must be an int >= 1 or 'auto'"):
        aiopgq.run_workers("no_such_module:queue", processes="many")
    with pytest.raises(ConfigurationError, match="cannot import module 'no_such_module'"):
        aiopgq.run_workers("no_such_module:queue", processes=2)


async def test_a_child_refusing_its_command_line_stops_the_supervisor(
    dsn: str, queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """Exit status 2 (a bad option) would fail the same way at every restart: no loop."""
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_TEST_SCHEMA": queue.schema}
    env["PYTHONPATH"] = str(ROOT)
    processes = aiopgq.WorkerProcesses(
        "tests.support.app:queue", 2, args=["--no-such-flag"], env=env
    )
    started = time.monotonic()
    code = await asyncio.wait_for(processes.run(), 60)
    assert code == 2
    assert time.monotonic() - started < 30
    assert processes.restarts == 0
    assert "refused its command line" in caplog.text
