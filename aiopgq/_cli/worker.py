"""`aiopgq worker`: run the worker of a user's Queue until a signal stops it, or N of them
as processes under a supervisor (`--processes`)."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import signal
from typing import Any

from .. import Queue, Worker
from .._db.dsn import redact
from .._errors import ConfigurationError, shown
from .._worker.processes import DSN_VARIABLE, WorkerProcesses, process_count, serve, worker_args
from .common import AddCommand, UsageError, dsn_of, load_queue

logger = logging.getLogger("aiopgq.cli")

# The worker's settings on the command line: (flag, type, metavar, help). The defaults come
# from Worker itself, so `--help` cannot disagree with the library.
_SETTINGS: list[tuple[str, type, str, str]] = [
    ("--concurrency", int, "N", "jobs run at once, also the largest batch claimed"),
    ("--poll-interval", float, "SECONDS", "look for jobs this often when no NOTIFY comes"),
    (
        "--recheck-interval",
        float,
        "SECONDS",
        "after a short, non-empty batch, look again this soon before sleeping",
    ),
    ("--heartbeat-interval", float, "SECONDS", "extend the leases of running jobs this often"),
    (
        "--visibility-timeout",
        float,
        "SECONDS",
        "a running job without heartbeat for this long goes back to pending",
    ),
    ("--grace-period", float, "SECONDS", "at stop, wait this long for running jobs"),
    (
        "--completion-interval",
        float,
        "SECONDS",
        "write an outcome no claim carried within this time",
    ),
    (
        "--completion-batch-size",
        int,
        "JOBS",
        "write outcomes at once when this many are waiting",
    ),
    (
        "--maintenance-interval",
        float,
        "SECONDS",
        "rescue expired leases, prune old rows and refresh statistics this often",
    ),
    (
        "--blocked-loop-warning",
        float,
        "SECONDS",
        "warn (job id, task) when a handler blocks the event loop this long; 0: never",
    ),
    (
        "--connect-timeout",
        float,
        "SECONDS",
        "at start, retry an unreachable database this long",
    ),
]
# Retention flags: seconds, or none/keep (never prune), per finished status.
_RETENTIONS = [
    ("--retention", "done"),
    ("--failed-retention", "failed"),
    ("--cancelled-retention", "cancelled"),
]
_WORKER_DEFAULTS = {
    name: parameter.default for name, parameter in inspect.signature(Worker).parameters.items()
}


def register(add: AddCommand) -> None:
    worker = add("worker", "run a worker until SIGINT or SIGTERM (a second one aborts)")
    worker.add_argument("target", help="MODULE:QUEUE, the module-level aiopgq.Queue with the tasks")
    worker.add_argument(
        "--queues", help="comma-separated queues to serve (default: those of the tasks)"
    )
    for flag, kind, metavar, text in _SETTINGS:
        name = flag[2:].replace("-", "_")
        worker.add_argument(
            flag,
            type=kind,
            metavar=metavar,
            dest=name,
            help=f"{text} (default: {_WORKER_DEFAULTS[name]})",
        )
    worker.add_argument(
        "--no-listen",
        dest="listen",
        action="store_const",
        const=False,
        help="poll only: no LISTEN connection, no wake-up by NOTIFY (default: listen)",
    )
    for flag, rows in _RETENTIONS:
        default = _WORKER_DEFAULTS[flag[2:].replace("-", "_")].total_seconds()
        worker.add_argument(
            flag,
            type=retention_seconds,
            default=argparse.SUPPRESS,  # given or not; None (keep) is a value
            metavar="SECONDS",
            help=f"prune {rows} jobs this long after they finished; 'none' or 'keep': never "
            f"(default: {default:.0f} = {default / 86_400:g} day{'s' if default > 86_400 else ''})",
        )
    worker.add_argument(
        "--hold-transaction",
        action="store_const",
        const=True,
        help="run each batch inside the transaction that claimed it (short, trusted jobs)",
    )
    worker.add_argument(
        "--max-pool-size",
        type=int,
        metavar="N",
        help="connections of the queue's pool (default: the Queue's max_pool_size, 10 unless set)",
    )
    worker.add_argument(
        "--listen-dsn",
        default=os.environ.get("AIOPGQ_LISTEN_DSN") or None,
        metavar="URL",
        help="direct database URL for the LISTEN connection when --dsn goes through pgbouncer "
        "in transaction mode (default: $AIOPGQ_LISTEN_DSN, else the queue's database)",
    )
    worker.add_argument(
        "--statement-cache-size",
        type=int,
        metavar="N",
        help="asyncpg's prepared-statement cache (default: asyncpg's, 100, or 0 where a "
        "connection finds a pooler that loses prepared statements: pgbouncer before 1.21 or "
        "without max_prepared_statements)",
    )
    worker.add_argument(
        "--processes",
        metavar="N",
        help="run N worker processes ('auto': one per CPU) under a supervisor that restarts "
        "a crashed one (default: this process only)",
    )
    worker.add_argument("--burst", action="store_true", help="exit when no runnable job is left")
    worker.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 9464 (the metrics "
        "extra; default: no endpoint)",
    )
    worker.add_argument(
        "--metrics-host",
        default=_WORKER_DEFAULTS["metrics_host"],
        metavar="HOST",
        help="address the metrics endpoint listens on (default: %(default)s)",
    )
    worker.add_argument(
        "--no-periodic", action="store_true", help="do not enqueue the ticks of periodic tasks"
    )
    worker.add_argument(
        "--no-uvloop", action="store_true", help="plain asyncio even when uvloop is installed"
    )
    worker.set_defaults(run=run_worker, uvloop=True)


def retention_seconds(text: str) -> float | None:
    """A retention flag's value: seconds >= 0, or none/keep for no pruning."""
    if text.strip().lower() in ("none", "keep"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a number of seconds >= 0, nor 'none'/'keep' (never prune)"
        )
    return seconds


def worker_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Worker settings given on the command line (the others keep Worker's defaults)."""
    names = [flag[2:].replace("-", "_") for flag, *_ in _SETTINGS]
    options = {name: getattr(args, name) for name in [*names, "listen", "hold_transaction"]}
    given = {name: value for name, value in options.items() if value is not None}
    for flag, _ in _RETENTIONS:  # None is a value here: keep those rows
        name = flag[2:].replace("-", "_")
        if name in args:
            given[name] = getattr(args, name)
    return given


async def run_worker(args: argparse.Namespace) -> int:
    on_command_line = args.dsn
    supervised = os.environ.pop(DSN_VARIABLE, None)  # a supervisor's --dsn, off argv
    if supervised and not args.dsn:
        args.dsn = supervised
    if args.dsn:  # for a module whose `Queue()` reads it at import
        os.environ["AIOPGQ_DSN"] = dsn_of(args)
    queue = load_queue(args.target)
    if on_command_line and redact(on_command_line) != on_command_line:
        logger.warning(
            "--dsn holds a password, and every local user can read a command line (ps): "
            "set AIOPGQ_DSN instead, or keep the password in ~/.pgpass"
        )
    if args.processes is not None:  # the module was imported once here: a typo fails once
        return await _supervise(args)
    if args.dsn or args.schema or args.max_pool_size or args.statement_cache_size is not None:
        queue.reconfigure(
            dsn=dsn_of(args) if args.dsn else None,
            schema=args.schema,
            max_pool_size=args.max_pool_size,
            connect_kwargs=_connect_kwargs(args),
        )
    queues = [q for q in (args.queues or "").split(",") if q] or None
    extra: dict[str, object] = {"listen_dsn": args.listen_dsn}
    if args.metrics_port is not None:
        _count_jobs(queue)
        extra.update(metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    if args.no_periodic:
        extra["periodic"] = False
    worker = queue.worker(queues=queues, **worker_options(args), **extra)
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


def _count_jobs(queue: Queue) -> None:
    """Give the queue a Metrics observer unless the application gave it one."""
    try:
        from ..metrics import Metrics
    except ImportError:
        raise UsageError(
            "--metrics-port needs prometheus-client: pip install -e '.[metrics]' in the "
            "aiopgq clone"
        ) from None
    if not any(isinstance(observer, Metrics) for observer in queue.observers):
        queue.add_observer(Metrics())


def _connect_kwargs(args: argparse.Namespace) -> dict[str, int]:
    if args.statement_cache_size is None:
        return {}
    return {"statement_cache_size": args.statement_cache_size}


async def _supervise(args: argparse.Namespace) -> int:
    try:
        count = process_count(args.processes)
    except ConfigurationError as exc:
        raise UsageError(f"--processes: {exc}") from None
    child_args = worker_args(
        {
            **worker_options(args),
            "queues": args.queues,
            "max_pool_size": args.max_pool_size,
            "statement_cache_size": args.statement_cache_size,
            "schema": args.schema,
        }
    )
    child_args += ["--verbose"] if args.verbose else []
    child_args += ["--no-uvloop"] if args.no_uvloop else []
    child_args += ["--no-periodic"] if args.no_periodic else []
    grace = args.grace_period if args.grace_period is not None else _WORKER_DEFAULTS["grace_period"]
    supervisor = WorkerProcesses(
        args.target,
        count,
        args=child_args,
        grace_period=float(grace),
        burst=args.burst,
        dsn=dsn_of(args) if args.dsn else None,
        listen_dsn=args.listen_dsn,
    )
    return await serve(supervisor)
