"""enqueue: producer throughput through each system's client API, and trigger cost.

Cells (closed loop, `--enqueue-seconds` each, producers in their own processes):
single enqueue with 1 and 16 concurrent producers (16 = 4 processes x 4), the batch API
with 1,000 jobs per call, and COPY where the system has one. Bare reference for bulk: a
server-side `INSERT ... SELECT generate_series` (no client at all).

Trigger cost (systems with a raw jobs table: bare, aiopgq): plain single-row INSERTs with
the NOTIFY trigger enabled vs `ALTER TABLE ... DISABLE TRIGGER USER`, at 1 and 16
producers, with the queue empty (a worker process keeping up) and with a backlog of
pending rows (no worker). aiopgq also runs with its per-queue switch (`set_notify`) off.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time

from benchmarks import processes
from benchmarks.bench import Bench
from benchmarks.config import AIOPGQ_SYSTEMS
from benchmarks.processes import ChildGroup
from benchmarks.report import Results
from benchmarks.stats import median
from benchmarks.systems import System

SINGLE_1 = "single x1"
SINGLE_16 = "single x16"
MANY = "enqueue_many(1000)"
COPY = "COPY(1000)"
SERVER_SIDE = "server-side generate_series"
PRODUCER_SHAPES = {1: (1, 1), 16: (4, 4)}  # producers -> (processes, coroutines each)


async def closed_loop_rate(
    bench: Bench, name: str, op: str, producers: int, seconds: float, **extra: object
) -> float:
    procs, each = PRODUCER_SHAPES[producers]
    spec = bench.producer_spec(name, op, seconds + 60, coroutines=each, seconds=seconds, **extra)
    async with ChildGroup() as group:
        children = await group.start_ready(f"{name}-{op}", spec, count=procs)
        processes.go(children)
        outs = await processes.results(children, timeout=seconds + 60)
    return float(sum(o["count"] / o["elapsed"] for o in outs))


async def raw_insert_rate(bench: Bench, name: str, producers: int, seconds: float) -> float:
    """Plain INSERTs: pgbench when installed (a C client, so the server is what is measured),
    else the Python producer."""
    pgbench = shutil.which("pgbench")
    if pgbench is None:
        return await closed_loop_rate(bench, name, "raw", producers, seconds)
    sql = bench.systems[name].raw_insert_sql().replace("$1::jsonb", "'{\"i\":1}'::jsonb")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(sql + ";\n")
    try:
        out = await run_pgbench(
            [
                pgbench,
                "-n",
                "-c",
                str(producers),
                "-j",
                str(min(producers, 2)),
                "-T",
                str(max(1, math.ceil(seconds))),
                "-f",
                f.name,
                bench.dsn,
            ],
            timeout=seconds + 60,
        )
    finally:
        os.unlink(f.name)
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if match is None:
        raise RuntimeError(f"unexpected pgbench output: {out[-500:]}")
    return float(match.group(1))


async def run_pgbench(args: list[str], timeout: float) -> str:
    """pgbench, tried twice: one aborted client (exit 2) on a shared server is not a result."""
    try:
        return await processes.run_command(args, timeout)
    except processes.ChildError as exc:
        print(f"  pgbench failed, retrying once: {exc}", flush=True)
        return await processes.run_command(args, timeout)


async def server_side_rate(bench: Bench, rows: int) -> float:
    system = await bench.fresh("bare")
    conn = await system.admin()
    try:
        started = time.perf_counter()
        await conn.execute(
            "INSERT INTO bench_bare.jobs (task, payload) SELECT 'bench.noop', "
            f"jsonb_build_object('i', g) FROM generate_series(1, {rows}) g"
        )
        return rows / (time.perf_counter() - started)
    finally:
        await conn.close()


async def client_cells(bench: Bench, res: Results, round_no: int) -> None:
    secs = bench.opts.enqueue_seconds
    for name in bench.order(round_no):
        system = bench.systems[name]
        cells = [(SINGLE_1, "one", 1), (SINGLE_16, "one", 16), (MANY, "many", 1)]
        if system.supports_copy:
            cells.append((COPY, "copy", 1))
        for metric, op, producers in cells:
            await bench.fresh(name)
            rate = await closed_loop_rate(bench, name, op, producers, secs, batch=1000)
            res.add(name, metric, round_no, rate)
            print(f"  enqueue r{round_no} {name} {metric}: {rate:,.0f} jobs/s", flush=True)
    if "bare" in bench.systems:
        rate = await server_side_rate(bench, max(100_000, bench.opts.jobs))
        res.add("bare", SERVER_SIDE, round_no, rate)


def trigger_metric(state: str, producers: int, trigger: str) -> str:
    return f"raw INSERT x{producers} {state}, trigger {trigger}"


def ratio_metric(state: str, producers: int) -> str:
    return f"trigger on/off x{producers} {state}"


async def trigger_cells(bench: Bench, res: Results, round_no: int) -> None:
    """Per system: on/off back to back (order alternating by round), per state and size."""
    opts = bench.opts
    for name in bench.order(round_no):
        system = bench.systems[name]
        if not system.supports_raw_insert:
            continue
        for state in ("empty", "backlog"):
            await bench.fresh(name)
            async with ChildGroup() as group:
                if state == "empty":
                    config = bench.drain_config(name, mode="serve")
                    config.poll_interval = 0.1
                    workers = await group.start_ready(
                        f"{name}-worker", bench.worker_spec(name, config, 600)
                    )
                    processes.go(workers)
                else:
                    await system.execute(
                        f"INSERT INTO {system.jobs_table()} (task, payload) "
                        "SELECT 'bench.noop', jsonb_build_object('i', g) "
                        f"FROM generate_series(1, {opts.backlog_jobs}) g",
                        f"ANALYZE {system.jobs_table()}",
                    )
                for producers in (1, 16):
                    rates = {}
                    modes = ["on", "off"] if round_no % 2 == 0 else ["off", "on"]
                    if name in AIOPGQ_SYSTEMS:
                        modes.append("notify switched off")
                    for mode in modes:
                        await set_trigger_mode(system, mode)
                        rates[mode] = await raw_insert_rate(
                            bench, name, producers, opts.trigger_seconds
                        )
                        res.add(name, trigger_metric(state, producers, mode), round_no, rates[mode])
                    await set_trigger_mode(system, "on")
                    res.add(
                        name, ratio_metric(state, producers), round_no, rates["on"] / rates["off"]
                    )
                    print(
                        f"  trigger r{round_no} {name} x{producers} {state}: "
                        + ", ".join(f"{m} {r:,.0f}/s" for m, r in rates.items()),
                        flush=True,
                    )


async def set_trigger_mode(system: System, mode: str) -> None:
    """`on`, `off` (DISABLE TRIGGER USER) or `notify switched off` (aiopgq's own switch)."""
    await system.set_triggers(mode != "off")
    set_queue_notify = getattr(system, "set_queue_notify", None)
    if set_queue_notify is not None:
        await set_queue_notify(mode != "notify switched off")


async def run(bench: Bench) -> Results:
    opts = bench.opts
    res = Results("enqueue", list(bench.systems))
    for metric in (SINGLE_1, SINGLE_16, MANY, COPY, SERVER_SIDE):
        res.metric(metric, "jobs/s")
    for state in ("empty", "backlog"):
        for producers in (1, 16):
            for mode in ("on", "off", "notify switched off"):
                res.metric(trigger_metric(state, producers, mode), "rows/s")
            res.metric(ratio_metric(state, producers), "ratio")
    res.configs["producers"] = "x1 = 1 process; x16 = 4 processes x 4 coroutines"
    res.configs["trigger cells"] = (
        f"{'pgbench' if shutil.which('pgbench') else 'Python asyncpg'} client, "
        f"{max(1, math.ceil(opts.trigger_seconds))}s each; empty = one worker process serving; "
        f"backlog = {opts.backlog_jobs} pending rows, no worker"
    )
    for round_no in range(opts.rounds):
        await client_cells(bench, res, round_no)
        await trigger_cells(bench, res, round_no)
    res.check("aiopgq enqueue_many(1000) jobs/s", res.median("aiopgq", MANY), ">=", 100_000)
    for state in ("empty", "backlog"):
        for producers in (1, 16):
            values = res.values("aiopgq", ratio_metric(state, producers))
            res.check(f"aiopgq {ratio_metric(state, producers)}", median(values), ">=", 0.85)
    return res
