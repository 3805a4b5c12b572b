"""The `aiopgq` command line."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from ._db.dsn import check_dsn, redact, resolve_dsn
from ._errors import ConfigurationError, Error
from ._queue import Queue

logger = logging.getLogger("aiopgq.cli")


class UsageError(Error):
    """A user mistake on the command line: printed as one line, exit status 2."""


def _dsn(args: argparse.Namespace) -> str:
    dsn = resolve_dsn(args.dsn)
    if dsn is None:
        raise UsageError("no database: pass --dsn, or set AIOPGQ_DSN or DATABASE_URL")
    return check_dsn(dsn)


def _load_queue(target: str) -> Queue:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(
            f"worker target {target!r} must look like MODULE:QUEUE, e.g. myapp.jobs:queue"
        )
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import module {module_name!r}: {exc}") from None
    queue = getattr(module, attribute, None)
    if not isinstance(queue, Queue):
        raise UsageError(f"{target}: {attribute!r} is not an aiopgq.Queue in module {module_name}")
    return queue


async def _migrate(args: argparse.Namespace) -> int:
    queue = Queue(_dsn(args), schema=_schema(args))
    applied = await queue.migrate()
    where = f"schema {queue.schema}"
    print(f"applied migrations {applied} to {where}" if applied else f"{where} is up to date")
    return 0


async def _worker(args: argparse.Namespace) -> int:
    queue = _load_queue(args.target)
    if args.dsn or args.schema:
        queue.reconfigure(dsn=_dsn(args) if args.dsn else None, schema=args.schema)
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


def _schema(args: argparse.Namespace) -> str:
    return str(args.schema or "aiopgq")


async def _enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"payload is not valid JSON ({exc}); e.g. '{{\"a\": 1}}'") from None
    if not isinstance(payload, dict):
        raise UsageError("payload must be a JSON object of the task's arguments, e.g. '{\"a\": 1}'")
    async with Queue(_dsn(args), schema=_schema(args)) as queue:
        job = await queue.enqueue(
            args.task, payload, queue=args.queue, priority=args.priority, delay=args.delay
        )
    print(job.id)
    return 0


async def _status(args: argparse.Namespace) -> int:
    async with Queue(_dsn(args), schema=_schema(args)) as queue:
        await queue.check_schema()
        rows = await queue.status()
    print(f"{'queue':<20} {'status':<10} {'jobs':>10} {'oldest runnable':>16}")
    for row in rows:
        age = row["oldest_runnable_age"]
        print(
            f"{row['queue']:<20} {row['status']:<10} {row['jobs']:>10} "
            f"{'' if age is None else f'{age:.1f} s':>16}"
        )
    if not rows:
        print("(no jobs)")
    return 0


def _parser() -> argparse.ArgumentParser:
    # The common options work before or after the command: `aiopgq worker app:q --dsn ...`.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="database URL (default: $AIOPGQ_DSN, then $DATABASE_URL)",
    )
    common.add_argument(
        "--schema", default=argparse.SUPPRESS, help="schema of the queue tables (default aiopgq)"
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="aiopgq", description="PostgreSQL job queue for asyncio")
    # Own actions, not `parents=[common]`: argparse shares action objects with parents,
    # and the SUPPRESS defaults must stay on the subcommands only.
    parser.add_argument("--dsn", help="database URL (default: $AIOPGQ_DSN, then $DATABASE_URL)")
    parser.add_argument("--schema", help="schema of the queue tables (default aiopgq)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, parents=[common])

    command("migrate", "create or upgrade the schema").set_defaults(run=_migrate)

    worker = command("worker", "run a worker")
    worker.add_argument("target", help="MODULE:QUEUE, the module-level aiopgq.Queue with the tasks")
    worker.add_argument("--queues", help="comma-separated queues (default: all of the tasks')")
    worker.add_argument("--concurrency", type=int, default=10)
    worker.add_argument("--poll-interval", type=float, default=2.0)
    worker.add_argument("--grace-period", type=float, default=30.0)
    worker.add_argument("--heartbeat-interval", type=float, default=5.0)
    worker.add_argument("--visibility-timeout", type=float, default=30.0)
    worker.add_argument("--maintenance-interval", type=float, default=5.0)
    worker.add_argument("--hold-transaction", action="store_true")
    worker.add_argument("--burst", action="store_true", help="exit when no runnable job is left")
    worker.add_argument("--no-uvloop", action="store_true")
    worker.set_defaults(run=_worker)

    enqueue = command("enqueue", "enqueue a job by task name")
    enqueue.add_argument("task")
    enqueue.add_argument("payload", nargs="?", default="{}", help="JSON object of arguments")
    enqueue.add_argument("--queue", default=None)
    enqueue.add_argument("--priority", type=int, default=None)
    enqueue.add_argument("--delay", type=float, default=None, help="seconds from now")
    enqueue.set_defaults(run=_enqueue)

    command("status", "job counts per queue and status").set_defaults(run=_status)

    server = command("server", "run a persistent local PostgreSQL (embedded) in the foreground")
    server.add_argument("data_dir", nargs="?", type=Path, help="default ~/.local/share/aiopgq/pg18")
    server.add_argument("--port", type=int, default=None, help="default: a free port")
    server.set_defaults(run=_server, sync=True)

    demo = command("demo", "enqueue and run jobs on the embedded server (or --dsn) and report")
    demo.add_argument("--jobs", type=int, default=20_000)
    demo.set_defaults(run=_demo, sync=True)
    return parser


def _server(args: argparse.Namespace) -> int:
    from .embedded import serve_forever

    return serve_forever(args.data_dir, args.port)


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    return run_demo(resolve_dsn(args.dsn), jobs=args.jobs)


def _event_loop_runner(use_uvloop: bool) -> Callable[[Coroutine[Any, Any, int]], int]:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run
    return asyncio.run


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet = args.command == "demo"  # its progress bar and table tell the story
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    runner = _event_loop_runner(args.command == "worker" and not getattr(args, "no_uvloop", False))
    try:
        if getattr(args, "sync", False):
            return int(args.run(args))
        return runner(args.run(args))
    except UsageError as exc:
        print(f"aiopgq: {exc}", file=sys.stderr)
        return 2
    except (Error, ValueError, TypeError) as exc:
        print(f"aiopgq: {redact(str(exc))}", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"aiopgq: database error: {redact(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


__all__ = ["ConfigurationError", "main"]
