"""`aiopgq worker`: run the worker of a user's Queue until a signal stops it, or N of them
as processes under a supervisor (`--processes`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from .._errors import ConfigurationError
from .._supervisor import WorkerProcesses, process_count, serve, worker_args
from .common import AddCommand, UsageError, dsn_of, load_queue

logger = logging.getLogger("aiopgq.cli")

# The worker options that take a value: (flag, type, default). Children of --processes
# get the same values.
_VALUED = (
    ("--queues", str, None),
    ("--concurrency", int, 10),
    ("--poll-interval", float, 2.0),
    ("--grace-period", float, 30.0),
    ("--heartbeat-interval", float, 5.0),
    ("--visibility-timeout", float, 30.0),
    ("--maintenance-interval", float, 5.0),
)


def register(add: AddCommand) -> None:
    worker = add("worker", "run a worker")
    worker.add_argument("target", help="MODULE:QUEUE, the module-level aiopgq.Queue with the tasks")
    for flag, kind, default in _VALUED:
        worker.add_argument(flag, type=kind, default=default)
    worker.add_argument("--hold-transaction", action="store_true")
    worker.add_argument("--burst", action="store_true", help="exit when no runnable job is left")
    worker.add_argument(
        "--processes",
        help="run N worker processes (or 'auto': one per CPU) under a supervisor that "
        "restarts a crashed one",
    )
    worker.add_argument(
        "--listen-dsn",
        default=os.environ.get("AIOPGQ_LISTEN_DSN"),
        help="direct database URL for LISTEN when --dsn goes through pgbouncer in "
        "transaction mode (default: $AIOPGQ_LISTEN_DSN, else the --dsn)",
    )
    worker.add_argument(
        "--no-listen", action="store_true", help="poll only (every --poll-interval), no LISTEN"
    )
    worker.add_argument(
        "--statement-cache-size",
        type=int,
        help="asyncpg's prepared-statement cache; 0 through pgbouncer in transaction mode "
        "(before pgbouncer 1.21 or without max_prepared_statements)",
    )
    worker.add_argument("--no-uvloop", action="store_true")
    worker.set_defaults(run=run_worker, uvloop=True)


async def run_worker(args: argparse.Namespace) -> int:
    queue = load_queue(args.target)  # also before --processes: a typo fails here, once
    if args.processes is not None:
        return await _supervise(args)
    if args.dsn or args.schema or args.statement_cache_size is not None:
        queue.reconfigure(
            dsn=dsn_of(args) if args.dsn else None,
            schema=args.schema,
            connect_kwargs=_connect_kwargs(args),
        )
    queues = [q for q in (args.queues or "").split(",") if q] or None
    worker = queue.worker(
        queues=queues,
        concurrency=args.concurrency,
        poll_interval=args.poll_interval,
        grace_period=args.grace_period,
        heartbeat_interval=args.heartbeat_interval,
        visibility_timeout=args.visibility_timeout,
        maintenance_interval=args.maintenance_interval,
        hold_transaction=args.hold_transaction,
        listen=not args.no_listen,
        listen_dsn=args.listen_dsn,
    )
    loop = asyncio.get_running_loop()
    run = asyncio.ensure_future(worker.run(burst=args.burst))
    stops = 0

    def on_signal(signum: int) -> None:
        nonlocal stops
        stops += 1
        if stops == 1:
            logger.warning("%s: stopping (again to abort)", signal.Signals(signum).name)
            worker.stop()
        else:
            run.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await run
    except asyncio.CancelledError:
        return 130
    return 0


def _connect_kwargs(args: argparse.Namespace) -> dict[str, int]:
    if args.statement_cache_size is None:
        return {}
    return {"statement_cache_size": args.statement_cache_size}


async def _supervise(args: argparse.Namespace) -> int:
    try:
        count = process_count(args.processes)
    except ConfigurationError as exc:
        raise UsageError(f"--processes: {exc}") from None
    options = {
        flag.lstrip("-").replace("-", "_"): getattr(args, flag.lstrip("-").replace("-", "_"))
        for flag, _, _ in _VALUED
    }
    child_args = worker_args(
        {
            **options,
            "hold_transaction": args.hold_transaction,
            "listen": not args.no_listen,
            "listen_dsn": args.listen_dsn,
            "statement_cache_size": args.statement_cache_size,
            "dsn": dsn_of(args) if args.dsn else None,
            "schema": args.schema,
        }
    )
    if args.verbose:
        child_args.append("--verbose")
    if args.no_uvloop:
        child_args.append("--no-uvloop")
    supervisor = WorkerProcesses(
        args.target, count, args=child_args, grace_period=args.grace_period, burst=args.burst
    )
    return await serve(supervisor)
