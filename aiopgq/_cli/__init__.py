"""The `aiopgq` command line: the parser and main(); each command lives in its own module.

A command module has `register(add)`, which adds its subparsers and sets `run` (an async
function of the parsed arguments, or a plain one with `sync=True`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import select
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

import asyncpg

from .. import __version__
from .._db.dsn import redact
from .._errors import CannotConnect, ConfigurationError, Error, TaskNotFound, cut, shown
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
    workflows,
)
from .common import DSN_HELP, SCHEMA_HELP, HelpFormatter, UsageError

EXIT_STATUSES = """exit status:
  0    done
  1    a failure of the moment: the database is unreachable or refused, its schema
       is missing, a job or a check failed
  2    a mistake in what was typed: an unknown command, task or option, a bad value
       (a DSN, a schema or queue name, a priority, a delay, --max-attempts 0)
  130  interrupted (Ctrl-C)
  141  standard output closed early (as by `| head`)"""

# What an error message shows of one line at most: a message quotes what the user
# typed, cut (aiopgq._errors.shown), but a library's message may quote it whole.
_MESSAGE_CHARACTERS = 2000
# 128 + SIGPIPE, what a shell reports for a command killed by a closed pipe.
_BROKEN_PIPE = 141
# A quoted value in argparse's messages ("invalid int value: 'x...'"), long enough to cut.
_LONG_QUOTED = re.compile(r"'([^'\n]{61,})'")  # over SHOWN_CHARACTERS


class _TopHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """The top-level help: its epilog (the exit statuses) keeps its lines."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with the values its error messages quote cut to a line."""

    def error(self, message: str) -> NoReturn:
        super().error(_LONG_QUOTED.sub(lambda m: shown(m.group(1)), message))


COMMAND_MODULES = (
    *(migrate, enqueue, status, jobs, actions, queue, worker, doctor, workers, top),
    *(schedules, server, demo),
    *(dashboard, partition, workflows),
)


def _parser() -> argparse.ArgumentParser:
    # The common options work before or after the command: `aiopgq worker app:q --dsn ...`.
    # Own actions on each subcommand, not one shared parent: argparse shares action objects
    # with parents, and the SUPPRESS defaults must stay on the subcommands only.
    parser = _Parser(
        prog="aiopgq",
        description="An asyncio job queue on PostgreSQL. `aiopgq COMMAND --help` tells more.",
        epilog=EXIT_STATUSES,
        formatter_class=_TopHelpFormatter,
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
        status = int(args.run(args)) if getattr(args, "sync", False) else runner(args.run(args))
        sys.stdout.flush()  # a reader gone shows here, not in the interpreter's exit
        return status
    except BrokenPipeError as exc:
        if _stdout_closed():  # the reader left (`aiopgq jobs | head`): stop quietly
            return _stdout_gone()
        return _fail(f"database error: {exc}", 1)
    # The order matters: CannotConnect is a ConfigurationError, asyncpg's DataError a
    # ValueError, and both are failures of the moment, not of what was typed.
    except UsageError as exc:
        return _fail(str(exc), 2)
    except CannotConnect as exc:
        return _fail(str(exc), 1)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return _fail(f"database error: {exc}", 1)
    except (ConfigurationError, TaskNotFound, ValueError, TypeError) as exc:
        return _fail(str(exc), 2)  # a bad option value, name or payload: a usage mistake
    except Error as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, status: int) -> int:
    """Print the error as one line on stderr; the exit status."""
    print(f"aiopgq: {cut(redact(message), _MESSAGE_CHARACTERS)}", file=sys.stderr)
    return status


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (POLLERR), as opposed to
    a broken connection to the database; True where that cannot be told."""
    if not hasattr(select, "poll"):
        return True
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return True


def _stdout_gone() -> int:
    """The exit status when standard output's reader closed it; points stdout at devnull
    so that the interpreter's flush at exit does not fail a second time, loudly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return _BROKEN_PIPE


__all__ = ["main"]
