"""Scaling: drain throughput on 1, 2, 4 and 8 worker processes, and on simulated hosts.

    python -m benchmarks.scaling                      # ~3 minutes on 2 cores
    python -m benchmarks.scaling --jobs 20000 --rounds 1 --no-hosts

Each configuration runs `aiopgq worker benchmarks.scaling_app:queue --processes P`
(the supervisor of the CLI, concurrency 100, no-op handler): once all workers LISTEN,
N jobs are committed in one COPY and the clock runs until none is pending or running.
Simulated hosts are network namespaces joined by veth pairs (benchmarks/netns.py; needs
root, skipped with a message otherwise): H namespaces with P processes each reach the
database over the bridge instead of loopback.

The benchmark starts its own embedded PostgreSQL with durable settings (fsync,
synchronous_commit and full_page_writes on; max_connections 200), so that it can listen
on the namespaces' bridge. Per configuration it reports jobs/s, CPU cores used by
PostgreSQL and by the workers, commits per 1,000 jobs, and what the active backends were
doing (sampled from pg_stat_activity every 20 ms): running on CPU, writing WAL, or
waiting on a lock. aiopgq's own locks are all advisory (the maintenance leader's is only
ever tried, never waited for; producers and workers take the NOTIFY-skipping locks
without waiting on the claim path), so coordination added by aiopgq would show as
`Lock:advisory` waits, reported apart from PostgreSQL's row and relation-extension waits.
Traffic is bounded: N jobs per run, every run under a 120 s deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import psutil

from aiopgq import Queue
from aiopgq.embedded import EmbeddedServer, start_throwaway
from benchmarks import netns

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
INSIDE = "AIOPGQ_SCALING_INSIDE"  # set in the re-exec inside the database namespace
DEADLINE = 120.0
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


@dataclass
class Config:
    label: str
    placement: list[tuple[str | None, int]]  # (namespace or None for this host, processes)

    @property
    def processes(self) -> int:
        return sum(p for _, p in self.placement)


@dataclass
class Run:
    rate: float
    pg_cores: float
    worker_cores: float
    commits_per_1000: float
    waits: Counter[str] = field(default_factory=Counter)


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", default="1,2,4,8", help="single-host process counts")
    parser.add_argument("--hosts", type=int, default=4, help="simulated hosts")
    parser.add_argument("--host-processes", default="1,2", help="processes per simulated host")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--no-hosts", action="store_true", help="skip the simulated hosts")
    parser.add_argument(
        "--plot-only", action="store_true", help="redraw the PNG from results/scaling.json"
    )
    parser.add_argument("--host-namespaces", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> int:
    opts = options()
    if opts.plot_only:
        saved = json.loads((RESULTS / "scaling.json").read_text())
        plot(saved["results"], saved["server"], saved.get("load_average_at_end"))
        return 0
    if not opts.no_hosts and not os.environ.get(INSIDE):
        reason = netns.why_not()
        if reason is None:
            with netns.simulated_hosts(opts.hosts) as hosts:
                argv = [sys.executable, "-m", "benchmarks.scaling", *sys.argv[1:]]
                argv += ["--host-namespaces", ",".join(hosts.host_namespaces)]
                env = {**os.environ, INSIDE: "1"}
                return subprocess.run(
                    netns.in_namespace(hosts.db_namespace, argv), env=env
                ).returncode
        print(f"skipping the simulated hosts: {reason} (run as root for them)", flush=True)
        opts.no_hosts = True
    return asyncio.run(measure(opts))


def configs(opts: argparse.Namespace) -> list[Config]:
    made = [Config(f"1 host x {p}", [(None, p)]) for p in map(int, opts.processes.split(","))]
    namespaces = [n for n in opts.host_namespaces.split(",") if n]
    if not opts.no_hosts and namespaces:
        for p in map(int, opts.host_processes.split(",")):
            made.append(Config(f"{len(namespaces)} hosts x {p}", [(n, p) for n in namespaces]))
    return made


def start_server(with_hosts: bool) -> EmbeddedServer:
    settings = {**DURABLE, "max_connections": "200"}
    if with_hosts:
        # The server listens on its 0700 Unix socket only by default: open TCP on the bridge
        # for the namespaces' subnet (trusted: the benchmark's own network, while it runs).
        folder = Path(tempfile.mkdtemp(prefix="aiopgq-scaling-"))
        folder.chmod(0o755)
        hba = folder / "pg_hba.conf"
        hba.write_text(f"local all all trust\nhost all all {netns.SUBNET}.0/24 trust\n")
        hba.chmod(0o644)
        settings |= {"listen_addresses": netns.DB_ADDRESS, "hba_file": str(hba)}
    return start_throwaway(settings=settings)


async def measure(opts: argparse.Namespace) -> int:
    runs = configs(opts)
    server = start_server(with_hosts=len(runs) > len(opts.processes.split(",")))
    with server:
        dsn = server.ensure_database("scaling")
        queue = Queue(dsn, schema="scaling")
        await queue.migrate()
        info = await describe_server(dsn)
        print(f"{info}; {os.cpu_count()} cores; {opts.jobs} no-op jobs per run", flush=True)
        results: dict[str, list[Run]] = {c.label: [] for c in runs}
        async with queue:
            for round_no in range(opts.rounds):
                shift = round_no % len(runs)
                for config in runs[shift:] + runs[:shift]:  # interleaved, rotating order
                    run = await drain(queue, server, dsn, config, opts)
                    results[config.label].append(run)
                    print(
                        f"round {round_no + 1} {config.label:>12}: {run.rate:9,.0f} jobs/s, "
                        f"PostgreSQL {run.pg_cores:.2f} cores, workers {run.worker_cores:.2f}",
                        flush=True,
                    )
    summary = summarise(runs, results)
    print_table(summary)
    print(
        "load average (1, 5, 15 min) at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    write(summary, info, opts)
    return 0


async def describe_server(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        shown = {k: await conn.fetchval(f"SHOW {k}") for k in (*DURABLE, "shared_buffers")}
    finally:
        await conn.close()
    return f"PostgreSQL {version} (" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        try:
            for p in (proc, *proc.children(recursive=True)):
                times = p.cpu_times()
                total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


async def drain(
    queue: Queue, server: EmbeddedServer, dsn: str, config: Config, opts: argparse.Namespace
) -> Run:
    monitor = await asyncpg.connect(dsn)
    supervisors: list[subprocess.Popen[bytes]] = []
    try:
        await monitor.execute("TRUNCATE scaling.jobs; CHECKPOINT")
        for namespace, processes in config.placement:
            host_dsn = dsn
            if namespace is not None:  # over TCP to the bridge address, not the local socket
                database = urlsplit(dsn).path
                host_dsn = f"postgresql://postgres@{netns.DB_ADDRESS}:{server.port}{database}"
            argv = [
                sys.executable,
                "-m",
                "aiopgq",
                "worker",
                "benchmarks.scaling_app:queue",
                "--processes",
                str(processes),
                "--concurrency",
                str(opts.concurrency),
            ]
            if namespace is not None:
                argv = netns.in_namespace(namespace, argv)
            env = {**os.environ, "AIOPGQ_DSN": host_dsn, "PYTHONPATH": str(ROOT)}
            supervisors.append(spawn(argv, env))
        await wait_listening(monitor, config.processes)
        await asyncio.sleep(0.5)
        server_proc = [psutil.Process(server.pid)]
        worker_procs = [psutil.Process(s.pid) for s in supervisors]
        pg0, w0 = cpu_seconds(server_proc), cpu_seconds(worker_procs)
        commits0 = await commits(monitor)
        async with queue.pool.acquire() as conn, conn.transaction():
            await queue.copy_many(
                "scaling.noop", ({"n": i} for i in range(opts.jobs)), connection=conn
            )
        started = time.monotonic()
        sampling = asyncio.create_task(sample_waits(dsn))
        try:
            await wait_drained(monitor, started)
        finally:
            sampling.cancel()
            waits = await asyncio.gather(sampling, return_exceptions=True)
        seconds = time.monotonic() - started
        pg = cpu_seconds(server_proc) - pg0
        worker = cpu_seconds(worker_procs) - w0
        commits_made = await commits(monitor) - commits0
    finally:
        for s in supervisors:
            if s.poll() is None:
                s.send_signal(signal.SIGTERM)
        for s in supervisors:
            try:
                await asyncio.to_thread(s.wait, 30)
            except subprocess.TimeoutExpired:
                s.kill()
        await monitor.close()
    sampled = waits[0] if isinstance(waits[0], Counter) else Counter()
    return Run(
        rate=opts.jobs / seconds,
        pg_cores=pg / seconds,
        worker_cores=worker / seconds,
        commits_per_1000=commits_made / opts.jobs * 1000,
        waits=sampled,
    )


def spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    out = subprocess.DEVNULL
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=out)


async def wait_listening(conn: asyncpg.Connection, processes: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while (
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'aiopgq-listener %'"
        )
        < processes
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"{processes} workers did not start within {DEADLINE} s")
        await asyncio.sleep(0.05)


async def wait_drained(conn: asyncpg.Connection, started: float) -> None:
    while await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM scaling.jobs WHERE status IN ('pending', 'running'))"
    ):
        if time.monotonic() - started > DEADLINE:
            raise SystemExit(f"the drain did not finish within {DEADLINE} s")
        await asyncio.sleep(0.02)


async def commits(conn: asyncpg.Connection) -> int:
    return int(
        await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    )


async def sample_waits(dsn: str) -> Counter[str]:
    """What active backends are doing, every 20 ms, until cancelled: 'CPU' when running."""
    seen: Counter[str] = Counter()
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            rows = await conn.fetch(
                "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w, count(*) AS n "
                "FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' GROUP BY 1"
            )
            seen.update({r["w"]: r["n"] for r in rows})
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        return seen
    finally:
        await conn.close()


def summarise(runs: list[Config], results: dict[str, list[Run]]) -> list[dict[str, Any]]:
    rows = []
    for config in runs:
        done = results[config.label]
        waits: Counter[str] = Counter()
        for run in done:
            waits.update(run.waits)
        total = sum(waits.values()) or 1
        lock_waits = sum(n for w, n in waits.items() if w.startswith("Lock:"))
        advisory = waits.get("Lock:advisory", 0)  # aiopgq's own locks are all advisory
        rows.append(
            {
                "config": config.label,
                "processes": config.processes,
                "hosts": len(config.placement),
                "jobs_s": statistics.median(r.rate for r in done),
                "jobs_s_rounds": [round(r.rate) for r in done],
                "pg_cores": statistics.median(r.pg_cores for r in done),
                "worker_cores": statistics.median(r.worker_cores for r in done),
                "commits_per_1000_jobs": statistics.median(r.commits_per_1000 for r in done),
                "lock_wait_share": lock_waits / total,
                "advisory_wait_share": advisory / total,
                "active_backend_samples": {w: round(n / total, 3) for w, n in waits.most_common(6)},
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'config':>12} | {'jobs/s':>9} | {'PG cores':>8} | {'worker cores':>12} | "
        f"{'commits/1k':>10} | {'lock waits':>10} | {'advisory':>8} | active backends (share)"
    )
    for r in rows:
        top = ", ".join(f"{w} {s:.0%}" for w, s in list(r["active_backend_samples"].items())[:3])
        print(
            f"{r['config']:>12} | {r['jobs_s']:9,.0f} | {r['pg_cores']:8.2f} | "
            f"{r['worker_cores']:12.2f} | {r['commits_per_1000_jobs']:10.1f} | "
            f"{r['lock_wait_share']:10.1%} | {r['advisory_wait_share']:8.1%} | {top}"
        )


def write(rows: list[dict[str, Any]], server: str, opts: argparse.Namespace) -> None:
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "server": server,
        "cores": os.cpu_count(),
        "jobs": opts.jobs,
        "rounds": opts.rounds,
        "concurrency": opts.concurrency,
    }
    (RESULTS / "scaling.json").write_text(json.dumps({**meta, "results": rows}, indent=2) + "\n")
    plot(rows, server, meta["load_average_at_end"])


def plot(rows: list[dict[str, Any]], server: str, load: list[float] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single = [r for r in rows if r["hosts"] == 1]
    hosts = [r for r in rows if r["hosts"] > 1]
    fig, left = plt.subplots(figsize=(8, 4.5))
    x = [r["processes"] for r in single]
    left.plot(x, [r["jobs_s"] for r in single], "o-", color="C0", label="one host")
    for r in hosts:
        left.plot(r["processes"], r["jobs_s"], "s", color="C3", markersize=9)
        left.annotate(
            r["config"],
            (r["processes"], r["jobs_s"]),
            textcoords="offset points",
            xytext=(-8, 8),
            ha="right",
            fontsize=8,
            color="C3",
        )
    if hosts:
        left.plot([], [], "s", color="C3", label="simulated hosts (network namespaces)")
    left.set_xscale("log", base=2)
    left.set_xticks([1, 2, 4, 8], labels=["1", "2", "4", "8"])
    left.set_xlabel("worker processes (concurrency 100 each)")
    left.set_ylabel("drain, no-op jobs/s")
    left.set_ylim(0, max(r["jobs_s"] for r in rows) * 1.35)
    right = left.twinx()
    right.plot(x, [r["pg_cores"] for r in single], "^--", color="C2", label="PostgreSQL CPU")
    right.plot(x, [r["worker_cores"] for r in single], "v--", color="C1", label="workers' CPU")
    right.set_ylabel(f"CPU cores used (of {os.cpu_count()})")
    right.set_ylim(0, (os.cpu_count() or 2) * 1.1)
    lines = left.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    left.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    shared = f", load average {load[0]:.1f} at the end (shared machine)" if load else ""
    left.set_title(f"aiopgq scale-out: {server}\n{os.cpu_count()} cores{shared}", fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "scaling.png", dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
