"""Workers as separate processes, started through the CLI the way users run them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import asyncpg

from aiopgq import JobStatus, Queue

from ..support.cli import ROOT, cli, run_cli
from ..support.helpers import eventually


async def test_sigkilled_worker_job_is_recovered_after_visibility_timeout(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    job = await queue.enqueue("app.sleep", {"seconds": 60}, max_attempts=3)
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--heartbeat-interval",
        "0.2",
        "--visibility-timeout",
        "1",
    )
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 1 FROM {ledger}"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    assert (await queue.get_job(job.id)).status is JobStatus.RUNNING

    # A healthy worker rescues it once the lease expires, and runs it again.
    @queue.task(name="app.sleep")
    async def sleep(seconds: float) -> None:
        pass

    worker = queue.worker(
        heartbeat_interval=0.2, visibility_timeout=1, maintenance_interval=0.2, poll_interval=0.2
    )
    async with worker:

        async def done() -> bool:
            return (await queue.get_job(job.id)).status is JobStatus.DONE

        await eventually(done)
    final = await queue.get_job(job.id)
    assert final.attempts == 2
    assert await conn.fetchval(f"SELECT count(*) FROM {ledger}") == 1  # the first run only


async def test_job_that_kills_its_worker_ends_failed_not_in_a_loop(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    job = await queue.enqueue("app.crash", {}, max_attempts=2)
    for _ in range(2):
        proc = cli(
            dsn,
            queue.schema,
            "worker",
            "tests.support.app:queue",
            "--heartbeat-interval",
            "0.2",
            "--visibility-timeout",
            "0.5",
            "--poll-interval",
            "0.2",
        )
        try:
            assert proc.wait(30) == -signal.SIGKILL
        finally:
            proc.kill()
        # Let the maintenance of an idle worker rescue the expired lease.
        rescuer = queue.worker(
            queues=["none"],
            heartbeat_interval=0.1,
            visibility_timeout=0.5,
            maintenance_interval=0.1,
        )
        async with rescuer:

            async def rescued() -> bool:
                return (await queue.get_job(job.id)).status is not JobStatus.RUNNING

            await eventually(rescued)
    final = await queue.get_job(job.id)
    assert final.status is JobStatus.FAILED
    assert final.attempts == 2
    assert final.last_error is not None and "lease expired" in final.last_error
    assert [e.attempt for e in final.errors] == [1, 2]  # both lost attempts, in the history
    assert all("lease expired" in e.error and e.worker for e in final.errors)
    assert await conn.fetchval(f"SELECT count(*) FROM {ledger}") == 2


async def test_cli_migrate_enqueue_status_worker(dsn: str, schema: str) -> None:
    migrated = run_cli(dsn, schema, "--schema", schema, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f'CREATE TABLE "{schema}".ledger (job_id bigint, attempt int, pid int, task text, '
            "at timestamptz DEFAULT clock_timestamp())"
        )
        enq = run_cli(
            dsn, schema, "--schema", schema, "enqueue", "app.noop", '{"n": 1}', "--priority", "3"
        )
        assert enq.returncode == 0, enq.stderr
        job_id = int(enq.stdout.strip())
        status = run_cli(dsn, schema, "--schema", schema, "status")
        assert status.returncode == 0
        assert "pending" in status.stdout and "default" in status.stdout
        work = run_cli(
            dsn, schema, "--schema", schema, "worker", "tests.support.app:queue", "--burst"
        )
        assert work.returncode == 0, work.stderr
        assert (
            await conn.fetchval(f'SELECT status::text FROM "{schema}".jobs WHERE id = $1', job_id)
            == "done"
        )
    finally:
        await conn.close()


async def test_cli_sigterm_stops_gracefully(dsn: str, queue: Queue, ledger: str) -> None:
    job = await queue.enqueue("app.sleep", {"seconds": 0.5})
    proc = cli(dsn, queue.schema, "worker", "tests.support.app:queue", "--schema", queue.schema)
    conn = await asyncpg.connect(dsn)
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 1 FROM {ledger}"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        await conn.close()
    assert (await queue.get_job(job.id)).status is JobStatus.DONE


def test_cli_user_errors_are_one_line_without_traceback(dsn: str, schema: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AIOPGQ_DSN", "DATABASE_URL")}
    cases = [
        ["migrate"],
        ["--dsn", "mysql://u:secret@h/db", "migrate"],
        ["--dsn", dsn, "enqueue", "t", "not json"],
        ["--dsn", dsn, "worker", "no_such_module:q"],
        ["--dsn", dsn, "--schema", schema, "status"],
    ]
    for args in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "aiopgq", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode != 0, args
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("aiopgq: "), proc.stderr
        assert "secret" not in proc.stderr
