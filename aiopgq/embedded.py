"""The embedded PostgreSQL server: a real server with no install, for tests, demos and
local development (`pip install -e '.[embedded]'`).

>>> with aiopgq.embedded.start_throwaway() as server:
...     queue = aiopgq.Queue(server.ensure_database("app"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._embedded.account import make_run_dir, server_account
from ._embedded.binaries import find_pg_bin_dir, usable_bin_dir
from ._embedded.foreground import serve_forever
from ._embedded.running import RunningServer, dsn_for, running_server
from ._embedded.server import (
    EmbeddedServer,
    persistent_data_dir,
    start_persistent,
    start_throwaway,
)


@dataclass(frozen=True)
class Binaries:
    """The PostgreSQL binaries the embedded server runs, and how to run them as its
    account: for tools that start a server of their own (a benchmark under valgrind).

    >>> b = binaries()
    >>> subprocess.run([str(b.bin_dir / "initdb"), "-D", str(b.run_dir / "data")], **b.popen_kwargs)

    Attributes:
        bin_dir: the folder of initdb, postgres, pg_ctl..., readable by the account.
        run_dir: a fresh private folder the account owns (remove it when done).
        popen_kwargs: subprocess arguments that run a command as the account.
    """

    bin_dir: Path  # initdb, postgres, pg_ctl..., readable by the account
    run_dir: Path  # a fresh private folder the account owns (remove it when done)
    popen_kwargs: dict[str, Any]  # subprocess arguments that run a command as the account


def binaries() -> Binaries:
    """The embedded server's binaries, its account, and a fresh folder for a server.

    Returns:
        Where the binaries are, a new folder, and how to run them as the account.

    Raises:
        EmbeddedServerError: the binaries cannot be found or run (install the
            `embedded` extra), or the server account cannot be set up.
    """
    account = server_account()
    return Binaries(
        bin_dir=usable_bin_dir(find_pg_bin_dir(), account),
        run_dir=make_run_dir(account),
        popen_kwargs=account.popen_kwargs(),
    )


def socket_dsn(socket_dir: str | Path, port: int, database: str = "postgres") -> str:
    """The DSN of a database on a server listening in `socket_dir`: superuser postgres.

    Args:
        socket_dir: the folder of the server's Unix socket.
        port: the server's port (part of the socket's name).
        database: the database's name (default "postgres").

    Returns:
        A postgresql:// URL with the socket folder as its host.
    """
    return dsn_for(socket_dir, port, database)


__all__ = [
    "Binaries",
    "EmbeddedServer",
    "RunningServer",
    "binaries",
    "persistent_data_dir",
    "running_server",
    "serve_forever",
    "socket_dsn",
    "start_persistent",
    "start_throwaway",
]

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
