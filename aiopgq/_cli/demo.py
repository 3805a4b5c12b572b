"""``aiopgq demo``: watch the queue work, on the embedded server or on yours, in seconds.

Bulk-enqueues jobs of a sample task, drains them with one worker behind a progress bar, then
measures enqueue-to-start latency with single enqueues to an idle worker woken by NOTIFY, and
prints what it measured. Everything lives in one schema (``aiopgq_demo``), dropped and
migrated again at the start of every run, so reruns are clean.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import asyncpg

from .. import Queue
from .._db.dsn import redact, resolve_dsn
from .._db.statements import quote_identifier
from .._embedded.running import export_line
from .._errors import ConfigurationError, Error
from .common import AddCommand, UsageError

if TYPE_CHECKING:
    from tqdm import tqdm

    from ..embedded import EmbeddedServer, RunningServer

CHUNK = 5_000  # jobs per enqueue_many call: one round trip each
CONCURRENCY = 100
LATENCY_RATE = 50.0  # single enqueues per second in the latency phase
_TASK = "demo.work"


@dataclass
class _Run:
    """What the sample task saw, and what the phases measured."""

    jobs: int
    samples: int
    done: int = 0
    latencies: list[float] = field(default_factory=list)
    enqueue_seconds: float = 0.0
    drain_seconds: float = 0.0
    version: str = ""
    sampled: anyio.Event | None = None  # set once every latency job has started


def register(add: AddCommand) -> None:
    demo = add(
        "demo",
        "enqueue and run jobs on the embedded server (or on --dsn, $AIOPGQ_DSN, $DATABASE_URL) "
        "and report",
        schema=False,
    )
    demo.add_argument(
        "--jobs", type=int, metavar="N", default=20_000, help="jobs to enqueue and drain"
    )
    demo.set_defaults(
        run=demo_run,
        sync=True,
        quiet=True,
        no_database="the demo works in a schema of its own, aiopgq_demo, dropped at each run",
    )


def demo_run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    return run_demo(resolve_dsn(args.dsn), jobs=args.jobs)


def run_demo(
    dsn: str | None,
    *,
    jobs: int = 20_000,
    latency_samples: int = 200,
    schema: str = "aiopgq_demo",
) -> int:
    """Run the demo on ``dsn`` (None: the embedded server, persistent); the exit status.

    Drops and recreates ``schema`` (default ``aiopgq_demo``): never point it at real data.

    raise SystemExit(run_demo(None))  # what `aiopgq demo` does without a database
    """
    if jobs < 1 or latency_samples < 1:
        print("aiopgq demo: --jobs and the latency samples must be at least 1", file=sys.stderr)
        return 2
    try:
        from tqdm import tqdm  # noqa: F401 - fail before starting anything
    except ImportError:
        print(
            "aiopgq demo: the progress bar needs tqdm: pip install 'aiopgq[embedded]'",
            file=sys.stderr,
        )
        return 1
    started = time.perf_counter()
    server: EmbeddedServer | None = None
    try:
        if dsn is None:
            server, running = _embedded()
            if server is not None:
                dsn, where = server.dsn, f"{server.data_dir} (embedded, persistent)"
                then = _NEXT_AFTER_OWN_SERVER.format(data_dir=server.data_dir)
            else:
                assert running is not None
                dsn, where = running.dsn, f"{running.data_dir} (the running `aiopgq server`)"
                then = _NEXT_ON_A_SERVER.format(export=export_line(dsn))
        else:
            shown = export_line(redact(dsn)) + (
                "  # your password in place of ***" if redact(dsn) != dsn else ""
            )
            where, then = "external server", _NEXT_ON_A_SERVER.format(export=shown)
        run = asyncio.run(_demo(dsn, schema, _Run(jobs, latency_samples)))
    except Error as exc:
        print(f"aiopgq demo: {redact(str(exc))}", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as exc:  # lost server, missing privileges
        print(f"aiopgq demo: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
    print(_table(run, dsn, where))
    print(f"demo finished in {time.perf_counter() - started:.1f} s")
    print(then.format(schema=schema))
    return 0


_QUICK_START = "follow the README's Quick start (app.py, then `aiopgq worker app:queue`)"
_NEXT_AFTER_OWN_SERVER = (
    "\nNext, your own code. Keep this PostgreSQL running in a terminal of its own (same "
    "data,\n{data_dir}):\n\naiopgq server\n\nthen paste the `export AIOPGQ_DSN=...` line "
    "it prints and\n" + _QUICK_START + "."
)
_NEXT_ON_A_SERVER = (
    "\nNext, your own code on this database:\n\n{export}\n\nthen "
    + _QUICK_START
    + ".\nThe demo's tables stay in schema {{schema}}; `DROP SCHEMA {{schema}} CASCADE` "
    "removes them."
)


def _embedded() -> tuple[EmbeddedServer | None, RunningServer | None]:
    """The server the demo starts on the persistent data folder, or the one running there
    (an `aiopgq server`, say) when there is one: two servers cannot share a folder."""
    from .._embedded.data import fallback_note
    from ..embedded import persistent_data_dir, running_server, start_persistent

    data_dir, replaced = persistent_data_dir()
    if replaced is not None:
        print(fallback_note(data_dir, replaced))
    running = running_server(data_dir)
    if running is not None:
        print(
            f"using the PostgreSQL server already running on {data_dir} (pid {running.pid}, "
            f"port {running.port})",
            flush=True,
        )
        return None, running
    print(f"starting the embedded PostgreSQL server (data: {data_dir}) ...", flush=True)
    return start_persistent(data_dir), None


async def _demo(dsn: str, schema: str, run: _Run) -> _Run:
    queue = Queue(dsn, schema=schema)
    run.version = await _reset_schema(dsn, queue.schema)
    await queue.migrate()
    print(f"PostgreSQL {run.version} at {redact(dsn)}, schema {queue.schema}", flush=True)

    @queue.task(name=_TASK)
    async def work(i: int, enqueued_at: float | None = None) -> None:
        if enqueued_at is None:
            run.done += 1  # the progress bar reads this: no query per job
        else:
            run.latencies.append(time.time() - enqueued_at)
            if len(run.latencies) >= run.samples and run.sampled is not None:
                run.sampled.set()

    async with queue:
        started = time.perf_counter()
        for first in range(0, run.jobs, CHUNK):
            await work.enqueue_many([{"i": i} for i in range(first, min(first + CHUNK, run.jobs))])
        run.enqueue_seconds = time.perf_counter() - started
        print(f"enqueued {run.jobs:,} jobs in {run.enqueue_seconds:.2f} s", flush=True)
        await _drain(queue, run)
        await _measure_latency(queue, work, run)
    return run


async def _reset_schema(dsn: str, schema: str) -> str:
    """Drop the demo schema (migrate recreates it); the server's version."""
    try:
        conn = await asyncpg.connect(dsn, timeout=10)
    except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
        raise ConfigurationError(
            f"cannot connect to {redact(dsn)} ({redact(str(exc)) or type(exc).__name__}): "
            "start PostgreSQL there or pass another --dsn; without --dsn, AIOPGQ_DSN and "
            "DATABASE_URL the demo starts its own server"
        ) from None
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(schema)} CASCADE")
        version: str = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    return version


async def _drain(queue: Queue, run: _Run) -> None:
    from tqdm import tqdm

    tty = sys.stdout.isatty()
    bar = tqdm(
        total=run.jobs,
        desc="drain",
        unit="job",
        file=sys.stdout,
        mininterval=0.2 if tty else 10.0,  # not a terminal: a line or two, not hundreds
        ascii=not tty,
        smoothing=0.1,
    )
    worker = queue.worker(queues=["default"], concurrency=CONCURRENCY, poll_interval=1.0)
    started = time.perf_counter()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_follow, bar, run)
            await worker.run(burst=True)
            group.cancel_scope.cancel()
        run.drain_seconds = time.perf_counter() - started
    finally:
        bar.update(run.done - bar.n)
        bar.close()
    if run.done != run.jobs:
        raise Error(f"the worker stopped after {run.done:,} of {run.jobs:,} jobs: a bug, report it")


async def _follow(bar: tqdm[Any], run: _Run) -> None:
    while True:
        await anyio.sleep(0.1)
        bar.update(run.done - bar.n)


async def _measure_latency(queue: Queue, work: Any, run: _Run) -> None:
    """Single enqueues at LATENCY_RATE to an idle background worker, woken by NOTIFY."""
    print(
        f"latency: {run.samples} single enqueues at {LATENCY_RATE:.0f}/s to an idle worker ...",
        flush=True,
    )
    worker = queue.worker(queues=["default"], concurrency=CONCURRENCY, poll_interval=1.0)
    run.sampled = anyio.Event()
    async with worker:
        if worker.listener is not None:  # a job sent before LISTEN would wait for the poll
            with anyio.move_on_after(5):
                await worker.listener.connected.wait()
        await anyio.sleep(0.2)  # the catch-up fetch after LISTEN is over: the worker is idle
        due = time.perf_counter()
        for n in range(run.samples):
            await work.enqueue(i=n, enqueued_at=time.time())
            due += 1 / LATENCY_RATE
            await anyio.sleep(max(0.0, due - time.perf_counter()))
        with anyio.move_on_after(10):
            await run.sampled.wait()
    if len(run.latencies) < run.samples:
        raise Error(
            f"only {len(run.latencies)} of {run.samples} latency jobs ran within 10 s: "
            "a bug, report it"
        )


def _percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `share` of values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _table(run: _Run, dsn: str, where: str) -> str:
    ms = [seconds * 1000 for seconds in run.latencies]
    rows = [
        ("jobs", f"{run.jobs:,}"),
        ("enqueue rate", f"{run.jobs / run.enqueue_seconds:,.0f} jobs/s (bulk, {CHUNK:,} a call)"),
        ("drain rate", f"{run.jobs / run.drain_seconds:,.0f} jobs/s (concurrency {CONCURRENCY})"),
        ("latency p50", f"{statistics.median(ms):.1f} ms (enqueue to start, idle worker)"),
        ("latency p99", f"{_percentile(ms, 0.99):.1f} ms ({len(ms)} single enqueues)"),
        ("PostgreSQL", run.version),
        ("DSN", redact(dsn)),
        ("data", where),
    ]
    width = max(len(name) for name, _ in rows)
    rule = "-" * (width + 2 + max(len(value) for _, value in rows))
    lines = [rule, *(f"{name:<{width}}  {value}" for name, value in rows), rule]
    return "\n".join(lines)
