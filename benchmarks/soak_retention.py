"""Retention soak: a steady rate for minutes, plain pruning vs the partitioned layout.

    python benchmarks/soak_retention.py --rate 500 --duration 600 --retention 180

For each layout, in turn, on a fresh schema of one database: an `aiopgq worker`
process runs a no-op task while this process enqueues `--rate` jobs a second (a batch
every 100 ms) for `--duration` seconds. Every `--sample` seconds it records the size of
the jobs table with its indexes, of the archive, the live and dead tuples of jobs, and
the autovacuum count; every second it times one claim (the worker's dequeue statement,
10 rows, rolled back) on the same queue. It prints a table, and writes
benchmarks/results/soak_retention.json and .png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

from aiopgq import Queue

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
APP = "benchmarks.soak_app:queue"

SAMPLE = """
SELECT pg_total_relation_size(format('%I.jobs', $1::text)::regclass) AS jobs_bytes,
       pg_relation_size(format('%I.jobs', $1::text)::regclass) AS jobs_heap_bytes,
       (SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
        FROM pg_partition_tree(format('%I.jobs_archive', $1::text)::regclass)) AS archive_bytes,
       s.n_live_tup AS live, s.n_dead_tup AS dead, s.autovacuum_count AS autovacuums
FROM pg_stat_user_tables s
WHERE s.schemaname = $1 AND s.relname = 'jobs'
"""


async def settings(conn: asyncpg.Connection) -> dict[str, str]:
    names = ["server_version", "fsync", "synchronous_commit", "shared_buffers",
             "autovacuum_naptime", "max_wal_size"]  # fmt: skip
    rows = await conn.fetch("SELECT name, setting FROM pg_settings WHERE name = ANY($1)", names)
    return {row["name"]: row["setting"] for row in rows}


async def produce(queue: Queue, rate: int, until: float) -> int:
    """Enqueue `rate` jobs a second, a batch every 100 ms, until `until`; how many."""
    per_batch = max(1, rate // 10)
    sent, tick = 0, time.monotonic()
    while tick < until:
        await queue.enqueue_many("soak.noop", [{}] * per_batch)
        sent += per_batch
        tick += 0.1
        await asyncio.sleep(max(0.0, tick - time.monotonic()))
    return sent


async def probe_claims(dsn: str, schema: str, until: float, out: list[tuple[float, float]]) -> None:
    """Time the worker's own claim statement once a second (rolled back: it takes nothing)."""
    conn = await asyncpg.connect(dsn)
    statement = Queue(dsn, schema=schema).sql.dequeue
    start = time.monotonic()
    try:
        while time.monotonic() < until:
            tx = conn.transaction()
            await tx.start()
            began = time.perf_counter()
            await conn.fetch(statement, "default", 10, "probe")
            elapsed = time.perf_counter() - began
            await tx.rollback()
            out.append((time.monotonic() - start, elapsed * 1000))
            await asyncio.sleep(1.0)
    finally:
        await conn.close()


async def soak(args: argparse.Namespace, layout: str) -> dict[str, Any]:
    schema = f"soak_{layout}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    queue = Queue(args.dsn, schema=schema, max_pool_size=4)
    await queue.migrate()
    await queue.open()
    if layout == "partitioned":
        await queue.enable_partitioning(
            archive_after=args.archive_after, partition_width=args.partition_width
        )
    env = {**os.environ, "AIOPGQ_DSN": args.dsn, "SOAK_SCHEMA": schema, "PYTHONPATH": str(ROOT)}
    keep = str(args.retention)
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aiopgq", "worker", APP, "--schema", schema),
        *("--concurrency", "100", "--maintenance-interval", "5", "--retention", keep),
        *("--failed-retention", keep, "--cancelled-retention", keep),
        env=env,
        cwd=ROOT,
    )
    samples: list[dict[str, Any]] = []
    claims: list[tuple[float, float]] = []
    start = time.monotonic()
    until = start + args.duration
    producer = asyncio.create_task(produce(queue, args.rate, until))
    prober = asyncio.create_task(probe_claims(args.dsn, schema, until, claims))
    try:
        while time.monotonic() < until:
            await asyncio.sleep(args.sample)
            row = await admin.fetchrow(SAMPLE, schema)
            pending = await admin.fetchval(
                f"SELECT count(*) FROM {schema}.jobs WHERE status = 'pending'"
            )
            sample = {"t": round(time.monotonic() - start, 1), **dict(row), "pending": pending}
            samples.append(sample)
            print(layout, json.dumps(sample), flush=True)
        sent = await producer
        await prober
    finally:
        for task in (producer, prober):
            task.cancel()
        await asyncio.gather(producer, prober, return_exceptions=True)
        worker.terminate()
        await asyncio.wait_for(worker.wait(), 60)
        await queue.close()
        await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await admin.close()
    return {"layout": layout, "sent": sent, "samples": samples, "claims": claims}


def summary(result: dict[str, Any], warm: float) -> dict[str, Any]:
    """Figures over the steady part (after `warm` seconds): sizes and claim times."""
    steady = [s for s in result["samples"] if s["t"] >= warm]
    claims = [ms for t, ms in result["claims"] if t >= warm]
    mb = 1024 * 1024

    def spread(key: str) -> tuple[float, float, float]:
        values = [s[key] / mb for s in steady]
        return min(values), statistics.median(values), max(values)

    return {
        "jobs_mb": spread("jobs_bytes"),
        "archive_mb": spread("archive_bytes"),
        "dead_max": max(s["dead"] for s in steady),
        "pending_max": max(s["pending"] for s in steady),
        "claim_ms_p50": statistics.median(claims),
        "claim_ms_p95": statistics.quantiles(claims, n=20)[18],
        "claim_ms_max": max(claims),
        "first_half_claim_p50": statistics.median(claims[: len(claims) // 2]),
        "second_half_claim_p50": statistics.median(claims[len(claims) // 2 :]),
    }


def plot(results: list[dict[str, Any]], path: Path, args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    mb = 1024 * 1024
    for result in results:
        t = [s["t"] / 60 for s in result["samples"]]
        label = result["layout"]
        axes[0].plot(t, [s["jobs_bytes"] / mb for s in result["samples"]], label=f"{label}: jobs")
        if result["layout"] == "partitioned":
            axes[0].plot(
                t,
                [s["archive_bytes"] / mb for s in result["samples"]],
                "--",
                label="partitioned: archive",
            )
        axes[1].plot(t, [s["dead"] for s in result["samples"]], label=label)
        ct = [c[0] / 60 for c in result["claims"]]
        ms = [c[1] for c in result["claims"]]
        window = 15
        smooth = [statistics.median(ms[max(0, i - window) : i + 1]) for i in range(len(ms))]
        axes[2].plot(ct, smooth, label=label)
    axes[0].set_title("table size (MB, with indexes)")
    axes[1].set_title("dead tuples in jobs")
    axes[2].set_title("claim of 10 jobs (ms, running median)")
    for ax in axes:
        ax.set_xlabel("minutes")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{args.rate} jobs/s for {args.duration / 60:g} min, retention {args.retention:g} s; "
        f"partitioned: archive after {args.archive_after:g} s, "
        f"{args.partition_width} s partitions",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("AIOPGQ_DSN")
                        or os.environ.get("DATABASE_URL")
                        or "postgresql://postgres@127.0.0.1:5432/test")  # fmt: skip
    parser.add_argument("--rate", type=int, default=500, help="jobs per second (default 500)")
    parser.add_argument("--duration", type=float, default=600, help="seconds per layout")
    parser.add_argument("--retention", type=float, default=180, help="seconds (every status)")
    parser.add_argument("--archive-after", type=float, default=60)
    parser.add_argument("--partition-width", type=int, default=60)
    parser.add_argument("--sample", type=float, default=10)
    parser.add_argument("--layouts", default="plain,partitioned")
    args = parser.parse_args()
    conn = await asyncpg.connect(args.dsn)
    server = await settings(conn)
    await conn.close()
    results = [await soak(args, layout) for layout in args.layouts.split(",")]
    warm = args.retention + 2 * args.partition_width  # both layouts at their steady size
    figures = {r["layout"]: summary(r, warm) for r in results}
    print(f"\nPostgreSQL {server}; {os.cpu_count()} cores; steady part: t >= {warm:g} s")
    print(
        f"{'layout':<12} {'jobs MB min/med/max':>20} {'archive MB':>20} {'dead max':>9} "
        f"{'pending max':>11} {'claim p50':>9} {'p95':>6} {'1st/2nd half p50':>17}"
    )
    for layout, f in figures.items():
        jobs_mb = " / ".join(f"{v:.1f}" for v in f["jobs_mb"])
        archive_mb = " / ".join(f"{v:.1f}" for v in f["archive_mb"])
        print(
            f"{layout:<12} {jobs_mb:>20} {archive_mb:>20} {f['dead_max']:>9} "
            f"{f['pending_max']:>11} {f['claim_ms_p50']:>8.2f}ms {f['claim_ms_p95']:>5.2f} "
            f"{f['first_half_claim_p50']:>8.2f}/{f['second_half_claim_p50']:.2f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"options": vars(args), "server": server, "cpus": os.cpu_count(),
           "python": platform.python_version(), "figures": figures, "runs": results}  # fmt: skip
    (RESULTS / "soak_retention.json").write_text(json.dumps(out, indent=1, default=str))
    plot(results, RESULTS / "soak_retention.png", args)
    print(f"wrote {RESULTS / 'soak_retention.json'} and .png")


if __name__ == "__main__":
    asyncio.run(main())
