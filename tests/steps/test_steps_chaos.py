"""Durable steps under random SIGKILLs of `aiopgq worker` processes: what a step's
transaction covers happens once; an outside effect at least once, and never again once
its step is recorded."""

from __future__ import annotations

import asyncio
import random
import signal
from subprocess import Popen

import asyncpg

from aiopgq import Queue

from ..support.cli import cli
from ..support.helpers import eventually
from ..worker.test_progress import FAST_RESCUE


async def test_steps_under_workers_killed_at_random(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    schema = f'"{queue.schema}"'
    await conn.execute(
        f"CREATE TABLE {schema}.effects (job_id bigint, step text, attempt int, pid int)"
    )
    await conn.execute(
        f"CREATE TABLE {schema}.outside (job_id bigint, pid int, "
        "at timestamptz DEFAULT clock_timestamp())"
    )
    total = 300
    await queue.enqueue_many("steps.flow", [{"n": n} for n in range(total)], max_attempts=100)

    def start() -> Popen[str]:
        return cli(
            dsn,
            queue.schema,
            "worker",
            "tests.support.steps_app:queue",
            "--concurrency",
            "8",
            *FAST_RESCUE,
        )

    workers = [start() for _ in range(3)]
    rng = random.Random(27)
    kills = 0
    try:
        await eventually(
            lambda: conn.fetchval(f"SELECT count(*) >= 20 FROM {schema}.effects"), within=60
        )
        while kills < 10:
            await asyncio.sleep(rng.uniform(0.1, 0.4))
            credited = await conn.fetchval(
                f"SELECT count(*) FROM {schema}.effects WHERE step = 'credit'"
            )
            if credited >= total - 30:
                if kills >= 3:
                    break
                # The workers outran the kills (a fast Python, a quiet machine): more
                # jobs, so that the next kills land on work in flight too.
                more = [{"n": n} for n in range(total, total + 100)]
                await queue.enqueue_many("steps.flow", more, max_attempts=100)
                total += 100
            victim = rng.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait(10)
            kills += 1
            workers[victim] = start()

        async def all_done() -> bool:
            status = {r["status"]: r["jobs"] for r in await queue.status()}
            return status == {"done": total}

        await eventually(all_done, within=180)
    finally:
        for proc in workers:
            proc.kill()
            proc.wait(10)
    assert kills >= 3
    # Exactly once: one row per job and step that commits with the step's record.
    counts = await conn.fetch(
        f"SELECT step, job_id, count(*) AS n FROM {schema}.effects GROUP BY 1, 2"
    )
    assert len(counts) == 2 * total and {r["n"] for r in counts} == {1}
    # At least once, and never after the step was recorded: every outside effect came
    # before its step's record; a repeat is a run killed between effect and record.
    late = await conn.fetchval(
        f"SELECT count(*) FROM {schema}.outside o JOIN {schema}.job_steps s "
        "ON s.job_id = o.job_id AND s.name = 'notify' WHERE o.at > s.finished_at"
    )
    assert late == 0
    per_job = await conn.fetch(f"SELECT job_id, count(*) AS n FROM {schema}.outside GROUP BY 1")
    assert len(per_job) == total
    repeats = sum(r["n"] - 1 for r in per_job)
    assert repeats <= kills * 8  # at most the steps in flight of each killed worker
    # Every job's steps in order, recorded once each; results replayed into the outcome.
    steps = await conn.fetch(
        f"SELECT job_id, array_agg(name ORDER BY position) AS names FROM {schema}.job_steps "
        "GROUP BY 1"
    )
    assert len(steps) == total
    for row in steps:
        assert [n for n in row["names"] if n != "sleep:1"] == ["debit", "notify", "credit"]
    rerun = await conn.fetchval(f"SELECT count(*) FROM {schema}.jobs WHERE attempts > 1")
    print(f"\n{kills} kills, {rerun} jobs ran more than once, {repeats} outside repeats")
