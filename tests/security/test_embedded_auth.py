"""The embedded server lets no other local user in: no TCP port, and a socket only its own
account (and root) can open. Attacked from a real process running as another account."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from aiopgq.embedded import EmbeddedServer, start_persistent, start_throwaway

IS_ROOT = os.geteuid() == 0


async def attempt(**where: Any) -> str:
    """Connect as superuser postgres with no password; what happened."""
    try:
        conn = await asyncpg.connect(user="postgres", database="postgres", timeout=10, **where)
    except Exception as exc:
        return f"refused: {type(exc).__name__}: {exc}"
    try:
        return f"connected as {await conn.fetchval('SELECT current_user')}"
    finally:
        await conn.close()


def attempts_as(uid: int, gid: int, socket_dir: str, port: int) -> dict[str, str]:
    """`attempt` over TCP and on the socket, from a forked child running as uid:gid.

    A fork, not a new interpreter: that account may not reach this Python (under /root).
    """
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        code = 1
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)  # for good: no way back to root
            os.environ["HOME"] = "/nonexistent"  # asyncpg looks for ~/.pgpass
            outcome = {
                "uid": str(os.getuid()),
                "tcp": asyncio.run(attempt(host="127.0.0.1", port=port)),
                "socket": asyncio.run(attempt(host=socket_dir, port=port)),
            }
            os.write(writer, json.dumps(outcome).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, f"the child failed: {data!r}"
    result: dict[str, str] = json.loads(data)
    return result


@pytest.fixture(params=["throwaway", "persistent"])
def server(request: pytest.FixtureRequest) -> Iterator[EmbeddedServer]:
    if request.param == "throwaway":
        with start_throwaway() as started:
            yield started
        return
    # Under /tmp, open to the server account when we are root (pytest's tmp_path is not).
    folder = Path(tempfile.mkdtemp(prefix="aiopgq-auth-test-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        with start_persistent(folder / "pg18") as started:
            yield started
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fetch(dsn: str, sql: str, **connect: Any) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(dsn, timeout=10, **connect)
        try:
            return [tuple(row) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(go())


def server_uid(server: EmbeddedServer) -> int:
    return Path(f"/proc/{server.pid}").stat().st_uid


def test_no_tcp_port_no_trust_for_tcp_and_a_private_socket(server: EmbeddedServer) -> None:
    assert fetch(server.dsn, "SELECT current_user") == [("postgres",)]  # the owner gets in
    assert fetch(server.dsn, "SHOW listen_addresses") == [("",)]
    rules = fetch(server.dsn, "SELECT type, auth_method FROM pg_hba_file_rules")
    assert ("local", "trust") in rules
    assert not [rule for rule in rules if rule[0].startswith("host") and rule[1] == "trust"]
    with pytest.raises(OSError):
        fetch("postgresql://postgres@127.0.0.1/postgres", "SELECT 1", port=server.port)

    folder = Path(server.socket_dir).stat()
    socket = (Path(server.socket_dir) / f".s.PGSQL.{server.port}").stat()
    assert stat.S_ISDIR(folder.st_mode) and stat.S_IMODE(folder.st_mode) == 0o700
    assert stat.S_ISSOCK(socket.st_mode) and stat.S_IMODE(socket.st_mode) == 0o700
    assert folder.st_uid == socket.st_uid == server_uid(server)


def another_account(server: EmbeddedServer) -> tuple[int, int]:
    """(uid, gid) of a local account that is neither root nor the server's: nobody, else a
    uid no account has (as good a stranger for the kernel)."""
    taken = {0, server_uid(server)}
    nobody = pwd.getpwnam("nobody")
    if nobody.pw_uid not in taken:
        return nobody.pw_uid, nobody.pw_gid
    uid = next(u for u in range(54321, 60000) if u not in {e.pw_uid for e in pwd.getpwall()})
    return uid, uid


def test_another_local_user_cannot_connect(server: EmbeddedServer) -> None:
    if not IS_ROOT:
        pytest.skip(
            "needs root (to start a process as another local user):"
            " run pytest as root to include it"
        )
    uid, gid = another_account(server)
    outcome = attempts_as(uid, gid, server.socket_dir, server.port)
    assert outcome["uid"] == str(uid)
    assert outcome["tcp"].startswith("refused: "), outcome
    assert outcome["socket"].startswith("refused: "), outcome
    assert "ermission denied" in outcome["socket"], outcome
    # Meanwhile the owner's DSN works, and the server never saw the stranger.
    assert fetch(server.dsn, "SELECT 1") == [(1,)]
