"""The `aiopgq` command line: the parser and main(); each command lives in its own module.

A command module has `register(add)`, which adds its subparsers and sets `run` (an async
function of the parsed arguments, or a plain one with `sync=True`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import asyncpg

from .. import __version__
from .._db.dsn import redact
from .._errors import Error
from . import (
    actions,
    dashboard,
    demo,
    doctor,
    enqueue,
    jobs,
    migrate,
    partition,
    queue,
    schedules,
    server,
    status,
    top,
    worker,
    workers,
)
from .common import DSN_HELP, SCHEMA_HELP, HelpFormatter, UsageError

COMMAND_MODULES = (
    *(migrate, enqueue, status, jobs, actions, queue, worker, doctor, workers, top),
    *(schedules, server, demo),
    *(dashboard, partition),
)


def _parser() -> argparse.ArgumentParser:
    # The common options work before or after the command: `aiopgq worker app:q --dsn ...`.
    # Own actions on each subcommand, not one shared parent: argparse shares action objects
    # with parents, and the SUPPRESS defaults must stay on the subcommands only.
    parser = argparse.ArgumentParser(
        prog="aiopgq",
        description="An asyncio job queue on PostgreSQL. `aiopgq COMMAND --help` tells more.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"aiopgq {__version__}")
    parser.add_argument("--dsn", help=DSN_HELP)
    parser.add_argument("--schema", help=SCHEMA_HELP)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, help: str, *, dsn: bool = True, schema: bool = True
    ) -> argparse.ArgumentParser:
        command = commands.add_parser(
            name, help=help, description=help, formatter_class=HelpFormatter
        )
        if dsn:
            command.add_argument("--dsn", default=argparse.SUPPRESS, help=DSN_HELP)
        if schema:
            command.add_argument("--schema", default=argparse.SUPPRESS, help=SCHEMA_HELP)
        command.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
        )
        command.set_defaults(takes_dsn=dsn, takes_schema=schema)
        return command

    for module in COMMAND_MODULES:
        module.register(add)
    return parser


def _check_common_options(args: argparse.Namespace) -> None:
    """--dsn or --schema given before a command that has no use for them."""
    for option, taken in (("dsn", args.takes_dsn), ("schema", args.takes_schema)):
        if getattr(args, option) is not None and not taken:
            why = getattr(args, "no_database", "")
            raise UsageError(
                f"`aiopgq {args.command}` takes no --{option}" + (f": {why}" if why else "")
            )


def _event_loop_runner(use_uvloop: bool) -> Callable[[Coroutine[Any, Any, int]], int]:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run
    return asyncio.run


class _RedactingFormatter(logging.Formatter):
    """Log lines and tracebacks with their passwords hidden: a library's exception text
    may quote the database URL it was given."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); the exit status.

    >>> main(["status", "--dsn", "postgresql://localhost/app"])
    """
    args = _parser().parse_args(argv)
    quiet = getattr(args, "quiet", False)  # the demo's progress bar and table tell the story
    handler = logging.StreamHandler()
    handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
        handlers=[handler],
    )
    use_uvloop = getattr(args, "uvloop", False) and not getattr(args, "no_uvloop", False)
    runner = _event_loop_runner(use_uvloop)
    try:
        _check_common_options(args)
        if getattr(args, "sync", False):
            return int(args.run(args))
        return runner(args.run(args))
    except UsageError as exc:
        print(f"aiopgq: {redact(str(exc))}", file=sys.stderr)
        return 2
    except (Error, ValueError, TypeError) as exc:
        print(f"aiopgq: {redact(str(exc))}", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"aiopgq: database error: {redact(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


__all__ = ["main"]
