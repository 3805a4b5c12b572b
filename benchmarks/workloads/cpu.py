"""cpu: worker CPU per job, and worker memory with many concurrent sleeping jobs.

CPU: one worker process drains `--cpu-jobs` no-op jobs; user+system seconds from
`getrusage(RUSAGE_SELF)` in that process, from `go` to its return, per job.
RSS: one worker process with concurrency = `--sleeping-jobs` takes that many jobs that
each `asyncio.sleep(60)`; RSS (psutil) once they all run, minus RSS when it was idle.
"""

from __future__ import annotations

import time

import psutil

from benchmarks import processes
from benchmarks.bench import Bench
from benchmarks.processes import ChildError, ChildGroup
from benchmarks.report import Results
from benchmarks.systems import WorkerConfig

CPU = "worker CPU per job"
RATE = "1-process drain"
RSS_IDLE = "RSS idle"
RSS_BUSY = "RSS with sleeping jobs"
RSS_PER_JOB = "RSS per sleeping job"
SLEEP_TIMEOUT = 90.0


def sleeper_config(bench: Bench, name: str, jobs: int) -> WorkerConfig:
    config = bench.drain_config(name, mode="serve")
    config.concurrency = jobs
    if name == "bare":
        config.extra = {"concurrent_handlers": True}
    return config


async def measure_rss(bench: Bench, name: str, jobs: int) -> tuple[float, float, int]:
    """(idle RSS, busy RSS, jobs running when measured) in bytes."""
    system = await bench.fresh(name)
    await system.bulk_load(jobs, lambda i: {"sleep": 60})
    spec = bench.worker_spec(
        name, sleeper_config(bench, name, jobs), SLEEP_TIMEOUT + 30, report_running_at=jobs
    )
    async with ChildGroup() as group:
        (child,) = await group.start_ready(f"{name}-sleepers", spec)
        proc = psutil.Process(child.pid)
        idle = proc.memory_info().rss
        processes.go([child])
        running = jobs
        try:
            await child.expect("progress", SLEEP_TIMEOUT)
        except ChildError:
            running = -1
        busy = proc.memory_info().rss
    return idle, busy, running


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("cpu", list(bench.systems))
    res.metric(CPU, "us/job", higher_is_better=False)
    res.metric(RATE, "jobs/s")
    res.metric(RSS_IDLE, "MiB", higher_is_better=False)
    res.metric(RSS_BUSY, "MiB", higher_is_better=False)
    res.metric(RSS_PER_JOB, "KiB", higher_is_better=False)
    for name in bench.systems:
        desc = bench.systems[name].describe(bench.drain_config(name))
        res.configs[name] = f"1 process x {desc}, {opts.jobs_for(name, opts.cpu_jobs)} jobs"
    res.configs["sleepers"] = f"{opts.sleeping_jobs} jobs sleeping 60 s, concurrency = that"
    for round_no in range(opts.rounds):
        for name in bench.order(round_no):
            await bench.fresh(name)
            jobs = opts.jobs_for(name, opts.cpu_jobs)
            out = await bench.drain(name, jobs, 1, bench.drain_config(name))
            bench.note_inexact(res, name, round_no, out)
            res.add(name, CPU, round_no, out.cpu_seconds / max(1, out.handled) * 1e6)
            res.add(name, RATE, round_no, out.rate)
            print(
                f"  cpu r{round_no} {name}: {out.cpu_seconds / max(1, out.handled) * 1e6:.1f}"
                f" us/job, {out.rate:,.0f} jobs/s",
                flush=True,
            )
    for name in bench.systems:
        started = time.monotonic()
        idle, busy, running = await measure_rss(bench, name, opts.sleeping_jobs)
        if running < 0:
            res.notes.append(
                f"{name}: {opts.sleeping_jobs} sleeping jobs not all running "
                f"within {SLEEP_TIMEOUT:.0f}s; RSS taken then"
            )
        res.add(name, RSS_IDLE, 0, idle / 2**20)
        res.add(name, RSS_BUSY, 0, busy / 2**20)
        res.add(name, RSS_PER_JOB, 0, (busy - idle) / 1024 / opts.sleeping_jobs)
        print(
            f"  rss {name}: idle {idle / 2**20:.0f} MiB, {opts.sleeping_jobs} sleeping "
            f"{busy / 2**20:.0f} MiB ({time.monotonic() - started:.0f}s)",
            flush=True,
        )
    res.check("aiopgq worker CPU us/job", res.median("aiopgq", CPU), "<=", 60)
    return res
