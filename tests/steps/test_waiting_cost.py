"""10,000 jobs that wait for events cost the claim nothing (they are off jobs_pending_idx),
and an emit finds its waiters by index; sleeping jobs are pending with a future run_at,
as retries and snoozes are (benchmarks/waiting_jobs.py has the figures)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from aiopgq import JobStatus, Queue

WAITING = 10_000


async def _claim_buffers(queue: Queue, conn: asyncpg.Connection) -> tuple[int, set[str]]:
    """Shared buffers the claim touches on an empty queue, and the indexes it uses."""
    statement = queue.sql.claim(several_queues=False, completing=False)
    # EXPLAIN ANALYZE runs the claim: in a transaction rolled back (it claims nothing).
    tr = conn.transaction()
    await tr.start()
    try:
        text = await conn.fetchval(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", "default", 100, "w"
        )
    finally:
        await tr.rollback()
    plan = json.loads(text)[0]["Plan"]
    nodes = list(_nodes(plan))
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0)), indexes


def _nodes(node: dict[str, Any]) -> Any:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


async def test_waiting_jobs_cost_the_claim_nothing(queue: Queue, conn: asyncpg.Connection) -> None:
    schema = f'"{queue.schema}"'
    await conn.execute(f"INSERT INTO {schema}.jobs (task) SELECT 't' FROM generate_series(1, 5)")
    await conn.execute(f"UPDATE {schema}.jobs SET status = 'done', finished_at = now()")
    await conn.execute(f"ANALYZE {schema}.jobs")
    before, _ = await _claim_buffers(queue, conn)
    await conn.execute(
        f"WITH j AS (INSERT INTO {schema}.jobs (task, status) "
        f"SELECT 'ev.wait', 'waiting' FROM generate_series(1, {WAITING}) RETURNING id) "
        f'INSERT INTO {schema}.job_waits (job_id, "position", event) '
        "SELECT id, 0, 'order:' || id FROM j"
    )
    await conn.execute(f"ANALYZE {schema}.jobs")
    after, indexes = await _claim_buffers(queue, conn)
    assert "jobs_pending_idx" in indexes
    # No page per waiting job: 10,000 of them in the index would be ~30 leaf pages and
    # their heap ~60 more. A few pages more than before are the plan's own reads after
    # the new statistics (seen: 2 then 5 in a parallel run), not the waiting jobs.
    assert after <= before + 10, (before, after)

    last = await conn.fetchval(f"SELECT max(job_id) FROM {schema}.job_waits")
    assert await queue.emit_event(f"order:{last}") == 1  # one of 10,000, by its index
    assert (await queue.get_job(last)).status is JobStatus.PENDING
    still = await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE status = 'waiting'")
    assert still == WAITING - 1
    plan = await conn.fetchval(
        f"EXPLAIN (FORMAT JSON) SELECT job_id FROM {schema}.job_waits WHERE event = 'order:1'"
    )
    assert "job_waits_event_idx" in plan
