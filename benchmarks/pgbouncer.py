"""pgbouncer: the drain through pgbouncer in transaction mode against the drain direct.

    python -m benchmarks.pgbouncer                     # ~2 minutes on 2 cores
    python -m benchmarks.pgbouncer --jobs 20000 --rounds 5
    python -m benchmarks.pgbouncer --pgbouncer /usr/sbin/pgbouncer --pgbouncer ~/pgbouncer-1.24

One worker process (`aiopgq worker benchmarks.pgbouncer:queue`, concurrency 100, no-op
handler) drains N jobs committed in one COPY; the clock runs from the commit until none is
pending or running. The arms differ only in the worker's --dsn:

- `direct`: the server itself (asyncpg's statement cache on: the pooler check says direct);
- `direct, cache 0`: the same with --statement-cache-size 0, which separates the cost of
  the cache from the cost of the hop;
- `pgbouncer <version>`: a pgbouncer in transaction mode that this script starts in front
  of the server, given as the DSN alone. Before 1.21 the worker finds it loses prepared
  statements and turns the cache off; from 1.21 on it runs with max_prepared_statements
  (--max-prepared-statements) and the cache stays on.

Every arm LISTENs on a direct connection (--listen-dsn), as docs/scaling.md advises.
After each drain a producer at the arm's address times --enqueues single enqueues, one
statement each (no worker running), where a round trip weighs more than in a drain.
Rounds are interleaved, their order rotating; the table shows medians, their ratio to
`direct`, and the median of each round's ratio (steadier on a shared host). It also times
what the pooler check costs a direct connection: opening a Queue of one connection and
its first query with and without it, and the check's statement alone.

The server comes from --dsn, else AIOPGQ_DSN, else DATABASE_URL, else
postgresql://postgres@127.0.0.1:5432/test; the script creates the database
`pgbouncer_bench` there and drops it at the end. PostgreSQL's settings are never changed.
pgbouncer is Debian's (`apt-get install pgbouncer`) unless --pgbouncer names others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import psutil

from aiopgq import Queue
from benchmarks.database import create_database, drop_database, server_info

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
DATABASE = "pgbouncer_bench"
SCHEMA = "pgbouncer_bench"
DEADLINE = 180.0
PREPARED_FROM = (1, 21)  # pgbouncer's first version with max_prepared_statements

# The worker processes' application (`aiopgq worker benchmarks.pgbouncer:queue`): its
# address comes from AIOPGQ_DSN, which differs per arm.
queue = Queue(os.environ.get("AIOPGQ_DSN") or DEFAULT_DSN, schema=SCHEMA)


@queue.task(name="bench.noop", max_attempts=3)
async def noop(n: int) -> None:
    return None


@dataclass
class Bouncer:
    version: str
    dsn: str
    max_prepared_statements: int | None
    proc: subprocess.Popen[bytes]


@dataclass
class Arm:
    label: str
    dsn: str
    cache_size: int | None = None  # an explicit statement_cache_size, else found out
    bouncer: Bouncer | None = None

    @property
    def connect_kwargs(self) -> dict[str, int]:
        return {} if self.cache_size is None else {"statement_cache_size": self.cache_size}

    @property
    def args(self) -> list[str]:
        return [] if self.cache_size is None else ["--statement-cache-size", str(self.cache_size)]


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pgbouncer", description=__doc__)
    parser.add_argument("--dsn", default=None, help="the PostgreSQL server (see above)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (20000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--concurrency", type=int, default=100, help="worker concurrency (100)")
    parser.add_argument(
        "--pool-size", type=int, default=20, help="pgbouncer default_pool_size (20)"
    )
    parser.add_argument(
        "--pgbouncer",
        action="append",
        metavar="PATH",
        help="a pgbouncer binary, one arm each (repeatable; default: Debian's)",
    )
    parser.add_argument(
        "--max-prepared-statements",
        type=int,
        default=200,
        metavar="N",
        help="for pgbouncer 1.21 and later (200, its default since 1.22)",
    )
    parser.add_argument(
        "--connects", type=int, default=200, help="connections timed per kind (200)"
    )
    parser.add_argument(
        "--enqueues", type=int, default=2000, help="single enqueues timed per arm (2000)"
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the database")
    return parser.parse_args()


def main() -> int:
    opts = options()
    return asyncio.run(measure(opts))


async def measure(opts: argparse.Namespace) -> int:
    server_dsn = opts.dsn or os.environ.get("AIOPGQ_DSN") or os.environ.get("DATABASE_URL")
    server_dsn = server_dsn or DEFAULT_DSN
    dsn = await create_database(server_dsn, DATABASE)
    info = await server_info(dsn)
    print(f"{info.short}; {opts.jobs} no-op jobs per drain", flush=True)
    binaries = opts.pgbouncer or [_debian_pgbouncer()]
    try:
        direct = Queue(dsn, schema=SCHEMA)
        await direct.migrate()
        with tempfile.TemporaryDirectory(prefix="pgbouncer-bench-") as tmp:
            opts.workdir = Path(tmp)
            with contextlib.ExitStack() as stack:
                bouncers = [
                    stack.enter_context(start_pgbouncer(b, dsn, Path(tmp) / str(i), opts))
                    for i, b in enumerate(binaries)
                ]
                arms = [
                    Arm("direct", dsn),
                    Arm("direct, cache 0", dsn, cache_size=0),
                ]
                arms += [Arm(f"pgbouncer {b.version}", b.dsn, bouncer=b) for b in bouncers]
                caches = {arm.label: await cache_verdict(arm) for arm in arms}
                connects = await connect_costs(dsn, opts.connects)
                print_connects(connects)
                figures = await rounds(direct, dsn, arms, opts)
        rows = summarise(arms, figures, caches)
        print_table(rows)
        print("load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        write(rows, connects, info.to_json(), opts)
    finally:
        if not opts.keep_db:
            await drop_database(server_dsn, DATABASE)
    return 0


async def rounds(
    direct: Queue, dsn: str, arms: list[Arm], opts: argparse.Namespace
) -> dict[str, dict[str, list[float]]]:
    """Per arm, per metric ("drain" in jobs/s, "enqueue" in enqueues/s), one figure a round."""
    figures: dict[str, dict[str, list[float]]] = {
        arm.label: {"drain": [], "enqueue": []} for arm in arms
    }
    async with direct:
        for round_no in range(opts.rounds):
            shift = round_no % len(arms)
            for arm in arms[shift:] + arms[:shift]:  # interleaved, rotating order
                rate, bouncer_cores = await drain(direct, dsn, arm, opts)
                enqueues = await enqueue_rate(arm, opts.enqueues)
                figures[arm.label]["drain"].append(rate)
                figures[arm.label]["enqueue"].append(enqueues)
                extra = f", pgbouncer {bouncer_cores:.2f} cores" if arm.bouncer else ""
                print(
                    f"round {round_no + 1} {arm.label:>18}: {rate:9,.0f} jobs/s{extra}; "
                    f"{enqueues:6,.0f} single enqueues/s",
                    flush=True,
                )
    return figures


async def enqueue_rate(arm: Arm, count: int) -> float:
    """Single enqueues one after the other from a producer at the arm's address: one
    statement each, so the cost of a round trip shows more than in the drain."""
    producer = Queue(arm.dsn, schema=SCHEMA, connect_kwargs=arm.connect_kwargs)
    async with producer:
        for n in range(20):  # the pool's connection, its types and statements
            await producer.enqueue("bench.noop", {"n": n})
        started = time.monotonic()
        for n in range(count):
            await producer.enqueue("bench.noop", {"n": n})
        return count / (time.monotonic() - started)


async def drain(direct: Queue, dsn: str, arm: Arm, opts: argparse.Namespace) -> tuple[float, float]:
    monitor = await asyncpg.connect(dsn)
    argv = [
        sys.executable,
        "-m",
        "aiopgq",
        "worker",
        "benchmarks.pgbouncer:queue",
        "--concurrency",
        str(opts.concurrency),
        "--listen-dsn",
        dsn,
        *arm.args,
    ]
    env = {**os.environ, "AIOPGQ_DSN": arm.dsn, "PYTHONPATH": str(ROOT)}
    env.pop("AIOPGQ_LISTEN_DSN", None)
    log = opts.workdir / "worker.log"
    worker = spawn(argv, env, log)
    try:
        await monitor.execute(f"TRUNCATE {SCHEMA}.jobs; CHECKPOINT")
        await wait_listening(monitor, worker, log)
        await asyncio.sleep(0.5)
        bouncer = psutil.Process(arm.bouncer.proc.pid) if arm.bouncer else None
        cpu0 = _cpu(bouncer)
        async with direct.pool.acquire() as conn, conn.transaction():
            await direct.copy_many(
                "bench.noop", ({"n": i} for i in range(opts.jobs)), connection=conn
            )
        started = time.monotonic()
        await wait_drained(monitor, started, worker, log)
        seconds = time.monotonic() - started
        cores = (_cpu(bouncer) - cpu0) / seconds
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(worker.wait, 30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        await monitor.close()
    return opts.jobs / seconds, cores


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=out)


def _cpu(proc: psutil.Process | None) -> float:
    if proc is None:
        return 0.0
    times = proc.cpu_times()
    return float(times.user + times.system)


async def wait_listening(
    conn: asyncpg.Connection, worker: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'aiopgq-listener %'"
    ):
        _check_alive(worker, log)
        if time.monotonic() > deadline:
            raise SystemExit(f"the worker did not start within {DEADLINE} s")
        await asyncio.sleep(0.05)


async def wait_drained(
    conn: asyncpg.Connection, started: float, worker: subprocess.Popen[bytes], log: Path
) -> None:
    while await conn.fetchval(
        f"SELECT EXISTS (SELECT 1 FROM {SCHEMA}.jobs WHERE status IN ('pending', 'running'))"
    ):
        _check_alive(worker, log)
        if time.monotonic() - started > DEADLINE:
            raise SystemExit(f"the drain did not finish within {DEADLINE} s")
        await asyncio.sleep(0.02)


def _check_alive(worker: subprocess.Popen[bytes], log: Path) -> None:
    if worker.poll() is not None:
        output = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"the worker exited ({worker.returncode}):\n{output}")


class _Said(logging.Handler):
    """What aiopgq's queue logger says, kept."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def cache_verdict(arm: Arm) -> str:
    """What a Queue at the arm's address finds when its pool connects (its DEBUG lines
    say it; the statement cache follows)."""
    if arm.cache_size is not None:
        return f"explicit (statement_cache_size={arm.cache_size})"
    said = _Said()
    queue_logger = logging.getLogger("aiopgq.queue")
    level = queue_logger.level
    queue_logger.addHandler(said)
    queue_logger.setLevel(logging.DEBUG)
    try:
        async with Queue(arm.dsn, schema=SCHEMA, max_pool_size=1) as probe:
            await probe.pool.fetchval("SELECT 1")
    finally:
        queue_logger.removeHandler(said)
        queue_logger.setLevel(level)
    text = " ".join(said.messages)
    if "loses prepared statements" in text:
        return "off (found a pooler that loses prepared statements)"
    if "keeps prepared statements" in text:
        return "on (found a pooler that keeps prepared statements)"
    return "on (found direct)"


async def connect_costs(dsn: str, count: int) -> dict[str, float]:
    """Median ms of opening a one-connection Queue and its first query, without the pooler
    check (an explicit statement_cache_size skips it) and with it, in turns; median µs of
    the check's statement alone on an open connection."""
    kinds = {"plain": {"statement_cache_size": 100}, "checked": {}}  # 100: asyncpg's default
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for turn in range(count):
        for kind in (("plain", "checked"), ("checked", "plain"))[turn % 2]:
            started = time.perf_counter()
            queue = Queue(dsn, schema=SCHEMA, max_pool_size=1, connect_kwargs=kinds[kind])
            await queue.open()
            await queue.pool.fetchval("SELECT count(*) FROM pg_class WHERE relname = $1", "jobs")
            times[kind].append(time.perf_counter() - started)
            await queue.close()
    conn = await asyncpg.connect(dsn)
    try:
        alone = []
        check = f"SELECT 1 WHERE pg_backend_pid() = {conn.get_server_pid()}"  # aiopgq's
        for _ in range(count * 5):
            started = time.perf_counter()
            await conn.execute(check)
            alone.append(time.perf_counter() - started)
    finally:
        await conn.close()
    return {
        "connect_and_first_query_ms": statistics.median(times["plain"]) * 1e3,
        "with_check_ms": statistics.median(times["checked"]) * 1e3,
        "check_alone_us": statistics.median(alone) * 1e6,
    }


def print_connects(c: dict[str, float]) -> None:
    print(
        f"direct Queue.open() and first query: {c['connect_and_first_query_ms']:.2f} ms, "
        f"{c['with_check_ms']:.2f} ms with the pooler check (medians); the check alone on "
        f"an open connection {c['check_alone_us']:.0f} µs",
        flush=True,
    )


def summarise(
    arms: list[Arm], figures: dict[str, dict[str, list[float]]], caches: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for arm in arms:
        bouncer = arm.bouncer
        row: dict[str, Any] = {
            "arm": arm.label,
            "statement_cache": caches[arm.label],
            "max_prepared_statements": bouncer.max_prepared_statements if bouncer else None,
        }
        for metric, runs in figures[arm.label].items():
            base = figures["direct"][metric]
            median = statistics.median(runs)
            row[metric] = {
                "per_s": median,
                "spread": (max(runs) - min(runs)) / 2,
                "ratio_to_direct": median / statistics.median(base),
                # The load of a shared host drifts; a round's arms ran back to back.
                "ratio_in_round": statistics.median(a / d for a, d in zip(runs, base, strict=True)),
                "rounds": runs,
            }
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'arm':<18} {'drain jobs/s':>16} {'/direct':>7} {'in round':>8} "
        f"{'enqueues/s':>12} {'/direct':>7} {'in round':>8}  statement cache"
    )
    for row in rows:
        cells = []
        for metric, width in (("drain", 16), ("enqueue", 12)):
            m = row[metric]
            rate = f"{m['per_s']:,.0f} ± {m['spread']:,.0f}"
            cells.append(
                f"{rate:>{width}} {m['ratio_to_direct']:>7.2f} {m['ratio_in_round']:>8.2f}"
            )
        print(f"{row['arm']:<18} {' '.join(cells)}  {row['statement_cache']}")
    print("(medians ± half the spread; /direct: of the medians; in round: median of each")
    print(" round's ratio)")


def write(
    rows: list[dict[str, Any]],
    connects: dict[str, float],
    server: dict[str, Any],
    opts: argparse.Namespace,
) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "pgbouncer.json"
    options = {k: v for k, v in vars(opts).items() if k not in ("dsn", "workdir")}
    payload = {"server": server, "options": options, "connect": connects, "arms": rows}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


def _debian_pgbouncer() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is None:
        raise SystemExit("no pgbouncer: apt-get install -y pgbouncer, or pass --pgbouncer PATH")
    return found


def _version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    match = re.search(r"PgBouncer (\d+\.\d+(?:\.\d+)?)", out.stdout)
    if match is None:
        raise SystemExit(f"{binary} --version says {out.stdout!r}: not a pgbouncer?")
    return match.group(1)


@contextlib.contextmanager
def start_pgbouncer(
    binary: str, dsn: str, workdir: Path, opts: argparse.Namespace
) -> Iterator[Bouncer]:
    """pgbouncer (pool_mode = transaction) in front of `dsn`'s server, on a free port."""
    version = _version(binary)
    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    prepared = None
    if tuple(int(x) for x in version.split(".")[:2]) >= PREPARED_FROM:
        prepared = opts.max_prepared_statements
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    workdir.mkdir(parents=True)
    (workdir / "users.txt").write_text(f'"{user}" ""\n')
    ini = workdir / "pgbouncer.ini"
    ini.write_text(
        f"""[databases]
* = host={parts.hostname or "127.0.0.1"} port={parts.port or 5432}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / "users.txt"}
pool_mode = transaction
default_pool_size = {opts.pool_size}
max_client_conn = 1000
logfile =
pidfile =
"""
        + (f"max_prepared_statements = {prepared}\n" if prepared is not None else "")
    )
    workdir.chmod(0o755)
    command = [binary, str(ini)]
    if os.geteuid() == 0:  # pgbouncer refuses root; it reads its config first
        command[1:1] = ["-u", "nobody"]
    with open(workdir / "pgbouncer.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc, workdir / "pgbouncer.log")
        netloc = f"{user}@127.0.0.1:{port}"
        yield Bouncer(version, parts._replace(netloc=netloc).geturl(), prepared, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"pgbouncer exited ({proc.returncode}):\n{log.read_text()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise SystemExit(f"pgbouncer not listening on {port} after 10 s:\n{log.read_text()}")


if __name__ == "__main__":
    sys.exit(main())
