"""What every command shares: help layout, usage errors, the database, the user's Queue."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Protocol

from .. import Queue
from .._db.dsn import check_dsn, resolve_dsn
from .._errors import Error, cut, shown

DSN_HELP = "database URL (default: $AIOPGQ_DSN, else $DATABASE_URL)"
SCHEMA_HELP = "schema of the queue tables (default: aiopgq)"


class AddCommand(Protocol):
    """Adds a subcommand and returns its parser, with -v and, unless told not to, --dsn
    and --schema attached."""

    def __call__(
        self, name: str, help: str, *, dsn: bool = True, schema: bool = True
    ) -> argparse.ArgumentParser: ...


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default after its help, unless there is none to show (None, a
    flag's False) or the help says it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default is None or action.default is False:
            return text
        return super()._get_help_string(action)


class UsageError(Error):
    """A user mistake on the command line: printed as one line, exit status 2."""


def dsn_of(args: argparse.Namespace) -> str:
    dsn = resolve_dsn(args.dsn)
    if dsn is None:
        raise UsageError("no database: pass --dsn, or set AIOPGQ_DSN or DATABASE_URL")
    return check_dsn(dsn)


def schema_of(args: argparse.Namespace) -> str:
    return str(args.schema or "aiopgq")


def queue_of(args: argparse.Namespace, *, max_payload_bytes: int = 1_000_000) -> Queue:
    """A Queue on the command line's database and schema (for commands without a target)."""
    return Queue(dsn_of(args), schema=schema_of(args), max_payload_bytes=max_payload_bytes)


def load_queue(target: str) -> Queue:
    """The aiopgq.Queue named by MODULE:ATTRIBUTE, imported from the current directory."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(
            f"worker target {shown(target)} must look like MODULE:QUEUE, e.g. myapp.jobs:queue"
        )
    sys.path.insert(0, ".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import module {shown(module_name)}: {exc}") from None
    except RuntimeError as exc:
        if "running event loop" not in str(exc):
            raise
        raise UsageError(
            f"importing {shown(module_name)} runs an event loop ({exc}): the worker imports the "
            'module, so start yours only under `if __name__ == "__main__":`'
        ) from None
    queue = getattr(module, attribute, None)
    if not isinstance(queue, Queue):
        raise UsageError(
            f"{cut(target)}: {shown(attribute)} is not an aiopgq.Queue in module {cut(module_name)}"
        )
    return queue
