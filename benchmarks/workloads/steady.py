"""steady: producers at a fixed offered rate while workers consume.

Per system, one session: `--steady-workers` worker processes serve; two producer
processes enqueue single jobs through the system's client API, open loop, each at half
the rate. The rate steps up x1.5 from `--steady-start-rate` (a quarter of it for
Procrastinate), `--steady-step-seconds` per step, while a step is held: producers
achieved >= 95% of the offered rate, >= 99% of the jobs started within a second after
the step, p99 < `--steady-p99-ms`. A step that misses only the p99 bound is tried once
more (the host is shared; one stall should not end the search). The highest held rate
is then held for `--steady-window` seconds. Latency = handler start - commit (as in
`latency`). One round: the search is sequential, so the systems run one after another.
"""

from __future__ import annotations

from benchmarks.bench import Bench
from benchmarks.report import Results
from benchmarks.sessions import PhaseOutcome, ServeSession

PRODUCERS = 2
HELD = "max held rate"
COMPLETION = "hold: completion rate"


def ladder(start: float, stop: float) -> list[float]:
    rates, r = [], start
    while r <= stop:
        rates.append(round(r, -1) if r >= 100 else round(r))
        r *= 1.5
    return rates


def held(step: PhaseOutcome, p99_ms: float) -> bool:
    return (
        not step.producer_limited
        and step.started >= 0.99 * step.sent
        and step.hist.percentile_ms(99) < p99_ms
    )


def describe(step: PhaseOutcome, p99_ms: float) -> str:
    return (
        f"offered {step.offered:,.0f}/s achieved {step.achieved:,.0f}/s, "
        f"started {step.started}/{step.sent}, p50 {step.hist.percentile_ms(50):.1f} "
        f"p99 {step.hist.percentile_ms(99):.1f} ms (enqueue call p99 {step.call_p99_ms:.1f} ms)"
        f" -> {'held' if held(step, p99_ms) else 'not held'}"
    )


async def climb(
    session: ServeSession, bench: Bench, name: str, res: Results
) -> PhaseOutcome | None:
    """Step the rate up; the last held step, or None."""
    opts = bench.opts
    best = None
    for rate in ladder(opts.steady_start_for(name), opts.steady_max_rate):
        step = await session.run_phase(rate, opts.steady_step_seconds)
        print(f"  steady {name}: {describe(step, opts.steady_p99_ms)}", flush=True)
        if not held(step, opts.steady_p99_ms) and not step.producer_limited:
            if step.started >= 0.99 * step.sent:
                step = await session.run_phase(rate, opts.steady_step_seconds)
                print(f"  steady {name} (retry): {describe(step, opts.steady_p99_ms)}")
        if not held(step, opts.steady_p99_ms):
            if step.producer_limited:
                res.notes.append(
                    f"{name}: search stopped by the producers (offered {step.offered:,.0f}/s, "
                    f"achieved {step.achieved:,.0f}/s)"
                )
            break
        best = step
    return best


async def search(bench: Bench, name: str, res: Results) -> None:
    opts = bench.opts
    await bench.fresh(name)
    config = bench.drain_config(name, mode="serve")
    config.poll_interval = 1.0
    rates = ladder(opts.steady_start_for(name), opts.steady_max_rate)
    capacity = int(sum(rates) * opts.steady_step_seconds * 2 + rates[-1] * opts.steady_window)
    budget = len(rates) * 2 * (opts.steady_step_seconds + 3) + opts.steady_window + 120
    session = ServeSession(
        bench,
        name,
        config,
        capacity,
        budget,
        worker_processes=opts.steady_workers,
        producer_processes=PRODUCERS,
        producer_connections=16,
        max_inflight=128,
    )
    async with session:
        best = await climb(session, bench, name, res)
        if best is None:
            res.notes.append(f"{name}: not even {opts.steady_start_for(name):g}/s was held")
            return
        hold = await session.run_phase(best.offered, opts.steady_window)
    print(f"  steady {name} hold {opts.steady_window:g}s: {describe(hold, opts.steady_p99_ms)}")
    summary = hold.hist.summary_ms()
    res.add(name, HELD, 0, best.offered)
    res.add(name, COMPLETION, 0, hold.started / hold.seconds)
    for pct in ("p50", "p99", "max"):
        res.add(name, f"hold: {pct}", 0, summary[pct])
    res.notes.append(
        f"{name}: held {best.offered:,.0f}/s for {hold.seconds:.0f}s: {hold.started}/"
        f"{hold.sent} started, p99 {summary['p99']:.1f} ms"
        f"{'' if held(hold, opts.steady_p99_ms) else ' (NOT held over the full window)'}"
    )


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("steady", list(bench.systems))
    res.metric(HELD, "jobs/s")
    res.metric(COMPLETION, "jobs/s")
    for pct in ("p50", "p99", "max"):
        res.metric(f"hold: {pct}", "ms", higher_is_better=False)
    for name in bench.systems:
        desc = bench.systems[name].describe(bench.drain_config(name))
        res.configs[name] = f"{opts.steady_workers} worker processes x {desc}"
    res.configs["producers"] = f"{PRODUCERS} processes, single enqueue, open loop"
    for name in bench.systems:
        await search(bench, name, res)
    return res
