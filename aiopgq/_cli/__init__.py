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

from .._db.dsn import redact
from .._errors import Error
from . import jobs, local, queues, worker
from .common import UsageError

COMMAND_MODULES = (jobs, queues, worker, local)


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

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, parents=[common])

    for module in COMMAND_MODULES:
        module.register(add)
    return parser


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
    quiet = getattr(args, "quiet", False)  # the demo's progress bar and table tell the story
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    use_uvloop = getattr(args, "uvloop", False) and not getattr(args, "no_uvloop", False)
    runner = _event_loop_runner(use_uvloop)
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


__all__ = ["main"]
