"""Sequences' throughput: N jobs over K sequence keys against N plain jobs, same worker.

`python -m benchmarks.sequences [--jobs 2000] [--keys 20] [--concurrency 20] [--runs 3]
[--dsn DSN]` enqueues N no-op jobs (enqueue_many, one call per key, rows in order) in a
fresh schema, drains them with one in-process worker (`run(burst=True)`), and times the
drain; then the same for N plain jobs. A sequence runs one job at a time, so at most K
jobs are runnable at once and each release waits for its predecessor's completion to
commit (the worker batches completions): the figure is what that costs against a queue
of independent jobs. Prints a table of the medians and writes results/sequences.json.

Without --dsn it uses AIOPGQ_DSN, else DATABASE_URL, else an embedded server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path

import asyncpg

from aiopgq import Queue

from .calls import database


async def drain(dsn: str, jobs: int, keys: int | None, concurrency: int) -> float:
    """Seconds to drain `jobs` no-op jobs, over `keys` sequences (None: plain jobs)."""
    schema = f"seqbench_{uuid.uuid4().hex[:10]}"
    queue = Queue(dsn, schema=schema)
    await queue.migrate()

    @queue.task(name="bench.noop")
    async def noop(n: int) -> None:
        return None

    try:
        async with queue:
            if keys is None:
                await noop.enqueue_many({"n": i} for i in range(jobs))
            else:
                for key in range(keys):
                    rows = [{"n": i} for i in range(key, jobs, keys)]
                    await noop.enqueue_many(rows, sequence_key=f"key-{key}")
            await queue.pool.execute(f'ANALYZE "{schema}".jobs')
            worker = queue.worker(concurrency=concurrency)
            started = time.perf_counter()
            await worker.run(burst=True)
            elapsed = time.perf_counter() - started
            done = await queue.pool.fetchval(
                f"SELECT count(*) FROM \"{schema}\".jobs WHERE status = 'done'"
            )
            if done != jobs:
                raise RuntimeError(f"{done} of {jobs} jobs done after the burst drain")
            return elapsed
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


async def measure(dsn: str, jobs: int, keys: int, concurrency: int, runs: int) -> dict[str, float]:
    plain: list[float] = []
    sequenced: list[float] = []
    for _ in range(runs):  # alternated, so both see the same machine
        plain.append(await drain(dsn, jobs, None, concurrency))
        sequenced.append(await drain(dsn, jobs, keys, concurrency))
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        fsync = await conn.fetchval("SHOW fsync")
        commit = await conn.fetchval("SHOW synchronous_commit")
    finally:
        await conn.close()
    return {
        "jobs": jobs,
        "keys": keys,
        "concurrency": concurrency,
        "runs": runs,
        "plain_s": statistics.median(plain),
        "sequenced_s": statistics.median(sequenced),
        "plain_jobs_per_s": jobs / statistics.median(plain),
        "sequenced_jobs_per_s": jobs / statistics.median(sequenced),
        "ratio": statistics.median(plain) / statistics.median(sequenced),
        "postgresql": version,
        "fsync": fsync,
        "synchronous_commit": commit,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sequences")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dsn")
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).parent / "results")
    opts = parser.parse_args()
    with database(opts.dsn) as dsn:
        result = asyncio.run(measure(dsn, opts.jobs, opts.keys, opts.concurrency, opts.runs))
    print(
        f"PostgreSQL {result['postgresql']}, fsync {result['fsync']}, "
        f"synchronous_commit {result['synchronous_commit']}; "
        f"worker concurrency {opts.concurrency}, median of {opts.runs} runs"
    )
    print(f"{'':28} {'seconds':>8} {'jobs/s':>8}")
    print(
        f"{f'{opts.jobs} plain jobs':28} {result['plain_s']:8.2f} {result['plain_jobs_per_s']:8.0f}"
    )
    label = f"{opts.jobs} jobs, {opts.keys} keys"
    print(f"{label:28} {result['sequenced_s']:8.2f} {result['sequenced_jobs_per_s']:8.0f}")
    print(f"sequenced / plain throughput: {result['ratio']:.2f}x")
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    (opts.results_dir / "sequences.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
