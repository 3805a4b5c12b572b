"""What suspended jobs (durable steps: ctx.wait_event, ctx.sleep) cost an idle queue's claim.

`python -m benchmarks.waiting_jobs [--jobs 10000] [--dsn DSN]` installs a fresh schema,
then times the worker's claim (the one-queue dequeue, LIMIT 100, rolled back) on a queue
with nothing runnable, 300 times each, with: no other jobs; N jobs waiting for events
(status 'waiting' and a job_waits row: off jobs_pending_idx); N jobs that ctx.sleep a day
(through a worker: waiting, with timers); N pending jobs with run_at tomorrow (as retries
and snoozes wait, and keyed sleepers). It prints the median and p90 per claim and
the shared buffers one claim touches, then the median time of an emit_event that wakes
one of the N waiters (its own commit included). Results: benchmarks/results/waiting_jobs.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from aiopgq import JobContext, Queue

from .calls import database

RUNS = 300


async def _claim(conn: asyncpg.Connection, statement: str) -> tuple[float, int]:
    """One claim's seconds and shared buffers (EXPLAIN ANALYZE, rolled back)."""
    tr = conn.transaction()
    await tr.start()
    try:
        started = time.perf_counter()
        await conn.fetch(statement, "default", 100, "bench")
        seconds = time.perf_counter() - started
        text = await conn.fetchval(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", "default", 100, "bench"
        )
    finally:
        await tr.rollback()
    plan = json.loads(text)[0]["Plan"]
    return seconds, int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


async def _case(conn: asyncpg.Connection, statement: str, label: str) -> dict[str, Any]:
    times, buffers = [], 0
    for _ in range(RUNS):
        seconds, buffers = await _claim(conn, statement)
        times.append(seconds)
    times.sort()
    return {
        "case": label,
        "median_ms": round(statistics.median(times) * 1000, 3),
        "p90_ms": round(times[int(len(times) * 0.9)] * 1000, 3),
        "buffers": buffers,
    }


async def measure(dsn: str, jobs: int) -> dict[str, Any]:
    schema = f"waiting_{uuid.uuid4().hex[:10]}"
    queue = Queue(dsn, schema=schema)
    await queue.migrate()
    table = f'"{schema}".jobs'
    conn = await asyncpg.connect(dsn)
    try:
        statement = queue.sql.claim(several_queues=False, completing=False)
        server = await conn.fetchval("SHOW server_version")
        settings = {
            name: await conn.fetchval(f"SHOW {name}") for name in ("fsync", "synchronous_commit")
        }
        cases = [await _case(conn, statement, "empty queue")]
        await conn.execute(
            f"WITH j AS (INSERT INTO {table} (task, status) SELECT 'w', 'waiting' "
            f"FROM generate_series(1, {jobs}) RETURNING id) "
            f'INSERT INTO "{schema}".job_waits (job_id, "position", event) '
            "SELECT id, 0, 'order:' || id FROM j"
        )
        await conn.execute(f"VACUUM ANALYZE {table}")
        cases.append(await _case(conn, statement, f"{jobs} waiting for events"))
        # One emit each to warm the function up, then the median of 50 emits that each
        # wake one of the N waiters.
        ids = [r[0] for r in await conn.fetch(f'SELECT job_id FROM "{schema}".job_waits LIMIT 51')]
        emits = []
        for job_id in ids:
            started = time.perf_counter()
            woken = await conn.fetchval(f'SELECT "{schema}".emit_event($1)', f"order:{job_id}")
            emits.append(time.perf_counter() - started)
            assert woken == 1
        emit_ms = round(statistics.median(emits[1:]) * 1000, 3)
        await conn.execute(f"DELETE FROM {table}")

        # N jobs that ctx.sleep a day, through a worker: they wait with timers (0028).
        @queue.task(name="bench.sleep")
        async def sleeper(ctx: JobContext) -> None:
            await ctx.sleep(86400)

        async with queue:
            await queue.enqueue_many("bench.sleep", [{}] * jobs)
            await queue.worker(concurrency=100).run(burst=True)
        statuses = dict(await conn.fetch(f"SELECT status::text, count(*) FROM {table} GROUP BY 1"))
        assert statuses == {"waiting": jobs}, statuses
        await conn.execute(f"VACUUM ANALYZE {table}")
        cases.append(await _case(conn, statement, f"{jobs} sleeping a day (ctx.sleep)"))
        # What a far sleeper costs when it is a pending row instead (a retry or a snooze
        # a day ahead, and a keyed sleeper: only pending and running jobs hold keys).
        await conn.execute(f"DELETE FROM {table}")
        await conn.execute(
            f"INSERT INTO {table} (task, run_at) SELECT 's', now() + interval '1 day' "
            f"FROM generate_series(1, {jobs})"
        )
        await conn.execute(f"VACUUM ANALYZE {table}")
        cases.append(await _case(conn, statement, f"{jobs} pending, run_at tomorrow"))
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
    return {
        "postgresql": server,
        **settings,
        "jobs": jobs,
        "claims": cases,
        "emit_one_of_n_ms": emit_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.waiting_jobs")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--dsn")
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).parent / "results")
    opts = parser.parse_args()
    with database(opts.dsn) as dsn:
        result = asyncio.run(measure(dsn, opts.jobs))
    print(f"PostgreSQL {result['postgresql']}, fsync {result['fsync']}, "
          f"synchronous_commit {result['synchronous_commit']}")  # fmt: skip
    print(f"{'claim on an idle queue with':<44} {'median ms':>10} {'p90 ms':>8} {'buffers':>8}")
    for case in result["claims"]:
        print(
            f"{case['case']:<44} {case['median_ms']:>10.3f} {case['p90_ms']:>8.3f} "
            f"{case['buffers']:>8}"
        )
    print(f"emit_event waking 1 of {result['jobs']} waiters: {result['emit_one_of_n_ms']} ms")
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    (opts.results_dir / "waiting_jobs.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
