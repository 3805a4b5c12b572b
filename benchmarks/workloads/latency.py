"""latency: an idle worker process; a producer enqueues single jobs at fixed rates.

Latency = handler start (`time.time()` in the worker) minus the commit time (taken in
the producer right after the enqueue call returns; same host clock), matched by the
sequence number in the payload. Percentiles from an HdrHistogram. Producer is open-loop:
job k is sent at k / rate whatever the answer time (up to 32 in flight). Per-job times
meet in a shared `SeqClock`.

Young worker: a worker process that is ready (imported, pool open) but not yet running
is started at the instant the producer begins a steady stream (`--young-rate`, 200/s, for
`--young-seconds`). Its start-up (schema check, registration, LISTEN, first claims) and
its first minute (first plans, statistics of a young table) count: the jobs committed
in its first `--young-split` seconds and those committed after are two rows. The jobs
table is empty when it starts (truncated), as for a new deployment.
"""

from __future__ import annotations

from typing import Any

from benchmarks.bench import Bench
from benchmarks.report import Results
from benchmarks.sessions import PhaseOutcome, ServeSession
from benchmarks.systems import WorkerConfig

PERCENTILES = ("p50", "p95", "p99", "max")


def metric_name(rate: float, pct: str) -> str:
    return f"{rate:g}/s {pct}"


def young_windows(opts: Any) -> tuple[str, str]:
    split, end = opts.young_split, opts.young_seconds
    return f"0-{split:g}s", f"{split:g}-{end:g}s"


def young_label(opts: Any, window: str) -> str:
    return f"young {opts.young_rate:g}/s {window}"


def latency_config(bench: Bench, name: str) -> WorkerConfig:
    config = bench.drain_config(name, mode="serve")
    config.poll_interval = 1.0
    return config


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("latency", list(bench.systems))
    for rate in opts.latency_rates:
        for pct in PERCENTILES:
            res.metric(metric_name(rate, pct), "ms", higher_is_better=False)
    res.headline = [metric_name(rate, pct) for rate in opts.latency_rates for pct in ("p50", "p99")]
    young = opts.young_rate > 0 and opts.young_seconds > opts.young_split > 0
    if young:
        for window in young_windows(opts):
            for pct in PERCENTILES:
                res.metric(f"{young_label(opts, window)} {pct}", "ms", higher_is_better=False)
            res.headline += [f"{young_label(opts, window)} {pct}" for pct in ("p50", "p99")]
    for name in bench.systems:
        desc = bench.systems[name].describe(latency_config(bench, name))
        res.configs[name] = f"1 worker process, {desc}" + (
            f"; young worker: {opts.young_concurrency} slots" if young else ""
        )
    capacity = int(sum(opts.latency_rates) * opts.latency_seconds * 1.1) + 100
    budget = len(opts.latency_rates) * (opts.latency_seconds + 5) + 60
    for round_no in range(opts.rounds):
        for name in bench.order(round_no):
            if opts.latency_rates:
                await bench.fresh(name)
                config = latency_config(bench, name)
                async with ServeSession(bench, name, config, capacity, budget) as session:
                    for rate in opts.latency_rates:
                        out = await session.run_phase(rate, opts.latency_seconds)
                        record(res, name, round_no, out)
            if young:
                await run_young(bench, res, name, round_no)
    if opts.latency_rates:
        low = min(opts.latency_rates)
        for pct, bound in (("p50", 1.2), ("p99", 1.5)):
            res.ratio_check(
                f"aiopgq/bare {pct} at {low:g}/s",
                metric_name(low, pct),
                "aiopgq",
                "bare",
                "<=",
                bound,
            )
    return res


async def run_young(bench: Bench, res: Results, name: str, round_no: int) -> None:
    """A fresh worker process born into a steady stream, on an empty jobs table."""
    opts = bench.opts
    await bench.fresh(name)
    config = latency_config(bench, name)
    config.concurrency = config.batch = opts.young_concurrency
    capacity = int(opts.young_rate * opts.young_seconds * 1.1) + 100
    budget = opts.young_seconds + 90
    async with ServeSession(bench, name, config, capacity, budget, hold_workers=True) as session:
        outs = await session.run_young_phase(opts.young_rate, opts.young_seconds, opts.young_split)
    for window, out in zip(young_windows(opts), outs, strict=True):
        record(res, name, round_no, out, young_label(opts, window))


def record(
    res: Results,
    name: str,
    round_no: int,
    out: PhaseOutcome,
    label: str | None = None,
) -> None:
    summary = out.hist.summary_ms()
    label = label or f"{out.offered:g}/s"  # metric_name's prefix
    for pct in PERCENTILES:
        res.add(
            name,
            f"{label} {pct}",
            round_no,
            summary[pct],
            jobs=out.hist.count,
            missing=out.missing,
            sent=out.sent,
            achieved_rate=out.achieved,
            started_before_commit_returned=out.hist.negative,
        )
    if out.missing or out.errors:
        res.notes.append(
            f"{name} r{round_no} {label}: {out.missing} of {out.committed} jobs "
            f"not started within 1 s after the phase, {out.errors} enqueue errors"
        )
    print(
        f"  latency r{round_no} {name} {label}: p50 {summary['p50']:.2f} "
        f"p99 {summary['p99']:.2f} max {summary['max']:.2f} ms ({out.hist.count} jobs)",
        flush=True,
    )
