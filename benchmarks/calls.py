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
from typing import Any

import asyncpg

from aiopgq import Queue

BATCH = 100  # the worker's concurrency: a full queue is claimed 100 jobs at a time


@dataclass(frozen=True)
class Count:
    jobs: int
    calls: int
    primitive_calls: int
    statements: int  # sent to the server during the drain: one round trip each

    @property
    def per_job(self) -> float:
        return self.calls / self.jobs

    @property
    def statements_per_1000(self) -> float:
        return self.statements / self.jobs * 1000


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
            with counting_statements() as sent:
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
    table: dict[tuple[str, int, str], tuple[Any, ...]] = getattr(stats, "stats")  # noqa: B009
    # The counting wrappers' own calls (and their coroutines' resumptions) left out.
    ours = sum(value[1] for key, value in table.items() if key[2] in _COUNTERS)
    calls = stats.total_calls - ours  # type: ignore[attr-defined]
    return Count(jobs, calls, stats.prim_calls - ours, sent[0])  # type: ignore[attr-defined]


_COUNTERS = ("_counted_execute", "_counted_simple")


@contextlib.contextmanager
def counting_statements() -> Iterator[list[int]]:
    """Count the statements sent through asyncpg meanwhile (every fetch*, execute with
    arguments, and simple queries such as BEGIN and COMMIT): a server-side figure as
    deterministic as the calls (cProfile cannot give it: it counts each resumption of a
    coroutine that awaited a reply as one more call)."""
    sent = [0]
    connection = asyncpg.Connection
    extended, simple = getattr(connection, "_execute"), connection.execute  # noqa: B009

    async def _counted_execute(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return await extended(self, *args, **kwargs)

    async def _counted_simple(
        self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any
    ) -> Any:
        if not args:  # with arguments it goes through _execute, counted there
            sent[0] += 1
        return await simple(self, query, *args, **kwargs)

    setattr(connection, "_execute", _counted_execute)  # noqa: B010
    setattr(connection, "execute", _counted_simple)  # noqa: B010
    try:
        yield sent
    finally:
        setattr(connection, "_execute", extended)  # noqa: B010
        setattr(connection, "execute", simple)  # noqa: B010


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
    print(
        f"{count.jobs} jobs: {count.calls} calls, {count.per_job:.2f} calls per job; "
        f"{count.statements} statements, {count.statements_per_1000:.1f} per 1000 jobs"
    )
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    result = {
        **asdict(count),
        "per_job": round(count.per_job, 3),
        "statements_per_1000": round(count.statements_per_1000, 2),
    }
    (opts.results_dir / "calls.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
