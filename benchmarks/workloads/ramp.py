"""ramp: a sustained-rate ramp, one producer process and one worker process.

Per system, one session: one worker process serves (`--concurrency`, LISTEN on, poll
every 1 s); one producer process enqueues through the system's batch API
(`enqueue_many`) at a fixed offered rate, open loop, a batch of the jobs due every
1/`--ramp-batch-hz` s (100: 10 ms, so 60 jobs a batch at 6,000/s), at most 4 batches
outstanding. Each step offers one rate of `--ramp-rates` for `--ramp-step-seconds`
(30). Per step: the achieved rate, latency commit -> handler start (p50/p99: the job
waits from the moment its batch's call returned), the backlog (pending jobs in the
table) at the start and at the end of the step, and the CPU of the worker process, the
producer process, the server backends of the benchmark database (/proc: the server runs
on this host; background processes such as the WAL writer are not counted) and the
whole host (shared with other work). A step holds when the producer achieved >= 95%
of the offered rate, >= 99% of its jobs started within the settle time after it, latency
p99 <= `--ramp-p99-ms` (20) and the backlog did not grow (end <= start + 0.1 s of jobs).
The highest held rate is the last of the steps that all held from the first one. A
step that misses only the p99 bound does not stop the ramp: it goes on while the worker
keeps up (the throughput half: on time, all started, no growing backlog), and stops
`--ramp-past` (1) steps after the first one that did not keep up, or at once when the
producer fell short. Each step names the process nearest to a full core.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.bench import Bench
from benchmarks.report import Results
from benchmarks.sessions import ServeSession

HELD = "max held rate"
HELD_P99 = "held: p99"
KEPT = "max rate kept up with"
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """utime + stime of a process on this host, seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def host_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole host since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return float(sum(values) - idle), float(sum(values))


def pressure(resource: str) -> float:
    """Seconds since boot that some task waited for `resource` (cpu, io): /proc/pressure."""
    try:
        line = Path(f"/proc/pressure/{resource}").read_text().split("\n", 1)[0]
    except OSError:
        return 0.0
    return int(line.rsplit("total=", 1)[1]) / 1e6


@dataclass
class Snapshot:
    t: float
    backlog: int
    worker: float
    producer: float
    server: dict[int, float]
    host: tuple[float, float]
    cpu_stall: float
    io_stall: float


async def snapshot(conn: asyncpg.Connection, table: str, session: ServeSession) -> Snapshot:
    pids = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    )
    backlog = await conn.fetchval(f"SELECT count(*) FROM {table} WHERE status = 'pending'")
    return Snapshot(
        t=time.monotonic(),
        backlog=int(backlog),
        worker=sum(proc_cpu(w.pid) for w in session.workers),
        producer=sum(proc_cpu(p.pid) for p in session.producers),
        server={r["pid"]: proc_cpu(r["pid"]) for r in pids},
        host=host_busy(),
        cpu_stall=pressure("cpu"),
        io_stall=pressure("io"),
    )


def cpu_share(a: Snapshot, b: Snapshot) -> dict[str, float]:
    """CPU used between two snapshots, in cores (1.0 = one core busy all the time)."""
    seconds = b.t - a.t
    server = sum(b.server[pid] - a.server[pid] for pid in b.server if pid in a.server)
    busy = (b.host[0] - a.host[0]) / max(1.0, b.host[1] - a.host[1]) * (os.cpu_count() or 1)
    return {
        "worker": (b.worker - a.worker) / seconds,
        "producer": (b.producer - a.producer) / seconds,
        "server": server / seconds,
        "host": busy,
        # Share of the step during which some runnable task waited for a CPU (or for IO).
        "cpu_stalled": (b.cpu_stall - a.cpu_stall) / seconds,
        "io_stalled": (b.io_stall - a.io_stall) / seconds,
    }


def barrier(backlog_start: int, rate: float) -> int:
    """The most the backlog may grow over a held step: 0.1 s of jobs."""
    return backlog_start + int(0.1 * rate)


async def run_step(
    session: ServeSession, conn: asyncpg.Connection, table: str, rate: float, seconds: float
) -> dict[str, Any]:
    assert session.clock is not None
    producer = session.producers[0]
    lo = session.next_seq
    total = max(1, int(rate * seconds))
    before = await snapshot(conn, table, session)
    producer.send("run " + json.dumps({"rate": rate, "seconds": seconds, "seq0": lo}))
    session.next_seq = lo + total
    done = await producer.expect("phase_result", seconds + 60)
    after = await snapshot(conn, table, session)
    await asyncio.sleep(session.settle)
    hist, committed, missing = session.clock.latencies(lo, session.next_seq)
    cpu = cpu_share(before, after)
    step = {
        "offered": rate,
        "achieved": round(done["achieved_rate"]),
        "sent": done["sent"],
        "started": committed - missing,
        "errors": done["errors"],
        "p50_ms": hist.percentile_ms(50),
        "p99_ms": hist.percentile_ms(99),
        "max_ms": hist.max_ms(),
        "enqueue_call_p99_ms": done["call_ms"]["p99"],
        "backlog_start": before.backlog,
        "backlog_end": after.backlog,
        "cpu_cores": {k: round(v, 2) for k, v in cpu.items()},
    }
    return step


def verdict(step: dict[str, Any], p99_ms: float) -> tuple[bool, str]:
    """Whether the step held, and if not, what failed."""
    failed = []
    if step["achieved"] < 0.95 * step["offered"]:
        failed.append("producer short of the rate")
    if step["started"] < 0.99 * step["sent"]:
        failed.append("jobs not started by the end of the settle time")
    if step["p99_ms"] > p99_ms:
        failed.append(f"p99 over {p99_ms:g} ms")
    if step["backlog_end"] > barrier(step["backlog_start"], step["offered"]):
        failed.append("backlog grew")
    return not failed, ", ".join(failed)


def kept_up(step: dict[str, Any]) -> bool:
    """The throughput half of a held step: on time, all started, no growing backlog."""
    return bool(
        step["achieved"] >= 0.95 * step["offered"]
        and step["started"] >= 0.99 * step["sent"]
        and step["backlog_end"] <= barrier(step["backlog_start"], step["offered"])
    )


def bottleneck(step: dict[str, Any]) -> str:
    """Which process was nearest to a whole core (or the host to all of them)."""
    cpu = step["cpu_cores"]
    cores = os.cpu_count() or 1
    parts = [
        f"worker {cpu['worker']:.2f}",
        f"producer {cpu['producer']:.2f}",
        f"server {cpu['server']:.2f}",
        f"host {cpu['host']:.2f}/{cores}",
        f"CPU stall {cpu['cpu_stalled']:.0%}",
        f"IO stall {cpu['io_stalled']:.0%}",
    ]
    if cpu["host"] >= 0.9 * cores:
        mine = cpu["worker"] + cpu["producer"] + cpu["server"]
        why = f"host CPU saturated ({mine:.2f} of it this benchmark's)"
    elif max(cpu["worker"], cpu["producer"]) >= 0.9:
        why = "worker" if cpu["worker"] >= cpu["producer"] else "producer"
        why += " process CPU-bound (one core)"
    else:
        why = "no process at a full core"
    return f"{why} (cores: {', '.join(parts)})"


def describe(step: dict[str, Any], p99_ms: float) -> str:
    ok, why = verdict(step, p99_ms)
    return (
        f"offered {step['offered']:,.0f}/s achieved {step['achieved']:,}/s, started "
        f"{step['started']}/{step['sent']}, p50 {step['p50_ms']:.1f} p99 {step['p99_ms']:.1f}"
        f" ms, backlog {step['backlog_start']} -> {step['backlog_end']}, "
        f"{bottleneck(step)} -> {'held' if ok else 'NOT held: ' + why}"
    )


async def ramp(bench: Bench, name: str, res: Results) -> None:
    opts = bench.opts
    system = await bench.fresh(name)
    config = bench.drain_config(name, mode="serve")
    config.poll_interval = 1.0
    rates = opts.ramp_rates
    seconds = opts.ramp_step_seconds
    capacity = int(sum(rates) * seconds) + 10_000
    budget = len(rates) * (seconds + 5) + 120
    session = ServeSession(
        bench,
        name,
        config,
        capacity,
        budget,
        worker_processes=1,
        producer_processes=1,
        producer_connections=4,
        max_inflight=4,
        producer_op="rate_many",
        producer_extra={"batch_hz": opts.ramp_batch_hz},
    )
    conn = await asyncpg.connect(bench.dsn)
    steps: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None  # every criterion, every step up to it
    kept: dict[str, Any] | None = None  # the rate kept up with: no backlog, producer on time
    stop_held = stop_kept = "every rate of --ramp-rates held"
    held_so_far, past = True, 0
    try:
        async with session:
            for rate in rates:
                step = await run_step(session, conn, system.jobs_table(), rate, seconds)
                ok, why = verdict(step, opts.ramp_p99_ms)
                step["held"], step["kept_up"] = ok, kept_up(step)
                steps.append(step)
                print(f"  ramp {name}: {describe(step, opts.ramp_p99_ms)}", flush=True)
                if held_so_far and ok:
                    best = step
                elif held_so_far:
                    held_so_far = False
                    stop_held = f"{rate:,.0f}/s not held: {why}; {bottleneck(step)}"
                if step["kept_up"] and past == 0:
                    kept = step
                    continue
                if past == 0:
                    stop_kept = f"{rate:,.0f}/s not kept up with: {why}; {bottleneck(step)}"
                past += 1
                if past > opts.ramp_past or step["achieved"] < 0.95 * rate:
                    break
                # Let the backlog of a step that did not keep up drain before the next one.
                await drain_backlog(conn, system.jobs_table(), 30)
    finally:
        await conn.close()
    res.add(name, HELD, 0, best["offered"] if best else 0.0, steps=steps)
    res.add(name, KEPT, 0, kept["offered"] if kept else 0.0)
    if best is not None:
        res.add(name, HELD_P99, 0, best["p99_ms"])
    res.notes.append(
        f"{name}: highest held rate {best['offered'] if best else 0:,.0f}/s; stops: {stop_held}"
    )
    res.notes.append(
        f"{name}: highest rate kept up with (p99 aside) {kept['offered'] if kept else 0:,.0f}/s;"
        f" stops: {stop_kept}"
    )
    for step in steps:
        res.notes.append(f"{name} step: {describe(step, opts.ramp_p99_ms)}")


async def drain_backlog(conn: asyncpg.Connection, table: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not await conn.fetchval(f"SELECT count(*) FROM {table} WHERE status = 'pending'"):
            return
        await asyncio.sleep(0.5)


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("ramp", list(bench.systems))
    res.metric(HELD, "jobs/s")
    res.metric(KEPT, "jobs/s")
    res.metric(HELD_P99, "ms", higher_is_better=False)
    for name in bench.systems:
        desc = bench.systems[name].describe(bench.drain_config(name))
        res.configs[name] = f"1 worker process x {desc}"
    res.configs["producer"] = (
        f"1 process, enqueue_many batches every {1000 / opts.ramp_batch_hz:g} ms, open loop, "
        f"{opts.ramp_step_seconds:g} s per step"
    )
    for name in bench.systems:
        await ramp(bench, name, res)
    return res
