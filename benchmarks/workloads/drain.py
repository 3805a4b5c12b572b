"""drain: bulk-enqueue N no-op jobs, then W worker processes drain them; jobs/s.

Timed from `go` (all workers connected and idle) to the last worker returning with its
completions committed. Procrastinate gets N / divisor jobs; rates are per second.
"""

from __future__ import annotations

from benchmarks.bench import Bench
from benchmarks.report import Results

METRIC = "drain"


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("drain", list(bench.systems))
    metric = res.metric(METRIC, "jobs/s")
    res.metric("worker CPU", "us/job", higher_is_better=False)
    res.metric("server CPU", "us/job", higher_is_better=False)
    res.metric("commits per 1000 jobs", "xact", higher_is_better=False)
    # Fixed costs inside the timed window: a 30,000-job drain lasts under a second.
    res.metric("first job", "ms", higher_is_better=False)
    res.metric("after last job", "ms", higher_is_better=False)
    res.headline = [METRIC, "worker CPU"]
    for name in bench.systems:
        config = bench.drain_config(name)
        desc = bench.systems[name].describe(config)
        res.configs[name] = f"{opts.workers} processes x {desc}, {opts.jobs_for(name)} jobs"
    for round_no in range(opts.rounds):
        for name in bench.order(round_no):
            await bench.fresh(name)
            jobs = opts.jobs_for(name)
            out = await bench.drain(name, jobs, opts.workers, bench.drain_config(name))
            res.add(
                name,
                metric,
                round_no,
                out.rate,
                jobs=jobs,
                seconds=out.seconds,
                per_worker=out.per_worker,
            )
            res.add(name, "worker CPU", round_no, out.cpu_seconds / max(1, out.handled) * 1e6)
            res.add(name, "server CPU", round_no, out.server_cpu_seconds / jobs * 1e6)
            res.add(name, "commits per 1000 jobs", round_no, out.commits / jobs * 1000)
            res.add(name, "first job", round_no, out.first_job_seconds * 1000)
            res.add(name, "after last job", round_no, out.tail_seconds * 1000)
            bench.note_inexact(res, name, round_no, out)
            print(
                f"  drain r{round_no} {name}: {out.rate:,.0f} jobs/s "
                f"({out.handled} in {out.seconds:.2f}s)",
                flush=True,
            )
    res.ratio_check("aiopgq/bare drain", metric, "aiopgq", "bare", ">=", 0.6)
    res.ratio_check("aiopgq/pgqueuer drain", metric, "aiopgq", "pgqueuer", ">=", 2.5)
    return res
