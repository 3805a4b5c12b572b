"""A pgbouncer in transaction mode in front of a test's PostgreSQL, started on a free port.

Debian's `pgbouncer` (tests/support/system.py installs it as root). The config is written
next to the test; pgbouncer refuses to run as root, so as root it drops to the embedded
server's account after reading it (that account can open the server's 0700 socket).
Every server connection it opens carries application_name
`aiopgq-bouncer-<tag>`, so a test can count them in pg_stat_activity.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from aiopgq._embedded.account import server_account

from . import system


@dataclass
class Bouncer:
    dsn: str  # the same database and user, through pgbouncer
    application_name: str  # of its server connections
    pool_size: int
    log_path: Path
    proc: subprocess.Popen[bytes]

    def dsn_for(self, database: str) -> str:
        """The same user through pgbouncer, to another database of the same server."""
        return urlunsplit(urlsplit(self.dsn)._replace(path=f"/{database}"))

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pgbouncer_binary() -> str:
    system.require("pgbouncer")
    found = system.find("pgbouncer")
    assert found is not None
    return found


@contextlib.contextmanager
def start_pgbouncer(
    dsn: str, workdir: Path, *, pool_size: int = 10, max_client_conn: int = 1000
) -> Iterator[Bouncer]:
    """pgbouncer (pool_mode = transaction) in front of `dsn`, stopped (by pid) on exit."""
    parts = urlsplit(dsn)
    query = dict(parse_qsl(parts.query))  # the embedded server's: ?host=SOCKET_DIR&port=N
    host = query.pop("host", None) or parts.hostname or "127.0.0.1"
    upstream_port = query.pop("port", None) or parts.port or 5432
    parts = parts._replace(query=urlencode(query))
    tag = f"aiopgq-bouncer-{uuid.uuid4().hex[:8]}"
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    users = workdir / "pgbouncer-users.txt"
    users.write_text(f'"{parts.username or "postgres"}" ""\n')
    ini = workdir / "pgbouncer.ini"
    ini.write_text(
        f"""[databases]
* = host={host} port={upstream_port} application_name={tag}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {users}
pool_mode = transaction
default_pool_size = {pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = {max_client_conn}
server_login_retry = 0.2
logfile =
pidfile =
"""
    )
    log_path = workdir / "pgbouncer.log"
    command = [pgbouncer_binary(), str(ini)]
    if os.geteuid() == 0:
        # It refuses root; it reads the config first.
        command[1:1] = ["-u", server_account().name]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    bouncer = Bouncer(
        urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{port}")),
        tag,
        pool_size,
        log_path,
        proc,
    )
    try:
        _wait_listening(port, proc, log_path)
        yield bouncer
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"pgbouncer exited ({proc.returncode}):\n{log_path.read_text()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    pytest.fail(f"pgbouncer not listening on {port} after 10 s:\n{log_path.read_text()}")
