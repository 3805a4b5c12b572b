"""Retention per status: done, failed and cancelled rows each kept for their own window."""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from typing import Any

import asyncpg

from aiopgq import Queue

from ..support.cli import cli
from ..support.helpers import eventually

DAY = 86_400

# (status, age in seconds) of the finished rows every test starts with.
AGES = [
    ("done", 3_600),  # 1 hour
    ("done", 2 * DAY),
    ("done", 30 * DAY),
    ("failed", 120),
    ("failed", 2 * DAY),
    ("failed", 8 * DAY),
    ("cancelled", 120),
    ("cancelled", 2 * DAY),
    ("cancelled", 8 * DAY),
]


async def finished_rows(conn: asyncpg.Connection, schema: str) -> list[tuple[str, int]]:
    """Finished jobs aged as in AGES (each enqueued, then finished in the past by hand:
    nobody waits a week in a test). Returns the rows left, as (status, age)."""
    for status, age in AGES:
        await conn.execute(
            f'INSERT INTO "{schema}".jobs (task, status, payload, finished_at) '
            "VALUES ('aged', $1, $2::text::jsonb, now() - make_interval(secs => $3))",
            status,
            json.dumps({"age": age}),
            age,
        )
    return AGES


async def left(conn: asyncpg.Connection, schema: str) -> list[tuple[str, int]]:
    rows = await conn.fetch(
        f"SELECT status::text, (payload->>'age')::int AS age FROM \"{schema}\".jobs "
        "WHERE task = 'aged' ORDER BY status, age"
    )
    return [(row["status"], row["age"]) for row in rows]


def expected(**windows: float | None) -> list[tuple[str, int]]:
    return sorted(
        (status, age) for status, age in AGES if windows[status] is None or age < windows[status]
    )


async def prune_once(queue: Queue, conn: asyncpg.Connection, **options: Any) -> None:
    """Run a worker until its maintenance made at least one whole pass (rescue, then
    prune) after this call: a pass is seen to start when it rescues a sentinel job
    whose lease expired, so waiting for two such rescues spans one whole pass."""
    table = f'"{queue.schema}".jobs'
    async with queue.worker(queues=["default"], maintenance_interval=0.05, **options):
        for _ in range(2):
            sentinel = await conn.fetchval(
                f"INSERT INTO {table} (task, queue, status, attempts, locked_by, heartbeat_at) "
                "VALUES ('sentinel', 'elsewhere', 'running', 1, 'gone', now() - interval '1 hour') "
                "RETURNING id"
            )

            async def rescued(sentinel: int = sentinel) -> bool:
                status = await conn.fetchval(f"SELECT status FROM {table} WHERE id = $1", sentinel)
                return bool(status == "pending")

            await eventually(rescued)


async def test_default_windows_keep_failed_and_cancelled_a_week(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    await finished_rows(conn, queue.schema)
    await prune_once(queue, conn)
    assert await left(conn, queue.schema) == expected(done=DAY, failed=7 * DAY, cancelled=7 * DAY)
    assert ("failed", 2 * DAY) in await left(conn, queue.schema)  # the reason survives the day


async def test_each_status_has_its_own_window_and_none_keeps(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    await finished_rows(conn, queue.schema)
    await prune_once(
        queue, conn, retention=None, failed_retention=timedelta(minutes=1), cancelled_retention=DAY
    )
    assert await left(conn, queue.schema) == expected(done=None, failed=60, cancelled=DAY)


async def test_everything_kept_when_every_window_is_none(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    await finished_rows(conn, queue.schema)
    await prune_once(queue, conn, retention=None, failed_retention=None, cancelled_retention=None)
    assert await left(conn, queue.schema) == sorted(AGES)


async def test_prune_deletes_in_bounded_batches_past_other_statuses(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    # 2,500 old done rows (three batches of at most 1,000) behind 1,500 kept failures.
    table = f'"{queue.schema}".jobs'
    await conn.execute(
        f"INSERT INTO {table} (task, status, finished_at) SELECT 'f', 'failed', "
        "now() - interval '3 days' - make_interval(secs => g) FROM generate_series(1, 1500) g"
    )
    await conn.execute(
        f"INSERT INTO {table} (task, status, finished_at) SELECT 'd', 'done', "
        "now() - interval '2 days' FROM generate_series(1, 2500)"
    )
    await prune_once(queue, conn)
    counts = dict(
        await conn.fetch(
            f"SELECT status::text, count(*) FROM {table} WHERE task <> 'sentinel' GROUP BY 1"
        )
    )
    assert counts == {"failed": 1500}


async def test_cli_retention_flags(dsn: str, queue: Queue, conn: asyncpg.Connection) -> None:
    await finished_rows(conn, queue.schema)
    proc = cli(
        dsn,
        queue.schema,
        "worker",
        "tests.support.app:queue",
        "--maintenance-interval",
        "0.1",
        "--retention",
        "none",
        "--failed-retention",
        "60",
        "--cancelled-retention",
        "keep",
    )
    want = expected(done=None, failed=60, cancelled=None)
    try:

        async def pruned() -> bool:
            return await left(conn, queue.schema) == want

        await eventually(pruned)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "pruned 3 failed jobs older than 60.0 s" in err  # 2 minutes, 2 days, 8 days
    assert err.count("pruned") == 1  # done and cancelled rows are kept


async def test_prune_reads_the_status_index_also_in_a_generic_plan(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    table = f'"{queue.schema}".jobs'
    await conn.execute(
        f"INSERT INTO {table} (task, status, finished_at) SELECT 't', "
        "(ARRAY['done', 'failed', 'cancelled', 'pending'])[1 + g % 4]::text::"
        f'"{queue.schema}".job_status, now() FROM generate_series(1, 20000) g'
    )
    await conn.execute(f"ANALYZE {table}")
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute(f"PREPARE p AS {queue.sql.prune}")
    plan = await conn.fetchval("EXPLAIN (FORMAT JSON) EXECUTE p('failed', 60, 1000)")
    await conn.execute("DEALLOCATE p")
    assert "jobs_finished_by_status_idx" in plan, plan
    # The jobs table is read through the index; the small side tables the prune also
    # cleans (job_keys, periodic_ticks) may be scanned.
    assert not _seq_scans_of("jobs", json.loads(plan)), plan


def _seq_scans_of(relation: str, node: object) -> list[object]:
    """The Seq Scan nodes on `relation` anywhere in an EXPLAIN (FORMAT JSON) tree."""
    if isinstance(node, list):
        return [found for item in node for found in _seq_scans_of(relation, item)]
    if not isinstance(node, dict):
        return []
    found: list[object] = []
    if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == relation:
        found.append(node)
    for value in node.values():
        if isinstance(value, (list, dict)):
            found += _seq_scans_of(relation, value)
    return found
