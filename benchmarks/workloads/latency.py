"""latency: an idle worker process; a producer enqueues single jobs at fixed rates.

Latency = handler start (`time.time()` in the worker) minus the commit time (taken in
the producer right after the enqueue call returns; same host clock), matched by the
sequence number in the payload. Percentiles from an HdrHistogram. Producer is open-loop:
job k is sent at k / rate whatever the answer time (up to 32 in flight). Per-job times
meet in a shared `SeqClock`.
"""

from __future__ import annotations

from benchmarks.bench import Bench
from benchmarks.report import Results
from benchmarks.sessions import PhaseOutcome, ServeSession
from benchmarks.systems import WorkerConfig

PERCENTILES = ("p50", "p95", "p99", "max")


def metric_name(rate: float, pct: str) -> str:
    return f"{rate:g}/s {pct}"


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
    for name in bench.systems:
        desc = bench.systems[name].describe(latency_config(bench, name))
        res.configs[name] = f"1 worker process, {desc}"
    capacity = int(sum(opts.latency_rates) * opts.latency_seconds * 1.1) + 100
    budget = len(opts.latency_rates) * (opts.latency_seconds + 5) + 60
    for round_no in range(opts.rounds):
        for name in bench.order(round_no):
            await bench.fresh(name)
            config = latency_config(bench, name)
            async with ServeSession(bench, name, config, capacity, budget) as session:
                for rate in opts.latency_rates:
                    out = await session.run_phase(rate, opts.latency_seconds)
                    record(res, name, round_no, out)
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


def record(res: Results, name: str, round_no: int, out: PhaseOutcome) -> None:
    summary = out.hist.summary_ms()
    for pct in PERCENTILES:
        res.add(
            name,
            metric_name(out.offered, pct),
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
            f"{name} r{round_no} {out.offered:g}/s: {out.missing} of {out.committed} jobs "
            f"not started within 1 s after the phase, {out.errors} enqueue errors"
        )
    print(
        f"  latency r{round_no} {name} {out.offered:g}/s: p50 {summary['p50']:.2f} "
        f"p99 {summary['p99']:.2f} max {summary['max']:.2f} ms ({out.hist.count} jobs)",
        flush=True,
    )
