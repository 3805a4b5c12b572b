"""What every command shares: usage errors, the database address, loading the user's Queue."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from .._db.dsn import check_dsn, resolve_dsn
from .._errors import Error
from .._queue import Queue

# Adds a subcommand: (name, help) -> its parser, with the common options attached.
AddCommand = Callable[[str, str], argparse.ArgumentParser]


class UsageError(Error):
    """A user mistake on the command line: printed as one line, exit status 2."""


def dsn_of(args: argparse.Namespace) -> str:
    dsn = resolve_dsn(args.dsn)
    if dsn is None:
        raise UsageError("no database: pass --dsn, or set AIOPGQ_DSN or DATABASE_URL")
    return check_dsn(dsn)


def schema_of(args: argparse.Namespace) -> str:
    return str(args.schema or "aiopgq")


def queue_of(args: argparse.Namespace) -> Queue:
    """A Queue on the command line's database and schema (for commands without a target)."""
    return Queue(dsn_of(args), schema=schema_of(args))


def load_queue(target: str) -> Queue:
    """The aiopgq.Queue named by MODULE:ATTRIBUTE, imported from the current directory."""
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
