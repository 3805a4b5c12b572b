"""What a persistent data folder tells of its server: the port it keeps, whether one runs now.

PostgreSQL itself records both in the folder: ``postmaster.opts`` holds the command line of
its last start (our ``-c port=N`` among it) and stays after a stop; ``postmaster.pid`` holds
the running postmaster's pid, port, socket folder and state, and goes away at a clean stop.

The embedded server listens on a Unix socket only, in a folder of mode 0700 (see server.py):
its DSN names that folder as ``host`` and the port, which names the socket file.
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
HOST = "127.0.0.1"  # where port numbers are checked for being free: see port_is_free


def dsn_for(socket_dir: str | Path, port: int, database: str = "postgres") -> str:
    """The DSN of a database of an embedded server: superuser ``postgres`` on its socket.

    dsn_for("/tmp/aiopgq-x", 5433)  # 'postgresql://postgres@/postgres?host=/tmp/aiopgq-x&port=5433'
    """
    host = quote(str(socket_dir), safe="/")
    return f"postgresql://postgres@/{quote(database, safe='')}?host={host}&port={port}"


def export_line(dsn: str) -> str:
    """The shell line that sets AIOPGQ_DSN to `dsn`, quoted (a DSN holds ``?`` and ``&``).

    A socket folder under $HOME is written as $HOME, so the line reads the same for
    everyone (it is the one the docs show): export AIOPGQ_DSN="postgresql://...?host=$HOME/...".
    """
    home = str(Path.home()).rstrip("/")
    marker = f"host={quote(home, safe='/')}/"
    if home and marker in dsn and not any(c in dsn for c in '$`"\\!'):
        return 'export AIOPGQ_DSN="' + dsn.replace(marker, "host=$HOME/", 1) + '"'
    return f"export AIOPGQ_DSN={shlex.quote(dsn)}"


@dataclass(frozen=True)
class RunningServer:
    """A PostgreSQL server that runs on a data folder now (started by whoever).

    >>> found = running_server(Path("/var/lib/aiopgq/pg18"))
    >>> found.dsn if found else None  # '...@/postgres?host=/var/lib/aiopgq/pg18&port=5433'

    Attributes:
        data_dir: its data folder.
        pid: the postmaster's process id.
        port: its port.
        socket_dir: the folder of its Unix socket.
    """

    data_dir: Path
    pid: int
    port: int
    socket_dir: str

    @property
    def dsn(self) -> str:
        """DSN of its ``postgres`` database as superuser ``postgres`` on its socket."""
        return dsn_for(self.socket_dir, self.port)


def running_server(data_dir: Path) -> RunningServer | None:
    """The server running on `data_dir` and accepting connections on its socket, or None.

    None also for a ``postmaster.pid`` left by a crash (its pid gone, or reused by a
    process that does not listen on the recorded port).

        found = running_server(data_dir)  # reuse it instead of starting a second one

    Args:
        data_dir: the data folder.

    Returns:
        The server, or None when none runs there.
    """
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), int(lines[3]), lines[4].strip()
        ready = lines[7].strip() == "ready"
    except (OSError, ValueError, IndexError):
        return None
    if not ready or not socket_dir or not _alive(pid) or not _accepts(socket_dir, port):
        return None
    return RunningServer(data_dir, pid, port, socket_dir)


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
    """True when a server could listen on 127.0.0.1:port now (as PostgreSQL binds it).

    The embedded server opens no TCP port, but it keeps clear of ports in use: its DSN then
    never names a port that another PostgreSQL on this machine answers on."""
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


def _accepts(socket_dir: str, port: int) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(os.path.join(socket_dir, f".s.PGSQL.{port}"))
        except OSError:
            return False
    return True
