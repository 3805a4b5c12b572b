"""`aiopgq server` and `aiopgq demo`: a local PostgreSQL, and the queue at work on it."""

from __future__ import annotations

import argparse
from pathlib import Path

from .._db.dsn import resolve_dsn
from .common import AddCommand, UsageError


def register(add: AddCommand) -> None:
    server = add("server", "run a persistent local PostgreSQL (embedded) in the foreground")
    server.add_argument("data_dir", nargs="?", type=Path, help="default ~/.local/share/aiopgq/pg18")
    server.add_argument("--port", type=int, default=None, help="default: a free port")
    server.set_defaults(run=serve, sync=True)

    demo = add("demo", "enqueue and run jobs on the embedded server (or --dsn) and report")
    demo.add_argument("--jobs", type=int, default=20_000)
    demo.set_defaults(run=demo_run, sync=True, quiet=True)


def serve(args: argparse.Namespace) -> int:
    from ..embedded import serve_forever

    return serve_forever(args.data_dir, args.port)


def demo_run(args: argparse.Namespace) -> int:
    from .._demo import run_demo

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    return run_demo(resolve_dsn(args.dsn), jobs=args.jobs)
