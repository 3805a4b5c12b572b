"""`aiopgq server`: a persistent local PostgreSQL (embedded) in the foreground."""

from __future__ import annotations

import argparse
from pathlib import Path

from .._embedded.running import DEFAULT_PORT
from .common import AddCommand


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


def serve(args: argparse.Namespace) -> int:
    from ..embedded import serve_forever

    return serve_forever(args.data_dir, args.port)
