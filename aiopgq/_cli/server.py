"""`aiopgq server` and `aiopgq demo`: a local PostgreSQL, and the queue at work on it."""

from __future__ import annotations

import argparse
from pathlib import Path

from .._db.dsn import resolve_dsn
from .._embedded.running import DEFAULT_PORT
from .common import AddCommand, UsageError


def register(add: AddCommand) -> None:
    server = add(
        "server",
        "run a persistent local PostgreSQL (embedded) in the foreground until Ctrl-C; "
        "prints the `export AIOPGQ_DSN=...` line to paste",
        dsn=False,
        schema=False,
    )
    server.add_argument(
        "data_dir",
        nargs="?",
        type=Path,
        help="data folder (default: ~/.local/share/aiopgq/pg18, as root /var/lib/aiopgq/pg18 "
        "when the server account cannot enter root's home; the demo's folder too)",
    )
    server.add_argument(
        "--port",
        type=int,
        metavar="PORT",
        help=f"port number; it names the Unix socket, the only way in: no TCP (default: the "
        f"port of the folder's last start if free, else {DEFAULT_PORT} if free, else a free one)",
    )
    server.set_defaults(
        run=serve,
        sync=True,
        quiet=True,
        no_database="it starts its own PostgreSQL and prints the DSN to use",
    )

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


def serve(args: argparse.Namespace) -> int:
    from ..embedded import serve_forever

    return serve_forever(args.data_dir, args.port)


def demo_run(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    return run_demo(resolve_dsn(args.dsn), jobs=args.jobs)
