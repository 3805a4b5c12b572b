"""At scale: the claim, a drain and the retention prune next to 10 million finished jobs.

    python -m benchmarks.large_table [--finished 10000000] [--pending 1000000]
        [--layout plain,partitioned] [--dsn URL]

In a database of its own (`--database`, default scale_bench, created and dropped), one
case after another, each on a fresh schema dropped after it:

- empty: no finished rows, the `--pending` jobs only (what the others are compared to);
- plain: the `--finished` rows in `jobs`, as the plain layout keeps them until retention;
- partitioned: `enable_partitioning(archive_after=300, partition_width=3600)` first, then
  the finished rows where that layout has them: those finished in the last
  `archive_after` seconds in `jobs`, the rest in `jobs_archive` (COPY into the
  partitioned parent routes each row to its status's partition of its finish time).

Every row goes in by COPY (asyncpg's `copy_to_table`, text format, generated in chunks),
the jobs table's triggers firing as for any insert. Finished rows are 99% done and 1%
failed, their finish times spread evenly over the `--span` seconds before the load;
then the pending rows, runnable now. Then ANALYZE (an old table has statistics) and a
CHECKPOINT, and no VACUUM: autovacuum does what it does meanwhile, and is sampled.

Per case:
1. claims: the worker's own claim statement (`Queue.sql.dequeue`, the statement the
   fetcher sends with no outcome riding along) with its real parameters (queue, batch
   `--batch`, a worker id), `--claims` times per case in `--rounds` rounds alternating
   the cases, each committed; then as many with synchronous_commit off in the claiming
   session; p50/p99 client-side. The claimed jobs are then marked done.
2. drain: one `aiopgq worker` process (`--concurrency`, retention pushed out of the way)
   runs `--drain` of the pending jobs, in `--drain-rounds` rounds alternating the cases,
   each after a CHECKPOINT; jobs/s from its first to its last finish.
3. vacuum: the VACUUM autovacuum would run (see `vacuum`), with claims meanwhile.
4. prune: the first maintenance pass of a worker (`Queue.worker`, an idle queue) timed,
   from the worker's start, with the retention so that the oldest
   `--prune-fraction` of the finished rows is expired in the plain layout (deleted in
   1,000-row batches); in the partitioned one the retention that expires the first
   partition (everything that finished before the current partition began: dropped).
   Then the vacuum again.
Every second, in the background: pg_stat_user_tables of the schema (n_dead_tup,
autovacuum_count, last_autovacuum) and pg_stat_progress_vacuum of the database, with the
CPU seconds of each autovacuum process (from /proc: the server runs on this host).

Prints a table and writes benchmarks/results/large_table.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg

from aiopgq import Queue
from benchmarks.config import resolve_dsn
from benchmarks.database import create_database, drop_database, server_info

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
APP = "benchmarks.large_table_app:queue"
TASK = "large.noop"
ARCHIVE_AFTER = 300
PARTITION_WIDTH = 3600
CHUNK = 20_000  # rows per COPY data chunk
TICK = os.sysconf("SC_CLK_TCK")
LOG = Path("/tmp/large_table_worker.log")

# jobs_archive has the columns of jobs but not their defaults: every NOT NULL one is given.
COLUMNS = ["id", "queue", "task", "payload", "status", "priority", "attempts", "max_attempts",
           "run_at", "created_at", "enqueued_by", "locked_at", "locked_by", "finished_at",
           "last_error"]  # fmt: skip

TABLES = """
SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count,
       last_autovacuum, last_autoanalyze
FROM pg_stat_user_tables WHERE schemaname = $1
"""
VACUUMS = """
SELECT p.pid, p.relid::regclass::text AS rel, p.phase, p.heap_blks_total, p.heap_blks_scanned,
       a.backend_type
FROM pg_stat_progress_vacuum p JOIN pg_stat_activity a USING (pid)
WHERE p.datname = current_database() AND p.relid IN (
    SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1)
"""


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f+00")


def finished_lines(first_id: int, count: int, start: float, end: float) -> AsyncIterator[bytes]:
    """`count` finished rows, ids from `first_id`, finish times evenly from `start` to
    `end` (epoch seconds), in COPY text format, a chunk at a time. One row in 100 failed."""

    async def chunks() -> AsyncIterator[bytes]:
        step = (end - start) / max(1, count)
        for lo in range(0, count, CHUNK):
            lines = []
            for i in range(lo, min(count, lo + CHUNK)):
                if i % 100 == 0 or i == lo:
                    finished = start + i * step
                    fin = stamp(finished)
                    began = stamp(finished - 0.05)
                job = first_id + i
                if i % 100 == 99:
                    tail = (
                        f"failed\t0\t5\t5\t{began}\t{began}\tpostgres\t{began}\tw-large\t"
                        f"{fin}\tValueError: job {job}\n"
                    )
                else:
                    tail = (
                        f"done\t0\t1\t5\t{began}\t{began}\tpostgres\t{began}\tw-large\t{fin}\t\\N\n"
                    )
                lines.append(f'{job}\tdefault\t{TASK}\t{{"i": {job}}}\t{tail}')
            yield "".join(lines).encode()
            await asyncio.sleep(0)

    return chunks()


def pending_lines(first_id: int, count: int, at: float) -> AsyncIterator[bytes]:
    """`count` pending rows, runnable since `at`, in COPY text format."""

    async def chunks() -> AsyncIterator[bytes]:
        ts = stamp(at)
        for lo in range(0, count, CHUNK):
            yield "".join(
                f'{first_id + i}\tdefault\t{TASK}\t{{"i": {first_id + i}}}\tpending\t0\t'
                f"0\t5\t{ts}\t{ts}\tpostgres\t\\N\t\\N\t\\N\t\\N\n"
                for i in range(lo, min(count, lo + CHUNK))
            ).encode()
            await asyncio.sleep(0)

    return chunks()


async def copy(conn: asyncpg.Connection, schema: str, table: str, source: Any) -> None:
    await conn.copy_to_table(table, source=source, schema_name=schema, columns=COLUMNS)


def proc_cpu(pid: int) -> float | None:
    """utime + stime of a local process, in seconds (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class Sampler:
    """Autovacuum activity every second, labelled with the phase running."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn, self.schema = dsn, schema
        self.phase = "load"
        self.samples: list[dict[str, Any]] = []
        self.vacuum_cpu: dict[int, list[Any]] = {}  # pid -> [rel, first cpu, last cpu, phases]
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self.conn = await asyncpg.connect(self.dsn)
        self.start = time.monotonic()
        self.task = asyncio.create_task(self.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.conn.close()

    async def run(self) -> None:
        while True:
            tables = await self.conn.fetch(TABLES, self.schema)
            vacuums = await self.conn.fetch(VACUUMS, self.schema)
            jobs = next((dict(r) for r in tables if r["relname"] == "jobs"), {})
            archive = [r for r in tables if r["relname"].startswith("jobs_archive")]
            running = []
            for v in vacuums:
                cpu = proc_cpu(v["pid"])
                entry = self.vacuum_cpu.setdefault(v["pid"], [v["rel"], cpu, cpu, set()])
                if cpu is not None:
                    entry[2] = cpu
                entry[3].add(self.phase)
                blocks = f"{v['heap_blks_scanned']}/{v['heap_blks_total']} blocks"
                running.append(f"{v['rel']} ({v['backend_type']}, {v['phase']}, {blocks})")
            self.samples.append({
                "t": round(time.monotonic() - self.start, 1),
                "phase": self.phase,
                "jobs_live": jobs.get("n_live_tup"),
                "jobs_dead": jobs.get("n_dead_tup"),
                "jobs_autovacuums": jobs.get("autovacuum_count"),
                "jobs_autoanalyzes": jobs.get("autoanalyze_count"),
                "jobs_last_autovacuum": jobs.get("last_autovacuum"),
                "archive_dead": sum(r["n_dead_tup"] for r in archive),
                "archive_autovacuums": sum(r["autovacuum_count"] for r in archive),
                "vacuums": running,
            })  # fmt: skip
            await asyncio.sleep(1.0)

    def summary(self) -> dict[str, Any]:
        """Per phase: seconds with a vacuum running, autovacuums of jobs, dead tuples."""
        out: dict[str, Any] = {}
        for phase in dict.fromkeys(s["phase"] for s in self.samples):
            rows = [s for s in self.samples if s["phase"] == phase]
            counts = [s["jobs_autovacuums"] for s in rows if s["jobs_autovacuums"] is not None]
            out[phase] = {
                "seconds": len(rows),
                "seconds_vacuuming": sum(1 for s in rows if s["vacuums"]),
                "jobs_autovacuums": (counts[-1] - counts[0]) if counts else 0,
                "jobs_dead_max": max((s["jobs_dead"] or 0) for s in rows),
                "vacuumed": sorted({v.split(" (")[0] for s in rows for v in s["vacuums"]}),
            }
        out["autovacuum_cpu_s"] = [
            {
                "pid": pid,
                "rel": rel,
                "cpu_s": round((last or 0) - (first or 0), 2),
                "phases": sorted(phases),
            }
            for pid, (rel, first, last, phases) in self.vacuum_cpu.items()
        ]
        return out


async def load(
    conn: asyncpg.Connection, queue: Queue, case: str, args: argparse.Namespace
) -> dict[str, Any]:
    """The case's rows, by COPY; returns how long each part took."""
    schema = queue.schema
    now = time.time()
    finished = 0 if case == "empty" else args.finished
    end = now - 60  # the newest finished a minute ago
    start = end - args.span
    timings: dict[str, Any] = {"finished_rows": finished}
    began = time.monotonic()
    if case == "partitioned" and finished:
        # Rows finished within archive_after are still in jobs; the rest were moved.
        recent = min(finished, int(finished * ARCHIVE_AFTER / args.span))
        old = finished - recent
        split = start + old * (args.span / finished)
        await copy(conn, schema, "jobs_archive", finished_lines(1, old, start, split))
        await copy(conn, schema, "jobs", finished_lines(1 + old, recent, split, end))
        timings["in_archive"], timings["in_jobs"] = old, recent
    elif finished:
        await copy(conn, schema, "jobs", finished_lines(1, finished, start, end))
        timings["in_jobs"] = finished
    timings["copy_finished_s"] = round(time.monotonic() - began, 1)
    began = time.monotonic()
    await copy(conn, schema, "jobs", pending_lines(1 + finished, args.pending, now - 1))
    timings["copy_pending_s"] = round(time.monotonic() - began, 1)
    await conn.execute(f"SELECT setval('{schema}.jobs_id_seq', {finished + args.pending + 1})")
    began = time.monotonic()
    await conn.execute(f"ANALYZE {schema}.jobs")
    if case == "partitioned":
        await conn.execute(f"ANALYZE {schema}.jobs_archive")
    timings["analyze_s"] = round(time.monotonic() - began, 1)
    await conn.execute("CHECKPOINT")
    timings["oldest_finished"] = stamp(start)
    return timings


async def claims(
    dsn: str, queue: Queue, args: argparse.Namespace, count: int, flush: bool = True
) -> list[float]:
    """The worker's claim statement, committed, `count` times; milliseconds each. With
    `flush` off, the session's synchronous_commit is off: the statement's own time,
    without the wait for the WAL flush of its commit (the disk is shared)."""
    conn = await asyncpg.connect(dsn)
    if not flush:
        await conn.execute("SET synchronous_commit = off")
    statement = queue.sql.dequeue
    times = []
    try:
        for _ in range(20):  # warm: prepared statement, caches
            await conn.fetch(statement, "default", args.batch, "large-claims")
        for _ in range(count):
            began = time.perf_counter()
            rows = await conn.fetch(statement, "default", args.batch, "large-claims")
            times.append((time.perf_counter() - began) * 1000)
            if len(rows) != args.batch:
                raise SystemExit(
                    f"a claim took {len(rows)} jobs, not {args.batch}: too few pending"
                )
    finally:
        await conn.close()
    return times


async def finish_claimed(dsn: str, schema: str) -> int:
    """Mark the jobs the timed claims took done, as the worker's completion would, so no
    maintenance pass later rescues them as the jobs of a lost worker."""
    conn = await asyncpg.connect(dsn)
    try:
        status = await conn.execute(
            f"UPDATE {schema}.jobs SET status = 'done', finished_at = now(), heartbeat_at = NULL"
            f" WHERE status = 'running' AND locked_by IN ('large-claims', 'large-vacuum')"
        )
    finally:
        await conn.close()
    return int(status.split()[-1])


async def drain(dsn: str, queue: Queue, args: argparse.Namespace, jobs: int) -> dict[str, Any]:
    """One `aiopgq worker` process runs `jobs` jobs; jobs/s between first and last finish."""
    schema = queue.schema
    conn = await asyncpg.connect(dsn)
    await conn.execute("CHECKPOINT")  # not one in the middle of the drain
    t0 = await conn.fetchval("SELECT now()")
    count = f"""SELECT count(*), min(finished_at), max(finished_at) FROM {schema}.jobs
                WHERE status = 'done' AND finished_at >= $1"""
    env = {**os.environ, "AIOPGQ_DSN": dsn, "LARGE_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
    keep = str(365 * 86400)  # the prune is measured on its own
    log = LOG.open("ab")  # noqa: ASYNC230 - the worker's output, kept for a failed run
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aiopgq", "worker", APP, "--schema", schema),
        *("--concurrency", str(args.concurrency), "--retention", keep),
        *("--failed-retention", keep, "--cancelled-retention", keep),
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    began = time.monotonic()
    try:
        while True:
            await asyncio.sleep(0.5)
            row = await conn.fetchrow(count, t0)
            assert row is not None
            done, first, last = row
            if done >= jobs:
                break
            if worker.returncode is not None:
                raise SystemExit(f"the drain's worker exited ({worker.returncode}); see {LOG}")
            if time.monotonic() - began > 30 + jobs / 100:
                raise SystemExit(f"the drain made only {done} jobs in time; see {LOG}")
        cpu = proc_cpu(worker.pid)
    finally:
        if worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
            await asyncio.wait_for(worker.wait(), 60)
        log.close()
        await conn.close()
    seconds = (last - first).total_seconds()
    return {"jobs": done, "seconds": round(seconds, 2), "jobs_per_s": round(done / seconds),
            "worker_cpu_s": cpu}  # fmt: skip


async def prune(dsn: str, queue: Queue, case: str, args: argparse.Namespace) -> dict[str, Any]:
    """One maintenance pass with a retention that expires part of the finished rows."""
    conn = await asyncpg.connect(dsn)
    schema = queue.schema
    try:
        oldest = (
            await conn.fetchval(
                f"SELECT min(finished_at) FROM (SELECT finished_at FROM {schema}.jobs"
                f" WHERE status IN ('done','failed','cancelled') UNION ALL"
                f" SELECT finished_at FROM {schema}.jobs_archive) f"
            )
            if case != "empty"
            else None
        )
        if oldest is None:
            return {"retention_s": None, "removed": 0, "seconds": 0.0}
        now = await conn.fetchval("SELECT now()")
        if case == "partitioned":
            first_end = await conn.fetchval(
                f"SELECT min(to_at) FROM {schema}.archive_partitions WHERE status = 'done'"
            )
            seconds = (now - first_end).total_seconds() - 30  # drops the first partition
        else:
            seconds = (now - oldest).total_seconds() - args.prune_fraction * args.span
        before = await conn.fetchval(
            f"SELECT (SELECT count(*) FROM {schema}.jobs)"
            f" + (SELECT count(*) FROM {schema}.jobs_archive)"
        )
    finally:
        await conn.close()
    # What the pass must remove, by a cutoff fixed now: measured against now() at each
    # look, rows that expired since the pass ended (a day's rows spread evenly: over
    # 100 a second) kept the wait going until the next pass, an hour on.
    cutoff = (now - timedelta(seconds=seconds)).isoformat()
    if case == "partitioned":
        left = (
            f"SELECT EXISTS (SELECT FROM {schema}.archive_partitions"
            f" WHERE to_at <= '{cutoff}'::timestamptz)"
        )
    else:
        left = (
            f"SELECT EXISTS (SELECT FROM {schema}.jobs WHERE status IN ('done', 'failed')"
            f" AND finished_at < '{cutoff}'::timestamptz)"
        )
    elapsed = await maintenance(dsn, queue.schema, seconds, left)
    conn = await asyncpg.connect(dsn)
    try:
        after = await conn.fetchval(
            f"SELECT (SELECT count(*) FROM {schema}.jobs)"
            f" + (SELECT count(*) FROM {schema}.jobs_archive)"
        )
    finally:
        await conn.close()
    return {"retention_s": round(seconds), "removed": before - after, "seconds": round(elapsed, 2)}


async def maintenance(dsn: str, schema: str, retention: float, left: str) -> float:
    """Seconds from starting a worker (`Queue.worker`: no job of its idle queue to run,
    retention `retention` for every finished status) until the query `left` says its
    maintenance is done; the worker's first pass runs as it starts."""
    queue = Queue(dsn, schema=schema, max_pool_size=2)
    await queue.open()
    conn = await asyncpg.connect(dsn)
    try:
        worker = queue.worker(
            queues=["large-idle"],
            concurrency=1,
            maintenance_interval=3600,
            retention=retention,
            failed_retention=retention,
            cancelled_retention=retention,
        )
        began = time.monotonic()
        runner = asyncio.create_task(worker.run())
        try:
            while await conn.fetchval(left):
                if runner.done():
                    runner.result()
                    raise SystemExit("the maintenance worker stopped before its pass was done")
                if time.monotonic() - began > 1800:
                    raise SystemExit("the maintenance pass took over 30 minutes")
                await asyncio.sleep(0.1)
            elapsed = time.monotonic() - began
        finally:
            worker.stop()
            await runner
    finally:
        await conn.close()
        await queue.close()
    return elapsed


async def catch_up(dsn: str, queue: Queue) -> dict[str, Any]:
    """Maintenance passes until the finished rows in jobs that are past archive_after are
    moved (minutes went by while loading): what a worker's maintenance does every few
    seconds, so the claims and drains meet the layout in its steady state."""
    schema = queue.schema
    conn = await asyncpg.connect(dsn)
    try:
        moved = await conn.fetchval(
            f"SELECT count(*) FROM {schema}.jobs WHERE status IN ('done', 'failed')"
            f" AND finished_at < now() - make_interval(secs => {ARCHIVE_AFTER})"
        )
    finally:
        await conn.close()
    # Passes of 100 batches per status each: one worker start runs the first only, so
    # the rest (if any) come at the next interval; a large catch-up waits for them.
    left = (
        f"SELECT EXISTS (SELECT FROM {schema}.jobs WHERE status IN ('done', 'failed')"
        f" AND finished_at < now() - make_interval(secs => {ARCHIVE_AFTER + 30}))"
    )
    seconds = await maintenance(dsn, schema, 365 * 86400.0, left)
    return {"moved": moved, "seconds": round(seconds, 2)}


async def vacuum(dsn: str, queue: Queue, case: str, args: argparse.Namespace) -> dict[str, Any]:
    """VACUUM the tables autovacuum would, throttled as it would be, while claims go on.

    The jobs table's autovacuum_vacuum_cost_delay is 1 ms (baseline_*.sql), the archive
    partitions' the server default; cost limit 200 (autovacuum's default, -1). One claim
    every 10 ms meanwhile, timed as in `claims`."""
    schema = queue.schema
    conn = await asyncpg.connect(dsn)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    default_delay = await conn.fetchval("SHOW autovacuum_vacuum_cost_delay")
    stop = asyncio.Event()
    during: list[float] = []

    async def claim_meanwhile() -> None:
        claimer = await asyncpg.connect(dsn)
        try:
            while not stop.is_set():
                began = time.perf_counter()
                rows = await claimer.fetch(queue.sql.dequeue, "default", args.batch, "large-vacuum")
                during.append((time.perf_counter() - began) * 1000)
                if len(rows) < args.batch:
                    return
                await asyncio.sleep(0.01)
        finally:
            await claimer.close()

    tables = [("jobs", "1ms")] + (
        [("jobs_archive", default_delay)] if case == "partitioned" else []
    )
    out: dict[str, Any] = {}
    claimer = asyncio.create_task(claim_meanwhile())
    try:
        for table, delay in tables:
            await conn.execute(f"SET vacuum_cost_delay = '{delay}'; SET vacuum_cost_limit = 200")
            cpu0, began = proc_cpu(pid), time.monotonic()
            await conn.execute(f"VACUUM {schema}.{table}")
            cpu1 = proc_cpu(pid)
            out[table] = {
                "seconds": round(time.monotonic() - began, 1),
                "cpu_s": None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2),
                "cost_delay": delay,
            }
    finally:
        stop.set()
        await claimer
        await conn.close()
    out["claimed_then_finished"] = await finish_claimed(dsn, schema)
    if len(during) >= 20:
        out["claims_meanwhile_ms"] = {
            "n": len(during),
            "p50": statistics.median(during),
            "p99": statistics.quantiles(during, n=100)[98],
        }
    return out


class Case:
    """One schema: its queue, its sampler, its figures."""

    def __init__(self, dsn: str, name: str) -> None:
        self.dsn, self.name = dsn, name
        self.schema = f"large_{name}"
        self.queue = Queue(dsn, schema=self.schema, max_pool_size=2)
        self.sampler = Sampler(dsn, self.schema)
        self.result: dict[str, Any] = {"case": name}
        self.claim_times: list[float] = []
        self.claim_times_no_flush: list[float] = []

    async def setup(self, admin: asyncpg.Connection, args: argparse.Namespace) -> None:
        await admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        await self.queue.migrate()
        if self.name == "partitioned":
            async with self.queue:
                await self.queue.enable_partitioning(
                    archive_after=ARCHIVE_AFTER, partition_width=PARTITION_WIDTH
                )
        await self.sampler.__aenter__()
        self.result["load"] = await load(admin, self.queue, self.name, args)
        self.report("loaded", self.result["load"])
        if self.name == "partitioned":
            self.result["archive_catch_up"] = await catch_up(self.dsn, self.queue)
            self.report("archive catch-up", self.result["archive_catch_up"])

    def report(self, what: str, figures: Any) -> None:
        print(f"{self.name}: {what} {json.dumps(figures, default=str)}", flush=True)

    async def rest(self, admin: asyncpg.Connection, args: argparse.Namespace) -> None:
        """Vacuum, prune, vacuum again: one case at a time."""
        dsn, queue, name, sampler = self.dsn, self.queue, self.name, self.sampler
        steps: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
            ("vacuum", partial(vacuum, dsn, queue, name, args)),
            ("prune", partial(prune, dsn, queue, name, args)),
            ("vacuum_after_prune", partial(vacuum, dsn, queue, name, args)),
        ]
        for phase, step in steps:
            sampler.phase = phase
            self.result[phase] = await step()
            self.report(phase, self.result[phase])
        sampler.phase = "after"
        await asyncio.sleep(args.after)
        self.result["sizes"] = dict(await admin.fetchrow(  # type: ignore[arg-type]
            f"SELECT pg_total_relation_size('{self.schema}.jobs') AS jobs_bytes,"
            f" (SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint"
            f"  FROM pg_partition_tree('{self.schema}.jobs_archive')) AS archive_bytes"
        ))  # fmt: skip

    async def close(self, admin: asyncpg.Connection) -> None:
        await self.sampler.__aexit__()
        self.result["autovacuum"] = self.sampler.summary()
        self.result["samples"] = self.sampler.samples
        await admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")


async def interleaved_claims(cases: list[Case], args: argparse.Namespace) -> None:
    """`--claims` per case, in `--rounds` rounds that take the cases in turn (rotated), so
    the host's noise falls on all of them alike."""
    per_round = max(1, args.claims // args.rounds)
    for case in cases:
        case.sampler.phase = "claims"
    for round_no in range(args.rounds):
        order = cases[round_no % len(cases) :] + cases[: round_no % len(cases)]
        for case in order:
            case.claim_times += await claims(case.dsn, case.queue, args, per_round)
            case.claim_times_no_flush += await claims(
                case.dsn, case.queue, args, per_round, flush=False
            )
    for case in cases:
        for key, times in (
            ("claim_ms", case.claim_times),
            ("claim_no_flush_ms", case.claim_times_no_flush),
        ):
            case.result[key] = {
                "n": len(times),
                "p50": statistics.median(times),
                "p99": statistics.quantiles(times, n=100)[98],
                "max": max(times),
            }
            case.report(key, case.result[key])
        case.result["claims_raw_ms"] = [round(t, 3) for t in case.claim_times]
        case.result["claimed_then_finished"] = await finish_claimed(case.dsn, case.schema)


async def interleaved_drains(cases: list[Case], args: argparse.Namespace) -> None:
    """`--drain` jobs per case, in `--drain-rounds` drains that take the cases in turn."""
    per_round = max(1, args.drain // args.drain_rounds)
    drains: dict[str, list[dict[str, Any]]] = {case.name: [] for case in cases}
    for round_no in range(args.drain_rounds):
        order = cases[round_no % len(cases) :] + cases[: round_no % len(cases)]
        for case in order:
            case.sampler.phase = "drain"
            out = await drain(case.dsn, case.queue, args, per_round)
            case.report(f"drain {round_no + 1}", out)
            drains[case.name].append(out)
            case.sampler.phase = "between drains"
    for case in cases:
        runs = drains[case.name]
        jobs = sum(r["jobs"] for r in runs)
        seconds = sum(r["seconds"] for r in runs)
        case.result["drain"] = {
            "jobs": jobs,
            "seconds": round(seconds, 2),
            "jobs_per_s": round(jobs / seconds),
            "rounds_jobs_per_s": [r["jobs_per_s"] for r in runs],
            "worker_cpu_s": round(sum(r["worker_cpu_s"] or 0 for r in runs), 2),
        }


def _vacuum_cell(v: dict[str, Any]) -> str:
    tables = [t for k, t in v.items() if k not in ("claims_meanwhile_ms", "claimed_then_finished")]
    seconds = sum(t["seconds"] for t in tables)
    cpu = sum(t["cpu_s"] or 0 for t in tables)
    return f"{seconds:.1f}/{cpu:.1f}"


def _meanwhile_cell(v: dict[str, Any]) -> str:
    c = v.get("claims_meanwhile_ms")
    return "-" if c is None else f"{c['p50']:.2f}/{c['p99']:.2f}"


def render(results: list[dict[str, Any]]) -> str:
    empty = next((r for r in results if r["case"] == "empty"), None)
    head = (f"{'case':<12} {'finished':>10} {'claim p50':>9} {'p99':>7} {'x empty':>9} "
            f"{'no flush p50/p99':>16} {'x empty':>9} "
            f"{'drain/s':>8} {'x empty':>7} {'vacuum s/cpu':>12} {'claims meanwhile':>16} "
            f"{'prune rows':>10} {'s':>6} {'vacuum after':>12} {'jobs MB':>8} "
            f"{'archive MB':>10}")  # fmt: skip
    lines = [head]
    mb = 1024 * 1024
    for r in results:
        c, d, p, n = r["claim_ms"], r["drain"], r["prune"], r["claim_no_flush_ms"]
        if empty is not None:
            e = empty["claim_ms"]
            ratio = f"{c['p50'] / e['p50']:.2f}/{c['p99'] / e['p99']:.2f}"
            en = empty["claim_no_flush_ms"]
            ratio_nf = f"{n['p50'] / en['p50']:.2f}/{n['p99'] / en['p99']:.2f}"
            drain_ratio = f"{d['jobs_per_s'] / empty['drain']['jobs_per_s']:.2f}"
        else:
            ratio = ratio_nf = drain_ratio = "-"
        lines.append(
            f"{r['case']:<12} {r['load']['finished_rows']:>10,} {c['p50']:>7.2f}ms "
            f"{c['p99']:>5.2f}ms {ratio:>9} {n['p50']:>7.2f}/{n['p99']:<5.2f}ms {ratio_nf:>9} "
            f"{d['jobs_per_s']:>8,} {drain_ratio:>7} "
            f"{_vacuum_cell(r['vacuum']):>12} {_meanwhile_cell(r['vacuum']):>16} "
            f"{p['removed']:>10,} {p['seconds']:>6.1f} "
            f"{_vacuum_cell(r['vacuum_after_prune']):>12} "
            f"{r['sizes']['jobs_bytes'] / mb:>8.0f} {r['sizes']['archive_bytes'] / mb:>10.0f}"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a = parser.add_argument
    a("--dsn", help="server DSN (default: AIOPGQ_DSN, DATABASE_URL, then the local test server)")
    a("--database", default="scale_bench", help="database made and dropped (default scale_bench)")
    a("--keep-db", action="store_true", help="keep the database at the end")
    a("--finished", type=int, default=10_000_000, help="finished rows (default 10,000,000)")
    a("--pending", type=int, default=1_000_000, help="pending rows (default 1,000,000)")
    a("--layout", default="plain,partitioned", help="layouts after the empty case")
    a("--span", type=float, default=86400, help="seconds the finish times spread over (a day)")
    a("--claims", type=int, default=2000, help="claims timed per case (default 2000)")
    a("--rounds", type=int, default=4, help="rounds the claims of the cases alternate in (4)")
    a("--batch", type=int, default=10, help="jobs per claim (default 10, the worker's default)")
    a("--drain", type=int, default=100_000, help="jobs the drains run (default 100,000)")
    a("--drain-rounds", type=int, default=2, help="drains the cases alternate in (2)")
    a("--concurrency", type=int, default=100, help="the drain worker's concurrency (100)")
    a("--prune-fraction", type=float, default=0.05, help="share the plain prune expires (0.05)")
    a("--after", type=float, default=5, help="seconds sampled after the prune (default 5)")
    args = parser.parse_args()
    layouts = [x.strip() for x in args.layout.split(",") if x.strip()]
    if set(layouts) - {"plain", "partitioned"}:
        raise SystemExit(f"--layout takes plain and/or partitioned, got {args.layout!r}")
    if args.pending < 3 * args.claims * args.batch + 20 * args.rounds * args.batch + args.drain:
        raise SystemExit("--pending must cover the claims (claims x batch) and the drain")
    server = resolve_dsn(args.dsn)
    info = await server_info(server)
    print(info.short, flush=True)
    autovacuum = info.settings["autovacuum"]
    dsn = await create_database(server, args.database)
    cases = [Case(dsn, name) for name in ["empty", *layouts]]
    admin = await asyncpg.connect(dsn)
    try:
        for case in cases:
            await case.setup(admin, args)
        await interleaved_claims(cases, args)
        await interleaved_drains(cases, args)
        for case in cases:
            started = time.monotonic()
            await case.rest(admin, args)
            print(f"{case.name}: took {time.monotonic() - started:.0f} s\n", flush=True)
        for case in cases:
            await case.close(admin)
    finally:
        await admin.close()
        if not args.keep_db:
            await drop_database(server, args.database)
    results = [case.result for case in cases]
    table = render(results)
    print(f"\n{info.short}\nclaims of {args.batch}, {args.claims} per case (no flush: the same "
          f"with synchronous_commit off in the claiming session); drain of "
          f"{args.drain:,} by one worker (concurrency {args.concurrency}); vacuum: seconds / CPU "
          f"seconds of VACUUM throttled as autovacuum would be, with claims (p50/p99 ms) "
          f"meanwhile; autovacuum {autovacuum}\n{table}")  # fmt: skip
    for r in results:
        print(f"{r['case']} autovacuum: {json.dumps(r['autovacuum'], default=str)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"options": vars(args), "server": info.to_json(), "python": platform.python_version(),
           "table": table, "cases": results}  # fmt: skip
    path = RESULTS / "large_table.json"
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
