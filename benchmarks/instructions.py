"""Server instructions per enqueued row and per drained job, counted by callgrind.

Wall-clock rates on a shared 2-core machine move by 10-20% from run to run; the
instructions a PostgreSQL backend executes for the same statement do not. This
tool starts a throwaway PostgreSQL (the binaries the embedded server would use)
under `valgrind --tool=callgrind --trace-children=yes` and reports, per enqueue
path, the backend's instructions per row with aiopgq's insert trigger enabled and
disabled. A worker of the queue is awake throughout (its advisory lock is held),
so single-row inserts take the trigger's usual busy path: no NOTIFY. For the
drain, it compares aiopgq's claim of 100 jobs (with the previous 100 `done`s in the
same statement) with the bare loop's dequeue of 100 plus its completion by id, and
(trees with queue limits) the limited claim of a queue whose concurrency limit does
not bind, with 300 jobs running elsewhere for it to count.

    python -m benchmarks.instructions            # needs valgrind (apt install valgrind)
    PG_BIN_DIR=/usr/lib/postgresql/15/bin python -m benchmarks.instructions

Each figure is the difference between two fresh backends that run W and W + K
statements, divided by K rows: connection start-up, catalog caches and the plan
cache's first five custom plans are left out. Writes `instructions.json` into
`--results-dir`. `--setup-sql FILE` runs FILE after the migrations (schema `cg`),
to count a variant of the schema against the shipped one.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from aiopgq import Queue
from aiopgq.embedded import Binaries, binaries, socket_dsn
from benchmarks.systems import bare

SCHEMA = "cg"
QUEUE = "bench"
BATCH = 1000
DRAIN_BATCH = 100
Statement = Callable[[asyncpg.Connection], Awaitable[Any]]
BARE_FLAVORS = {
    "bare (dequeue 100, complete 100)": bare.BARE,
    "bare-leased (same, lease + finish indexed)": bare.LEASED,
}


def _ints(statement: str, *arrays: list[int]) -> list[Any]:
    """Int arrays as the statement takes them: text literals (`::text::bigint[]`, since
    the change that sent them so) or lists (an older tree, with --baseline)."""
    if "::text::bigint[]" in statement:
        return ["{" + ",".join(map(str, a)) + "}" for a in arrays]
    return list(arrays)


def _results(statement: str, count: int) -> Any:
    """`count` None results as the statement takes them: a JSON object of the results
    there are (since the change that sent them so) or a list (an older tree)."""
    if "::text::jsonb) -> j.id::text" in statement:
        return "{}"
    return [None] * count


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--results-dir", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--port", type=int, default=5499)
    parser.add_argument(
        "--setup-sql", type=Path, help="SQL run after the migrations (to compare a variant)"
    )
    opts = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt install valgrind")
    local = binaries()
    run_dir = local.run_dir
    server = start_server(local, opts.port)
    try:
        setup = opts.setup_sql.read_text() if opts.setup_sql else None
        results = asyncio.run(measure_all(run_dir, opts.port, setup))
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=120)
        shutil.rmtree(run_dir, ignore_errors=True)
    opts.results_dir.mkdir(parents=True, exist_ok=True)
    (opts.results_dir / "instructions.json").write_text(json.dumps(results, indent=2) + "\n")


def start_server(local: Binaries, port: int) -> subprocess.Popen[bytes]:
    run_dir = local.run_dir
    bin_dir, data = local.bin_dir, run_dir / "data"
    as_account = local.popen_kwargs
    subprocess.run(
        # Trust on the socket in run_dir (0700, the server account's) only: no TCP.
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"],
        check=True,
        capture_output=True,
        **as_account,
    )
    command = ["valgrind", "--tool=callgrind", "--trace-children=yes"]
    command += [f"--callgrind-out-file={run_dir}/cg.%p", str(bin_dir / "postgres")]
    command += ["-D", str(data), "-p", str(port), "-k", str(run_dir), "-c", "autovacuum=off"]
    command += ["-c", "listen_addresses=", "-c", "unix_socket_permissions=0700"]
    with open(run_dir / "server.log", "wb") as log:  # the server keeps its own copy
        return subprocess.Popen(command, stdout=log, stderr=log, **as_account)


async def connect(dsn: str, timeout: float = 120.0) -> asyncpg.Connection:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncpg.connect(dsn)
        except (OSError, asyncpg.CannotConnectNowError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def backend_instructions(run_dir: Path, dsn: str, statement: Statement, count: int) -> int:
    """Instructions of a fresh backend that runs `statement` `count` times, then exits."""
    conn = await connect(dsn)
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    for _ in range(count):
        await statement(conn)
    await conn.close()
    dump = run_dir / f"cg.{pid}"
    for _ in range(600):  # callgrind writes the file when the backend exits
        await asyncio.sleep(0.1)
        text = dump.read_text() if dump.exists() else ""
        match = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if match:
            dump.unlink()
            return int(match.group(1))
    raise RuntimeError(f"no callgrind output for backend {pid}")


async def per_row(run_dir: Path, dsn: str, statement: Statement, rows: int, k: int) -> float:
    warm = 8  # past the plan cache's five custom plans
    base = await backend_instructions(run_dir, dsn, statement, warm)
    more = await backend_instructions(run_dir, dsn, statement, warm + k)
    return (more - base) / (k * rows)


async def measure_all(run_dir: Path, port: int, setup: str | None) -> dict[str, Any]:
    admin = await connect(socket_dsn(run_dir, port, "postgres"))
    await admin.execute("CREATE DATABASE cg")
    version = await admin.fetchval("SHOW server_version")
    await admin.close()
    dsn = socket_dsn(run_dir, port, "cg")
    queue = Queue(dsn, schema=SCHEMA)
    await queue.migrate()
    task = queue.task(name="bench.noop", queue=QUEUE)(_noop)
    payloads = [{"i": i} for i in range(BATCH)]
    raw_sql = f"INSERT INTO {SCHEMA}.jobs (task, queue, payload) VALUES ('bench.noop', $1, $2)"
    cases: dict[str, tuple[Statement, int, int]] = {
        "enqueue_many(1000)": (lambda c: task.enqueue_many(payloads, connection=c), BATCH, 4),
        "copy_many(1000)": (lambda c: task.copy_many(payloads, connection=c), BATCH, 4),
        "enqueue (one job)": (lambda c: task.enqueue(i=1, connection=c), 1, 40),
        "raw single-row INSERT": (lambda c: c.execute(raw_sql, QUEUE, '{"i":1}'), 1, 40),
    }
    admin = await connect(dsn)
    if setup:
        await admin.execute(setup)
    awake = await connect(dsn)  # a worker of the queue is awake: producers skip NOTIFY
    await awake.fetchval(queue.sql.hold_awake, SCHEMA, [QUEUE])
    results: dict[str, Any] = {"postgres": version, "batch": BATCH, "instructions_per_row": {}}
    print(f"PostgreSQL {version}: server instructions per row (callgrind)")
    print(f"{'path':24s} {'trigger on':>11s} {'trigger off':>12s} {'trigger share':>14s}")
    try:
        for name, (statement, rows, k) in cases.items():
            figures: dict[str, float] = {}
            for trigger in ("on", "off"):
                switch = "ENABLE" if trigger == "on" else "DISABLE"
                await admin.execute(f"ALTER TABLE {SCHEMA}.jobs {switch} TRIGGER USER")
                await admin.execute(f"TRUNCATE {SCHEMA}.jobs")
                figures[trigger] = await per_row(run_dir, dsn, statement, rows, k)
            share = 1 - figures["off"] / figures["on"]
            results["instructions_per_row"][name] = figures
            print(f"{name:24s} {figures['on']:11,.0f} {figures['off']:12,.0f} {share:14.0%}")
        results["instructions_per_drained_job"] = await measure_drain(run_dir, dsn, admin, queue)
    finally:
        await awake.close()
        await admin.close()
    return results


async def measure_drain(
    run_dir: Path, dsn: str, admin: asyncpg.Connection, queue: Queue
) -> dict[str, float]:
    """Per drained job: aiopgq's claim of 100 with the previous 100 `done`s riding in the
    same statement, against the bare loop's dequeue of 100 plus completion by id, and
    the same bare loop with a lease and a finish time, each indexed (`bare.LEASED`)."""
    for flavor in BARE_FLAVORS.values():
        await admin.execute(flavor.install)
    await admin.execute("RESET search_path")
    claim = queue.sql.claim(several_queues=False, completing=True)

    def aiopgq_cycle() -> Statement:
        held: list[asyncpg.Record] = []

        async def cycle(conn: asyncpg.Connection) -> None:
            ids, attempts = [r["id"] for r in held], [r["attempts"] for r in held]
            held[:] = await conn.fetch(
                claim,
                QUEUE,
                DRAIN_BATCH,
                "w",
                *_ints(claim, ids, attempts),
                _results(claim, len(ids)),
            )
            assert len(held) == DRAIN_BATCH

        return cycle

    def limited_cycle() -> Statement:
        held: list[asyncpg.Record] = []
        # A tree whose workers pass their tasks' declared key limits: none here.
        limited_extra = [None] if "$8" in queue.sql.dequeue_limited else []

        async def cycle(conn: asyncpg.Connection) -> None:
            ids, attempts = [r["id"] for r in held], [r["attempts"] for r in held]
            rows = await conn.fetch(
                queue.sql.dequeue_limited,
                [QUEUE],
                DRAIN_BATCH,
                "w",
                True,
                *_ints(queue.sql.dequeue_limited, ids, attempts),
                [None] * len(ids),
                *limited_extra,
            )
            held[:] = [r for r in rows if r["id"] is not None]
            assert len(held) == DRAIN_BATCH

        return cycle

    def bare_cycle(flavor: bare.Flavor) -> Statement:
        table = f"{flavor.schema}.jobs"
        dequeue = flavor.dequeue.replace("FROM jobs", f"FROM {table}")
        dequeue = dequeue.replace("UPDATE jobs", f"UPDATE {table}")
        complete = flavor.complete.replace("UPDATE jobs", f"UPDATE {table}")

        async def cycle(conn: asyncpg.Connection) -> None:
            rows = await conn.fetch(dequeue, QUEUE, DRAIN_BATCH, "w")
            assert len(rows) == DRAIN_BATCH
            await conn.execute(complete, [r["id"] for r in rows])

        return cycle

    # A queue concurrency limit that does not bind, with 300 jobs of the queue running
    # on other workers (4 workers x 100 slots) for the limited claim to count.
    others_running = (
        f"INSERT INTO {SCHEMA}.queues (queue, concurrency) VALUES ('{QUEUE}', 100000); "
        f"INSERT INTO {SCHEMA}.jobs (queue, task, status, attempts, locked_by, locked_at, "
        f"heartbeat_at) SELECT '{QUEUE}', 'bench.noop', 'running', 1, 'other', now(), now() "
        "FROM generate_series(1, 300)"
    )
    systems = {
        "aiopgq (claim 100, 100 done riding)": (f"{SCHEMA}.jobs", aiopgq_cycle, ""),
    }
    for label, flavor in BARE_FLAVORS.items():
        systems[label] = (f"{flavor.schema}.jobs", functools.partial(bare_cycle, flavor), "")
    if hasattr(queue.sql, "dequeue_limited"):  # a tree with limits
        name = "aiopgq, queue limit not binding (same)"
        systems[name] = (f"{SCHEMA}.jobs", limited_cycle, others_running)
    figures: dict[str, float] = {}
    print(f"\n{'drain cycle':40s} {'per job':>8s}")
    for name, (table, make_cycle, setup) in systems.items():
        counts = []
        for cycles in (8, 28):  # fresh backend, fresh table, fresh cycle state each time
            await admin.execute(
                f"TRUNCATE {table}; INSERT INTO {table} (queue, task, payload) "
                f"SELECT '{QUEUE}', 'bench.noop', jsonb_build_object('i', g) "
                "FROM generate_series(1, 4000) g"
            )
            if setup:
                await admin.execute(f"DELETE FROM {SCHEMA}.queues; {setup}")
            await admin.execute(f"VACUUM ANALYZE {table}")
            counts.append(await backend_instructions(run_dir, dsn, make_cycle(), cycles))
        figures[name] = (counts[1] - counts[0]) / (20 * DRAIN_BATCH)
        print(f"{name:40s} {figures[name]:8,.0f}")
    return figures


async def _noop(i: int) -> None:
    pass


if __name__ == "__main__":
    main()
