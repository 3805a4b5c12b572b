"""Workflows: (a) a 10,000-member group with its callback against 10,000 plain jobs on
the same `aiopgq worker` processes (throughput ratio; target >= 0.7x), and (b) how soon
a chain's child starts after its parent completed (p50/p99; target: a few ms).

    python -m benchmarks.workflows                 # 3 rounds, 2 workers, 10,000 jobs
    python -m benchmarks.workflows --rounds 5 --workers 3 --jobs 10000 --chain 200

The server: --dsn, else AIOPGQ_DSN, else DATABASE_URL, else the local test server. Each
run uses a fresh schema (aiopgq_bench_wf, dropped at the end); PostgreSQL's settings are
not changed, and printed. Prints a table, writes benchmarks/results/workflows.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

from aiopgq import Queue

from .database import server_info
from .trees import git_describe

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "workflows.json"
SCHEMA = "aiopgq_bench_wf"


def start_workers(dsn: str, count: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "AIOPGQ_BENCH_SCHEMA": SCHEMA, "PYTHONPATH": str(ROOT)}
    args = [
        sys.executable,
        "-m",
        "aiopgq",
        "worker",
        "benchmarks.workflows_app:queue",
        "--concurrency",
        str(concurrency),
        "--retention",
        "none",
    ]
    return [
        subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(count)
    ]


async def count_done(conn: asyncpg.Connection, since: int) -> int:
    return int(
        await conn.fetchval(
            f"SELECT count(*) FROM {SCHEMA}.jobs WHERE id > $1 AND status = 'done'", since
        )
    )


async def drain(queue: Queue, conn: asyncpg.Connection, jobs: int, grouped: bool) -> float:
    """Jobs per second: enqueue with the queue paused, resume, wait until all are done."""
    since = int(await conn.fetchval(f"SELECT coalesce(max(id), 0) FROM {SCHEMA}.jobs"))
    await queue.pause("default")
    if grouped:
        wf = queue.workflow("bench")
        group = wf.add_many("bench.noop", [{"n": n} for n in range(jobs)])
        wf.add("bench.callback", depends_on=[group])
        await wf.enqueue()
        total = jobs + 1
    else:
        await queue.enqueue_many("bench.noop", [{"n": n} for n in range(jobs)])
        total = jobs
    start = time.perf_counter()
    await queue.resume("default")
    while await count_done(conn, since) < total:  # noqa: ASYNC110  # the database's count
        await asyncio.sleep(0.01)
    return jobs / (time.perf_counter() - start)


async def chain_latency(queue: Queue, conn: asyncpg.Connection, length: int) -> dict[str, Any]:
    """A chain of `length` links: per child, its start minus its parent's finished_at
    (the commit that released it), and minus the parent handler's return."""
    wf = queue.workflow("chain")
    node = wf.add("bench.link", n=0)
    for n in range(1, length):
        node = wf.add("bench.link", n=n, depends_on=[node])
    wid = await wf.enqueue()
    done = await queue.wait_for_workflow(wid, timeout=600)
    ids = [job.id for job in done.jobs]
    rows = await conn.fetch(
        f"SELECT id, extract(epoch FROM finished_at) AS finished, result FROM {SCHEMA}.jobs "
        "WHERE id = ANY($1)",
        ids,
    )
    by_id = {r["id"]: r for r in rows}
    after_commit, after_return = [], []
    for parent, child in itertools.pairwise(ids):
        started = json.loads(by_id[child]["result"])["started"]
        after_commit.append((started - float(by_id[parent]["finished"])) * 1000)
        after_return.append((started - json.loads(by_id[parent]["result"])["returned"]) * 1000)
    return {"after_commit_ms": after_commit, "after_return_ms": after_return}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workflows")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("AIOPGQ_DSN")
        or os.environ.get("DATABASE_URL")
        or "postgresql://postgres@127.0.0.1:5432/test",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--chain", type=int, default=200)
    opts = parser.parse_args(argv)
    info = await server_info(opts.dsn)
    conn = await asyncpg.connect(opts.dsn)
    await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    queue = Queue(opts.dsn, schema=SCHEMA)
    await queue.migrate()
    workers = start_workers(opts.dsn, opts.workers, opts.concurrency)
    plain: list[float] = []
    grouped: list[float] = []
    try:
        async with queue:
            await asyncio.sleep(3)  # the workers connect and register their tasks
            await drain(queue, conn, 1000, False)  # warm-up
            for _ in range(opts.rounds):  # interleaved
                plain.append(await drain(queue, conn, opts.jobs, False))
                grouped.append(await drain(queue, conn, opts.jobs, True))
            latency = await chain_latency(queue, conn, opts.chain)
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(30)
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await conn.close()
    ratio = statistics.median(grouped) / statistics.median(plain)
    commit, ret = latency["after_commit_ms"], latency["after_return_ms"]
    figures = {
        "plain_jobs_per_s": statistics.median(plain),
        "group_jobs_per_s": statistics.median(grouped),
        "group_over_plain": ratio,
        "chain_start_after_parent_commit_p50_ms": pct(commit, 0.5),
        "chain_start_after_parent_commit_p99_ms": pct(commit, 0.99),
        "chain_start_after_parent_return_p50_ms": pct(ret, 0.5),
        "chain_start_after_parent_return_p99_ms": pct(ret, 0.99),
    }
    print(info.short)
    print(
        f"{opts.workers} aiopgq worker processes x concurrency {opts.concurrency}, "
        f"{opts.rounds} rounds (medians), {opts.jobs} jobs, chain of {opts.chain}"
    )
    print(f"{'metric':<44} {'value':>10}  target")
    print(f"{'plain jobs/s':<44} {figures['plain_jobs_per_s']:>10.0f}")
    print(f"{'group of N + callback, jobs/s':<44} {figures['group_jobs_per_s']:>10.0f}")
    print(f"{'group / plain':<44} {ratio:>10.2f}  >= 0.70 {'PASS' if ratio >= 0.7 else 'FAIL'}")
    for key, label in (("commit", "parent's commit"), ("return", "parent's return")):
        for q in ("p50", "p99"):
            value = figures[f"chain_start_after_parent_{key}_{q}_ms"]
            print(f"{'child start after ' + label + ' ' + q + ' (ms)':<44} {value:>10.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "commit": git_describe(),
                "server": info.to_json(),
                "options": vars(opts) | {"dsn": "(redacted)"},
                "figures": figures,
                "rounds": {"plain_jobs_per_s": plain, "group_jobs_per_s": grouped},
                "chain_ms": latency,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
