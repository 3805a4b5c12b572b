"""Python function calls per job of an in-process burst drain: a count, not a time.

`python -m benchmarks.calls [--jobs 20000] [--dsn DSN]` enqueues N no-op jobs with
COPY, then drains them with one in-process worker (`run(burst=True)`) under cProfile,
and prints the calls per job: every Python and C function call the worker made while
draining, divided by N. The count does not depend on the machine's speed or load
(only on how the jobs fall into batches, which a burst drain of a full queue fixes), so
a feature that adds work per job shows as a higher count in CI instead of hiding in the
noise of a timed benchmark (tests/worker/test_calls_per_job.py holds the ceiling).

Without --dsn it uses AIOPGQ_DSN, else DATABASE_URL, else an embedded server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import asyncpg

from aiopgq import Queue

BATCH = 100  # the worker's concurrency: a full queue is claimed 100 jobs at a time


@dataclass(frozen=True)
class Count:
    jobs: int
    calls: int
    primitive_calls: int

    @property
    def per_job(self) -> float:
        return self.calls / self.jobs


async def count_calls(dsn: str, jobs: int) -> Count:
    """Enqueue `jobs` no-op jobs in a fresh schema, then count the drain's calls."""
    schema = f"calls_{uuid.uuid4().hex[:10]}"
    queue = Queue(dsn, schema=schema)
    await queue.migrate()

    @queue.task(name="calls.noop")
    async def noop(n: int) -> None:
        return None

    try:
        async with queue:
            await noop.copy_many({"n": i} for i in range(jobs))
            worker = queue.worker(concurrency=BATCH)
            await queue.pool.execute(f'ANALYZE "{schema}".jobs')
            profile = cProfile.Profile()
            profile.enable()
            await worker.run(burst=True)
            profile.disable()
            done = await queue.pool.fetchval(
                f"SELECT count(*) FROM \"{schema}\".jobs WHERE status = 'done'"
            )
            if done != jobs:
                raise RuntimeError(f"{done} of {jobs} jobs done after the burst drain")
    finally:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    stats = pstats.Stats(profile)
    return Count(jobs, stats.total_calls, stats.prim_calls)  # type: ignore[attr-defined]


@contextlib.contextmanager
def database(dsn: str | None) -> Iterator[str]:
    """The given server, else the environment's, else a throwaway embedded one."""
    found = dsn or os.environ.get("AIOPGQ_DSN") or os.environ.get("DATABASE_URL")
    if found:
        yield found
        return
    from aiopgq.embedded import start_throwaway

    with start_throwaway() as server:
        yield server.ensure_database("calls")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calls")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--dsn")
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).parent / "results")
    opts = parser.parse_args()
    with database(opts.dsn) as dsn:
        count = asyncio.run(count_calls(dsn, opts.jobs))
    print(f"{count.jobs} jobs: {count.calls} calls, {count.per_job:.2f} calls per job")
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    result = {**asdict(count), "per_job": round(count.per_job, 3)}
    (opts.results_dir / "calls.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
