"""What a persistent data folder tells of its server: the port it keeps, whether one runs now.

PostgreSQL itself records both in the folder: ``postmaster.opts`` holds the command line of
its last start (our ``-c port=N`` among it) and stays after a stop; ``postmaster.pid`` holds
the running postmaster's pid, port and state, and goes away at a clean stop.
"""

from __future__ import annotations

import itertools
import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

# The port a persistent server takes when its folder has none recorded: next to the
# usual 5432, so it does not collide with a PostgreSQL installed on the machine.
DEFAULT_PORT = 5433
HOST = "127.0.0.1"


def dsn_for(port: int, database: str = "postgres") -> str:
    """The DSN of a database of an embedded server: superuser ``postgres`` over TCP."""
    return f"postgresql://postgres@{HOST}:{port}/{quote(database, safe='')}"


@dataclass(frozen=True)
class RunningServer:
    """A PostgreSQL server that runs on a data folder now (started by whoever).

    >>> found = running_server(Path("/var/lib/aiopgq/pg18"))
    >>> found.dsn if found else None  # 'postgresql://postgres@127.0.0.1:5433/postgres'
    """

    data_dir: Path
    pid: int
    port: int

    @property
    def dsn(self) -> str:
        """DSN of its ``postgres`` database as superuser ``postgres`` over TCP."""
        return dsn_for(self.port)


def running_server(data_dir: Path) -> RunningServer | None:
    """The server running on `data_dir` and accepting connections on 127.0.0.1, or None.

    None also for a ``postmaster.pid`` left by a crash (its pid gone, or reused by a
    process that does not listen on the recorded port).

        found = running_server(data_dir)  # reuse it instead of starting a second one
    """
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
        ready = lines[7].strip() == "ready"
    except (OSError, ValueError, IndexError):
        return None
    if not ready or not _alive(pid) or not _accepts(port):
        return None
    return RunningServer(data_dir, pid, port)


def recorded_port(data_dir: Path) -> int | None:
    """The port of the last start on `data_dir` (from ``postmaster.opts``), or None."""
    try:
        words = shlex.split((data_dir / "postmaster.opts").read_text())
    except (OSError, ValueError):
        return None
    found = None
    for before, word in itertools.pairwise(words):
        value = word[len("port=") :] if before == "-c" and word.startswith("port=") else None
        if before == "-p":
            value = word
        if value is not None and value.isdigit():
            found = int(value)  # the last one wins, as on PostgreSQL's command line
    return found


def preferred_ports(data_dir: Path) -> list[int]:
    """Ports to try first, in order, for a server on `data_dir` given no port: the one its
    last start used, then DEFAULT_PORT; those in use now are left out."""
    candidates = dict.fromkeys(p for p in (recorded_port(data_dir), DEFAULT_PORT) if p)
    return [port for port in candidates if port_is_free(port)]


def port_is_free(port: int) -> bool:
    """True when a server could listen on 127.0.0.1:port now (as PostgreSQL binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2):
            return True
    except OSError:
        return False
