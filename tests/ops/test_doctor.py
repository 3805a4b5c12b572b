"""`aiopgq doctor`: each problem is created for real and doctor must name it, with the
fix, and exit non-zero; gone, the check says ok again."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import asyncpg

from aiopgq import Queue

from ..support.cli import cli, run_cli
from ..support.helpers import eventually
from ..support.legacy_schema import install_up_to


def doctor(dsn: str, schema: str, *options: str) -> tuple[int, dict[str, Any]]:
    done = run_cli(dsn, schema, "--dsn", dsn, "--schema", schema, "doctor", "--json", *options)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == (1 if report["needs_action"] else 0)
    return done.returncode, {check["name"]: check for check in report["checks"]}


async def run_doctor(dsn: str, schema: str, *options: str) -> tuple[int, dict[str, Any]]:
    return await asyncio.to_thread(doctor, dsn, schema, *options)


async def test_a_fresh_schema_passes_the_checks_of_its_own(dsn: str, queue: Queue) -> None:
    status, checks = await run_doctor(dsn, queue.schema)
    assert list(checks) == [
        "schema",
        "claim_plan",
        "locks",
        "transactions",
        "table",
        "leases",
        "notify",
    ]
    for name in ("schema", "claim_plan", "leases", "notify"):
        assert checks[name]["verdict"] == "ok", checks[name]
    assert "jobs_pending_idx under LockRows" in checks["claim_plan"]["summary"]
    assert all(check["verdict"] in ("ok", "warn", "fail") for check in checks.values())
    text = run_cli(dsn, queue.schema, "--dsn", dsn, "--schema", queue.schema, "doctor")
    assert "[ ok ] claim plan:" in text.stdout
    assert text.returncode == status


async def test_names_an_idle_in_transaction_session_and_the_xmin_it_holds(
    dsn: str, queue: Queue
) -> None:
    idle = await asyncpg.connect(dsn, server_settings={"application_name": "forgot to commit"})
    try:
        await idle.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await idle.fetchval(f'SELECT count(*) FROM "{queue.schema}".jobs')  # holds a snapshot
        xmin = await idle.fetchval(
            "SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        pid = idle.get_server_pid()
        await asyncio.sleep(1.2)
        status, checks = await run_doctor(dsn, queue.schema, "--idle-threshold", "0.5")
        found = checks["transactions"]
        assert status == 1 and found["verdict"] == "warn"
        (line,) = [d for d in found["details"] if d.startswith(f"pid {pid} ")]
        assert "forgot to commit" in line and "idle in transaction for" in line
        assert f"holds back xmin {xmin}" in line
        assert "pg_terminate_backend" in found["fix"] and str(pid) in found["fix"]
        # Past the default threshold (30 s) it is not flagged yet.
        _, checks = await run_doctor(dsn, queue.schema)
        assert not any(d.startswith(f"pid {pid} ") for d in checks["transactions"]["details"])
    finally:
        await idle.close()
    _, checks = await run_doctor(dsn, queue.schema, "--idle-threshold", "0.5")
    assert not any(d.startswith(f"pid {pid} ") for d in checks["transactions"]["details"])


async def test_names_a_blocked_session_and_its_blocker(dsn: str, queue: Queue) -> None:
    job = await queue.enqueue("t", {})
    table = f'"{queue.schema}".jobs'
    holder = await asyncpg.connect(dsn, server_settings={"application_name": "holder"})
    waiter = await asyncpg.connect(dsn, server_settings={"application_name": "waiter"})
    try:
        await holder.execute("BEGIN")
        await holder.execute(f"UPDATE {table} SET priority = 1 WHERE id = $1", job.id)
        blocked = asyncio.create_task(
            waiter.execute(f"UPDATE {table} SET priority = 2 WHERE id = $1", job.id)
        )
        await asyncio.sleep(1.5)  # past the default lock threshold (1 s)
        status, checks = await run_doctor(dsn, queue.schema)
        found = checks["locks"]
        assert status == 1 and found["verdict"] == "fail"
        (fact,) = [f for f in found["facts"] if f["pid"] == waiter.get_server_pid()]
        assert fact["blocker_pid"] == holder.get_server_pid()
        assert fact["blocker_application"] == "holder"
        assert any("waiter" in line for line in found["details"])
        assert str(holder.get_server_pid()) in found["fix"]
        await holder.execute("ROLLBACK")
        await blocked
        _, checks = await run_doctor(dsn, queue.schema)
        assert not any(f["pid"] == waiter.get_server_pid() for f in checks["locks"]["facts"])
    finally:
        await holder.close()
        await waiter.close()


async def test_names_a_dropped_pending_index_and_its_fix_works(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    await conn.execute(f'DROP INDEX "{queue.schema}".jobs_pending_idx')
    status, checks = await run_doctor(dsn, queue.schema)
    found = checks["claim_plan"]
    assert status == 1 and found["verdict"] == "fail"
    assert "jobs_pending_idx" in found["summary"] and "missing" in found["summary"]
    assert any("Seq Scan on jobs  <- wrong" in line for line in found["details"])
    assert found["fix"].startswith("CREATE INDEX CONCURRENTLY jobs_pending_idx")
    await conn.execute(found["fix"])
    _, checks = await run_doctor(dsn, queue.schema)
    assert checks["claim_plan"]["verdict"] == "ok"


async def test_names_the_stale_leases_of_a_killed_worker(
    dsn: str, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    job = await queue.enqueue("app.sleep", {"seconds": 60})
    proc = cli(
        dsn, queue.schema, "worker", "tests.support.app:queue", "--heartbeat-interval", "0.2"
    )
    try:
        await eventually(lambda: conn.fetchval(f"SELECT count(*) = 1 FROM {ledger}"), within=30)
        worker_id = await conn.fetchval(
            f'SELECT locked_by FROM "{queue.schema}".jobs WHERE id = $1', job.id
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    await asyncio.sleep(1.5)
    status, checks = await run_doctor(dsn, queue.schema, "--lease-threshold", "1")
    found = checks["leases"]
    assert status == 1 and found["verdict"] == "fail"
    assert f"1 job held by {worker_id} (job {job.id} first)" in found["details"][0]
    assert "start a worker" in found["fix"]
    _, checks = await run_doctor(dsn, queue.schema)  # 60 s: not yet stale by default
    assert checks["leases"]["verdict"] == "ok"


async def test_names_a_schema_behind_the_code(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    await install_up_to(conn, schema, 8)
    status, checks = await run_doctor(dsn, schema)
    assert status == 1
    assert checks["schema"]["verdict"] == "fail"
    assert "at version 8, this aiopgq needs" in checks["schema"]["summary"]
    assert checks["schema"]["fix"] == "aiopgq migrate"
    assert checks["claim_plan"]["verdict"] == "skip"
    await install_up_to(conn, schema, 19, after=8)
    await Queue(dsn, schema=schema).migrate()
    _, checks = await run_doctor(dsn, schema)
    assert checks["schema"]["verdict"] == "ok"


async def test_names_notify_queue_usage(dsn: str, queue: Queue, conn: asyncpg.Connection) -> None:
    listener = await asyncpg.connect(dsn)
    try:
        await listener.execute(f'LISTEN "{queue.schema}_doctor"')
        await listener.execute("BEGIN")  # a listener in a transaction frees nothing
        await listener.execute("SELECT 1")
        for _ in range(40):
            await conn.execute("SELECT pg_notify($1, $2)", f"{queue.schema}_doctor", "x" * 7000)
        status, checks = await run_doctor(dsn, queue.schema, "--notify-threshold", "0")
        found = checks["notify"]
        assert status == 1 and found["verdict"] == "warn"
        assert found["facts"][0]["usage"] > 0
        assert "LISTENs and stays in a transaction" in found["fix"]
    finally:
        await listener.close()


async def test_names_dead_rows_and_autovacuum_disabled_on_the_table(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    table = f'"{queue.schema}".jobs'
    await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    await conn.execute(f"INSERT INTO {table} (task) SELECT 't' FROM generate_series(1, 12000)")
    await conn.execute(f"UPDATE {table} SET priority = 1")  # 12,000 dead row versions
    # An idle backend sends its table statistics only every 10 s; this one sends them now.
    await conn.execute("SELECT pg_stat_force_next_flush()")

    async def flagged() -> dict[str, Any] | None:
        _, checks = await run_doctor(dsn, queue.schema)
        found: dict[str, Any] = checks["table"]
        return found if "dead row versions, 50% of the table" in found["summary"] else None

    found = await eventually(flagged, within=30, every=0.5)  # statistics arrive within ~1 s
    assert found["verdict"] == "warn"
    assert f"autovacuum is disabled for {table}" in found["summary"]
    assert f"ALTER TABLE {table} RESET (autovacuum_enabled)" in found["fix"]
    assert f"VACUUM (VERBOSE) {table}" in found["fix"]
    assert any("autovacuum_enabled=false" in line for line in found["details"])
