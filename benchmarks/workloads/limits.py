"""limits: what a queue concurrency limit that does not bind costs the drain.

In each round aiopgq drains N no-op jobs with W worker processes twice, in alternating
order: its queue without limits (the plain claim, as in `drain`), and with a queue
concurrency limit ten times the fleet's slots (`Queue.configure`): every claim then
goes through the limited claim (a lock per queue, the running jobs counted) and the
limit never holds a job back. Target: limited >= 0.8x unlimited.
"""

from __future__ import annotations

from benchmarks.bench import Bench
from benchmarks.report import Results
from benchmarks.systems.aiopgq_system import AiopgqSystem

METRIC = "drain"
PLAIN, LIMITED = "aiopgq", "aiopgq, queue limit"


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("limits", [PLAIN, LIMITED])
    metric = res.metric(METRIC, "jobs/s")
    res.metric("worker CPU", "us/job", higher_is_better=False)
    res.metric("commits per 1000 jobs", "xact", higher_is_better=False)
    if "aiopgq" not in bench.systems:
        res.notes.append("needs the aiopgq system (--systems aiopgq)")
        return res
    system = bench.systems["aiopgq"]
    assert isinstance(system, AiopgqSystem)
    config = bench.drain_config("aiopgq")
    limit = 10 * opts.workers * config.concurrency
    desc = f"{opts.workers} processes x {system.describe(config)}, {opts.jobs} jobs"
    res.configs = {PLAIN: desc, LIMITED: f"{desc}, configure(concurrency={limit})"}
    for round_no in range(opts.rounds):
        for name in (PLAIN, LIMITED) if round_no % 2 == 0 else (LIMITED, PLAIN):
            await bench.fresh("aiopgq")  # also drops the queue's limits
            if name == LIMITED:
                await system.configure_limits(concurrency=limit)
            out = await bench.drain("aiopgq", opts.jobs, opts.workers, config)
            res.add(name, metric, round_no, out.rate, jobs=opts.jobs, seconds=out.seconds)
            res.add(name, "worker CPU", round_no, out.cpu_seconds / max(1, out.handled) * 1e6)
            res.add(name, "commits per 1000 jobs", round_no, out.commits / opts.jobs * 1000)
            bench.note_inexact(res, name, round_no, out)
            print(
                f"  limits r{round_no} {name}: {out.rate:,.0f} jobs/s "
                f"({out.handled} in {out.seconds:.2f}s)",
                flush=True,
            )
    res.ratio_check("limit not binding / no limit, drain", metric, LIMITED, PLAIN, ">=", 0.8)
    return res
