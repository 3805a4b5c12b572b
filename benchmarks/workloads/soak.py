"""soak: a steady rate for a long time; does anything grow that should not?

`python -m benchmarks --only soak --systems aiopgq` (30 minutes at 1,000 jobs/s by
default: `--soak-minutes`, `--soak-rate`). `--soak-workers` worker processes serve
(`concurrency=--concurrency`, finished rows pruned after `--soak-retention` seconds so
that the table can reach a steady size); two producer processes enqueue single jobs,
open loop, at half the rate each. Every `--soak-sample` seconds (10) the harness
records each worker's RSS (and its anonymous part, RssAnon) and CPU, the producers'
RSS, the connections open on the benchmark database, the jobs table's size with its
live and dead tuples, and from the table itself the jobs finished in the window and
their time from enqueue to done (finished_at - created_at, server clock: the handlers
write nothing, so no shared memory is touched in the worker and RSS is its own).

The check: RSS flat after warm-up, i.e. growth under 5 MiB over the last two thirds of
the run (the last 20 of 30 minutes), measured between the medians of the first and the
last minute of that span. `--soak-tracemalloc N` runs the workers under tracemalloc
(N frames; slower) and stores the 25 largest allocation growths between the end of the
warm-up and the end of the run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from benchmarks import processes
from benchmarks.bench import Bench, host_load
from benchmarks.processes import Child, ChildGroup
from benchmarks.report import Results

PRODUCERS = 2
GROWTH_LIMIT_MIB = 5.0
RSS = "worker RSS growth after warm-up"
HELD = "completion rate"
P99 = "enqueue-to-done p99 (median of samples)"


def _status_kib(pid: int, field: str) -> int:
    """A `VmRSS`-style field of /proc/PID/status, in KiB (0 if missing)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler:
    """Every `every` seconds: processes, connections, table, throughput and latency."""

    def __init__(
        self, dsn: str, schema: str, workers: list[Child], producers: list[Child], every: float
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.workers = [psutil.Process(c.pid) for c in workers]
        self.producers = [psutil.Process(c.pid) for c in producers]
        self.every = every
        self.samples: list[dict[str, Any]] = []
        self._cpu = [p.cpu_times() for p in self.workers]

    async def run(self, t0: float) -> None:
        conn = await asyncpg.connect(self.dsn, server_settings={"application_name": "soak"})
        try:
            next_at = time.monotonic()
            while True:
                next_at += self.every
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                sample = await self.sample(conn, time.monotonic() - t0)
                self.samples.append(sample)
                print(
                    f"  soak {sample['t'] / 60:5.1f} min: worker RSS "
                    f"{'/'.join(f'{r:.1f}' for r in sample['worker_rss_mib'])} MiB, "
                    f"{sample['connections']} connections, table "
                    f"{sample['table_mib']:.1f} MiB ({sample['dead_tuples']} dead), "
                    f"{sample['done_per_s']:.0f} jobs/s, p99 {sample['latency_p99_ms']:.1f} ms",
                    flush=True,
                )
        finally:
            await conn.close()

    async def sample(self, conn: asyncpg.Connection, t: float) -> dict[str, Any]:
        cpu_now = [p.cpu_times() for p in self.workers]
        cpu = [
            (now.user + now.system - before.user - before.system) / self.every * 100
            for now, before in zip(cpu_now, self._cpu, strict=True)
        ]
        self._cpu = cpu_now
        mib = 2**20
        row = await conn.fetchrow(
            f"""
            SELECT
              (SELECT count(*) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()) AS connections,
              (SELECT count(*) FROM pg_stat_activity
                WHERE datname = current_database() AND state = 'idle in transaction')
                AS idle_in_transaction,
              pg_total_relation_size('{self.schema}.jobs') AS table_bytes,
              s.n_live_tup, s.n_dead_tup
            FROM pg_stat_user_tables s
            WHERE s.schemaname = $1 AND s.relname = 'jobs'
            """,
            self.schema,
        )
        window = await conn.fetchrow(
            f"""
            SELECT count(*) AS finished,
              percentile_cont(0.5) WITHIN GROUP (ORDER BY finished_at - created_at) AS p50,
              percentile_cont(0.99) WITHIN GROUP (ORDER BY finished_at - created_at) AS p99,
              (SELECT count(*) FROM {self.schema}.jobs WHERE status = 'pending') AS pending
            FROM {self.schema}.jobs
            WHERE finished_at > now() - make_interval(secs => $1)
            """,
            self.every,
        )
        assert row is not None and window is not None

        def ms(value: Any) -> float:
            return value.total_seconds() * 1000 if value is not None else float("nan")

        return {
            "t": t,
            "worker_rss_mib": [p.memory_info().rss / mib for p in self.workers],
            "worker_anon_mib": [_status_kib(p.pid, "RssAnon") / 1024 for p in self.workers],
            "worker_cpu_pct": cpu,
            "producer_rss_mib": [p.memory_info().rss / mib for p in self.producers],
            "connections": int(row["connections"]),
            "idle_in_transaction": int(row["idle_in_transaction"]),
            "table_mib": row["table_bytes"] / mib,
            "live_tuples": int(row["n_live_tup"]),
            "dead_tuples": int(row["n_dead_tup"]),
            "done_per_s": window["finished"] / self.every,
            "pending": int(window["pending"]),
            "latency_p50_ms": ms(window["p50"]),
            "latency_p99_ms": ms(window["p99"]),
        }


def growth_after_warmup(samples: list[dict[str, Any]], key: str, worker: int) -> dict[str, float]:
    """Growth over the last two thirds of the run: median of its last minute minus
    median of its first minute (MiB)."""
    end = samples[-1]["t"]
    start = end / 3
    span = [s for s in samples if s["t"] >= start]
    first = [s[key][worker] for s in span if s["t"] < start + 60]
    last = [s[key][worker] for s in span if s["t"] > end - 60]
    if not first or not last:
        return {"from_min": start / 60, "growth_mib": float("nan")}
    return {
        "from_min": start / 60,
        "to_min": end / 60,
        "first_minute_mib": statistics.median(first),
        "last_minute_mib": statistics.median(last),
        "growth_mib": statistics.median(last) - statistics.median(first),
        "min_mib": min(s[key][worker] for s in span),
        "max_mib": max(s[key][worker] for s in span),
    }


async def soak(bench: Bench, name: str, res: Results) -> dict[str, Any]:
    opts = bench.opts
    await bench.fresh(name)
    seconds = opts.soak_minutes * 60
    config = bench.drain_config(name, mode="serve")
    config.extra = {"aiopgq": {"retention": opts.soak_retention}}
    budget = seconds + 300
    worker_spec = bench.worker_spec(name, config, budget)
    producer_spec = bench.producer_spec(name, "rate", budget, connections=8, max_inflight=128)
    if opts.soak_tracemalloc:
        traced = worker_spec if opts.soak_trace == "workers" else producer_spec
        traced["tracemalloc"] = {"frames": opts.soak_tracemalloc, "baseline_after": seconds / 3}
    async with ChildGroup() as group:
        workers, producers = await asyncio.gather(
            group.start_ready(f"{name}-soak-worker", worker_spec, opts.soak_workers),
            group.start_ready(f"{name}-soak-producer", producer_spec, PRODUCERS),
        )
        sampler = Sampler(
            bench.dsn, bench.systems[name].schema, workers, producers, opts.soak_sample
        )
        processes.go(workers)
        processes.go(producers)
        t0 = time.monotonic()
        sampling = asyncio.create_task(sampler.run(t0))
        share = opts.soak_rate / PRODUCERS
        for producer in producers:
            producer.send("run " + json.dumps({"rate": share, "seconds": seconds, "seq0": 0}))
        try:
            sent = await asyncio.gather(
                *(p.expect("phase_result", seconds + 120) for p in producers)
            )
            await asyncio.sleep(opts.soak_sample)  # one more sample after the last job
        finally:
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
        processes.stop(workers + producers)
        results = await processes.results(workers, 60)
        producer_results = await processes.results(producers, 60)
    samples = sampler.samples
    growth = [growth_after_warmup(samples, "worker_rss_mib", w) for w in range(len(workers))]
    anon = [growth_after_warmup(samples, "worker_anon_mib", w) for w in range(len(workers))]
    rates = [s["done_per_s"] for s in samples if s["t"] > 60]
    p99s = [s["latency_p99_ms"] for s in samples if s["t"] > 60]
    res.add(name, RSS, 0, max(g["growth_mib"] for g in growth))
    res.add(name, HELD, 0, statistics.median(rates) if rates else float("nan"))
    res.add(name, P99, 0, statistics.median(p99s) if p99s else float("nan"))
    res.check(
        f"{name} RSS growth after warm-up (MiB)",
        max(g["growth_mib"] for g in growth),
        "<=",
        GROWTH_LIMIT_MIB,
    )
    return {
        "sent": [s["sent"] for s in sent],
        "errors": [s["errors"] for s in sent],
        "achieved_rate": sum(s["achieved_rate"] for s in sent),
        "rss_growth": growth,
        "anon_growth": anon,
        "tracemalloc": {
            "workers": [r.get("tracemalloc") for r in results],
            "producers": [r.get("tracemalloc") for r in producer_results],
        },
        "worker_results": [
            {k: r[k] for k in ("handled", "cpu_user", "cpu_sys", "rss", "maxrss_kb")}
            for r in results
        ],
        "samples": samples,
    }


def plot(series: dict[str, dict[str, Any]], path: Path, subtitle: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), layout="constrained")
    for name, data in series.items():
        samples = data["samples"]
        t = [s["t"] / 60 for s in samples]
        for w in range(len(samples[0]["worker_rss_mib"]) if samples else 0):
            axes[0][0].plot(
                t, [s["worker_rss_mib"][w] for s in samples], label=f"{name} worker {w}"
            )
            axes[0][0].plot(
                t, [s["worker_anon_mib"][w] for s in samples], "--", label=f"{name} worker {w} anon"
            )
        for p in range(len(samples[0]["producer_rss_mib"]) if samples else 0):
            axes[0][0].plot(
                t, [s["producer_rss_mib"][p] for s in samples], ":", label=f"producer {p}"
            )
        axes[0][1].plot(t, [s["connections"] for s in samples], label=f"{name} connections")
        axes[1][0].plot(t, [s["table_mib"] for s in samples], label=f"{name} jobs table")
        dead = axes[1][0].twinx()
        dead.plot(t, [s["dead_tuples"] for s in samples], "r:", label="dead tuples")
        dead.set_ylabel("dead tuples", fontsize=8)
        axes[1][1].plot(t, [s["done_per_s"] for s in samples], label=f"{name} jobs/s")
        lat = axes[1][1].twinx()
        lat.plot(t, [s["latency_p99_ms"] for s in samples], "g:", label="p99 ms")
        lat.set_ylabel("enqueue to done, p99 (ms)", fontsize=8)
    titles = [
        ("RSS (MiB)", "process memory"),
        ("connections", "open on the benchmark database"),
        ("MiB", "jobs table, with indexes and TOAST"),
        ("jobs/s", "done per second"),
    ]
    for ax, (unit, title) in zip(axes.flat, titles, strict=True):
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        ax.set_xlabel("minutes", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"soak — {subtitle}", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("soak", [n for n in bench.systems if n in ("aiopgq", "aiopgq-base")])
    res.metric(RSS, "MiB", higher_is_better=False)
    res.metric(HELD, "jobs/s")
    res.metric(P99, "ms", higher_is_better=False)
    series: dict[str, dict[str, Any]] = {}
    for name in res.systems:
        desc = bench.systems[name].describe(bench.drain_config(name))
        res.configs[name] = (
            f"{opts.soak_workers} worker process(es) x {desc}, retention "
            f"{opts.soak_retention:g} s; {PRODUCERS} producers at {opts.soak_rate:g}/s in all, "
            f"{opts.soak_minutes:g} min, sampled every {opts.soak_sample:g} s"
        )
        series[name] = await soak(bench, name, res)
        for w, g in enumerate(series[name]["rss_growth"]):
            res.notes.append(
                f"{name} worker {w}: RSS {g.get('first_minute_mib', float('nan')):.1f} -> "
                f"{g.get('last_minute_mib', float('nan')):.1f} MiB from minute "
                f"{g['from_min']:.1f} to the end (growth {g['growth_mib']:+.2f} MiB; "
                f"anonymous {series[name]['anon_growth'][w]['growth_mib']:+.2f} MiB)"
            )
    if not res.systems:
        res.notes.append("soak runs aiopgq only: add --systems aiopgq")
    if bench.info.settings.get("autovacuum") != "on":
        res.notes.append(
            "autovacuum is off on this server: dead tuples are never reclaimed and the "
            "table grows; soak on a server with autovacuum on for a steady table size"
        )
    out = opts.results_dir / "soak-timeline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {**bench.context_json(), "host_load_at_end": host_load(), "series": series},
            indent=1,
            default=str,
        )
        + "\n"
    )
    if opts.plots and series:
        plot(series, opts.results_dir / "soak-timeline.png", bench.info.short)
    return res
