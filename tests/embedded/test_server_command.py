"""`aiopgq server` as a newcomer runs it: usable as root, a port that survives restarts, an
`export AIOPGQ_DSN=...` line to paste, and a demo that shares its data folder with it."""

from __future__ import annotations

import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiopgq._cli.demo import run_demo
from aiopgq._embedded.running import DEFAULT_PORT, dsn_for, port_is_free, recorded_port
from aiopgq.embedded import running_server

from .test_demo import fetch, table_of

REPO = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
EXPORT = "export AIOPGQ_DSN="

# `aiopgq server` with the root fallback folders replaced by one of the test's own, so a
# test never starts a server in the machine's real /var/lib/aiopgq.
SERVER = """
import sys
from pathlib import Path
import aiopgq._embedded.data as data
data.FALLBACK_DATA_BASES = (Path(sys.argv[1]),)
from aiopgq._cli import main
sys.exit(main(["server", *sys.argv[2:]]))
"""


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    # pytest's tmp_path sits under a 0700 folder, out of the server account's reach as root.
    folder = Path(tempfile.mkdtemp(prefix="aiopgq-server-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class Served:
    """A running `aiopgq server` process and what it printed until it was ready."""

    def __init__(self, xdg: Path, fallback: Path, *args: str) -> None:
        env = {**os.environ, "XDG_DATA_HOME": str(xdg), "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(fallback), *args],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out = self._read_until("Stop with Ctrl-C.", timeout=60)
        lines = self.out.splitlines()
        self.ready = lines[0]
        self.export = next(line for line in lines if line.startswith(EXPORT))
        # The line as a shell would run it: quoted, maybe with $HOME.
        self.dsn = os.path.expandvars(shlex.split(self.export)[1].partition("=")[2])
        self.port = int(self.ready.split()[6])

    def _read_until(self, marker: str, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd, data, deadline = self.proc.stdout.fileno(), b"", time.monotonic() + timeout
        while marker.encode() not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.proc.kill()
                pytest.fail(f"`aiopgq server` not ready within {timeout} s: {data!r}")
            chunk = os.read(fd, 4096)
            if not chunk:
                err = self.proc.stderr.read() if self.proc.stderr else b""
                pytest.fail(f"`aiopgq server` exited with {self.proc.wait()}: {data!r} {err!r}")
            data += chunk
        return data.decode()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            assert self.proc.wait(30) == 0
        finally:
            self.proc.kill()


def serve(xdg: Path, fallback: Path, *args: str) -> Served:
    return Served(xdg, fallback, *args)


def test_server_by_default_prints_a_dsn_that_survives_restarts(reachable_tmp: Path) -> None:
    xdg, fallback = reachable_tmp / "share", reachable_tmp / "fallback"
    data = xdg / "aiopgq" / "pg18"
    default_was_free = port_is_free(DEFAULT_PORT)
    first = serve(xdg, fallback)
    try:
        assert first.ready.startswith("PostgreSQL 18 is ready on port ")
        if default_was_free and first.port == DEFAULT_PORT:
            assert first.ready.endswith(f"port {DEFAULT_PORT} (the default).")
        assert f"data folder: {data}\n" in first.out
        assert first.dsn == dsn_for(data, first.port)  # its socket, in the data folder
        assert "who can connect: " in first.out and "no TCP port" in first.out
        assert fetch(first.dsn, "SELECT current_setting('data_directory')") == str(data)
        # a second server on the same folder says where the first one is, and stops
        second = subprocess.run(
            [sys.executable, "-c", SERVER, str(fallback)],
            env={**os.environ, "XDG_DATA_HOME": str(xdg), "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert "PostgreSQL already runs on data folder" in second.stderr
        assert f"\n{first.export}\n" in second.stderr
        assert "postmaster.pid" not in second.stderr
    finally:
        first.stop()
    assert recorded_port(data) == first.port

    # restarted: the same port, so the pasted DSN still works
    again = serve(xdg, fallback)
    try:
        assert again.port == first.port
        assert "(this data folder's port at its last start)" in again.ready
        assert fetch(again.dsn, "SELECT 1") == 1
    finally:
        again.stop()

    # that port taken by someone else meanwhile: a free one, and the message says why
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", first.port))
        squatter.listen()
        moved = serve(xdg, fallback)
        try:
            assert moved.port != first.port
            if moved.port != DEFAULT_PORT:
                assert "(a free one: " in moved.ready and f"{first.port}" in moved.ready
            assert fetch(moved.dsn, "SELECT 1") == 1
        finally:
            moved.stop()

    # an explicit --port is used and becomes the folder's port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        asked = probe.getsockname()[1]
    chosen = serve(xdg, fallback, "--port", str(asked))
    chosen.stop()
    assert chosen.port == asked and "(--port)" in chosen.ready
    kept = serve(xdg, fallback)
    kept.stop()
    assert kept.port == asked and "last start" in kept.ready


def test_server_as_root_keeps_its_data_where_postgres_can_enter(reachable_tmp: Path) -> None:
    home = reachable_tmp / "home"  # like /root: 0700, out of the server account's reach
    home.mkdir(mode=0o700)
    xdg, fallback = home / ".local" / "share", reachable_tmp / "fallback"
    served = serve(xdg, fallback)
    try:
        if IS_ROOT:
            data = fallback / "pg18"
            assert f"data folder: {data}\n" in served.out
            assert f"cannot enter {xdg / 'aiopgq' / 'pg18'}" in served.out
        else:  # we are the server account: our own home is fine
            data = xdg / "aiopgq" / "pg18"
            assert f"data folder: {data}\n" in served.out
        assert fetch(served.dsn, "SELECT current_setting('data_directory')") == str(data)
    finally:
        served.stop()


def test_demo_reuses_a_running_server_and_says_what_next(
    reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    xdg = reachable_tmp / "share"
    monkeypatch.setenv("XDG_DATA_HOME", str(xdg))
    data = xdg / "aiopgq" / "pg18"
    served = serve(xdg, reachable_tmp / "fallback")
    try:
        code = run_demo(None, jobs=300, latency_samples=5)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "postmaster.pid" not in out + err
        assert f"using the PostgreSQL server already running on {data}" in out
        assert table_of(out)["data"] == f"{data} (the running `aiopgq server`)"
        assert f"\n{served.export}\n" in out  # what to paste next
        assert "Quick start" in out
        # the server is still there for the user
        assert running_server(data) is not None
        assert fetch(served.dsn, "SELECT count(*) FROM aiopgq_demo.jobs") == 305
    finally:
        served.stop()

    # with no server running, the demo starts its own, stops it, and says how to keep one
    assert run_demo(None, jobs=100, latency_samples=5) == 0
    out = capsys.readouterr().out
    assert "starting the embedded PostgreSQL server" in out
    assert "Keep this PostgreSQL running in a terminal of its own" in out
    assert "\naiopgq server\n" in out
    assert running_server(data) is None
