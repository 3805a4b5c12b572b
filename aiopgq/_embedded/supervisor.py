"""Supervisor of the embedded PostgreSQL server: it never lets the server outlive its owner.

`server.py` runs this file as ``python -I -S supervisor.py CONFIG_JSON`` in a
session of its own. Its stdin is a pipe whose write end only the owner holds: commands arrive
there as JSON lines, and EOF (the owner closed it, exited, or was SIGKILLed) makes us stop
postgres and remove the temporary folders. Events go back to the owner on stdout as JSON lines:
``ready``, ``error``, ``exited`` (postgres died on its own) and ``stopped``.

`Client` is the owner's end of the same protocol. This module uses the standard library only,
so the supervisor starts fast and does not depend on how aiopgq was installed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
_PORT_ATTEMPTS = 5
_INITDB_TIMEOUT = 120.0
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


class _Failure(Exception):
    """Postgres could not be initialised or started; the message is for the owner."""


class _Abort(Exception):
    """The owner went away or we were signalled while starting: stop quietly."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Supervisor:
    """Runs initdb and postgres as configured, and obeys the owner's pipe."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.bin_dir = Path(config["bin_dir"])
        self.data_dir = Path(config["data_dir"])
        self.log_path = Path(config["log_path"])
        self.port: int | None = config["port"]
        self.preferred_ports: list[int] = list(config.get("preferred_ports") or ())
        self.settings: dict[str, str] = config["settings"]
        self.initdb_args: list[str] | None = config["initdb_args"]
        self.start_timeout = float(config["start_timeout"])
        self.cleanup_paths = [Path(p) for p in config["cleanup"]]
        user = config["user"]
        self.user_kwargs: dict[str, Any] = (
            {"user": user["uid"], "group": user["gid"], "extra_groups": user["groups"]}
            if user
            else {}
        )
        self.pid = os.getpid()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_fd = -1
        self.owner_gone = False
        self.signalled = False
        self.stop_requested = False
        self._inbox = b""
        self._commands: list[dict[str, Any]] = []

    # -- talking to the owner -------------------------------------------------------------

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}) + "\n"
        try:
            os.write(1, line.encode())
        except OSError:  # owner gone: EOF on stdin follows, nothing to report to
            pass

    def poll_owner(self, timeout: float) -> None:
        """Wait up to timeout for commands; doubles as the sleep of every polling loop."""
        if self.owner_gone:
            time.sleep(timeout)
            return
        readable, _, _ = select.select([0], [], [], timeout)
        if not readable:
            return
        chunk = os.read(0, 65536)
        if not chunk:
            self.owner_gone = True
            return
        self._inbox += chunk
        *lines, self._inbox = self._inbox.split(b"\n")
        self._commands.extend(json.loads(line) for line in lines if line.strip())

    # -- main loop ------------------------------------------------------------------------

    def run(self) -> None:
        if self.initdb_args is not None:
            self.initdb()
        self.open_log()
        self.start()
        while not (self.owner_gone or self.signalled):
            self.poll_owner(0.5)
            while self._commands:
                command = self._commands.pop(0)
                if command.get("cmd") == "stop":
                    self.stop_requested = True
                    return
                if command.get("cmd") == "restart":
                    self.restart(
                        str(command.get("mode", "fast")), float(command.get("down_for", 0.0))
                    )
            self.watch_postmaster()

    def restart(self, mode: str, down_for: float = 0.0) -> None:
        self.shutdown(mode)
        until = time.monotonic() + down_for
        while not (self.owner_gone or self.signalled) and time.monotonic() < until:
            self.poll_owner(min(0.1, until - time.monotonic()))  # commands wait meanwhile
        if self.owner_gone or self.signalled:
            return
        try:
            self.start()
        except _Failure as exc:
            self.emit("error", message=str(exc))

    def watch_postmaster(self) -> None:
        if self.proc is None or self.proc.poll() is None:
            return
        code = self.proc.returncode
        self.proc = None
        self.write_log(f"aiopgq supervisor: postgres exited on its own with code {code}\n")
        self.emit("exited", returncode=code, message=self.log_tail())

    # -- initdb and postgres --------------------------------------------------------------

    def child_setup(self) -> None:
        """In the child after the user switch: die with the supervisor, even if SIGKILLed."""
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)
        if os.getppid() != self.pid:  # supervisor died before prctl took effect
            os._exit(1)

    def spawn_kwargs(self) -> dict[str, Any]:
        return {
            "stdin": subprocess.DEVNULL,
            "close_fds": True,
            "cwd": "/",  # the owner's cwd may be a folder the server account cannot enter
            "preexec_fn": self.child_setup,
            **self.user_kwargs,
        }

    def initdb(self) -> None:
        argv = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), *(self.initdb_args or ())]
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=_INITDB_TIMEOUT, **self.spawn_kwargs()
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise _Failure(f"initdb could not run: {exc}") from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise _Failure(f"initdb failed with code {done.returncode}:\n{_tail(output)}")
        if self.signalled or self.owner_gone:
            raise _Abort

    def open_log(self) -> None:
        self.log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if "user" in self.user_kwargs:  # tidy: every file in the data dir belongs to its owner
            os.fchown(self.log_fd, self.user_kwargs["user"], self.user_kwargs["group"])

    def write_log(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.log_fd, text.encode())

    def log_tail(self, since: int = 0) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(since)
                text = log.read().decode(errors="replace")
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"
        kept = not any(self.log_path.is_relative_to(path) for path in self.cleanup_paths)
        where = self.log_path if kept else "throwaway, removed"
        return f"log tail ({where}):\n{_tail(text)}"

    def start(self) -> None:
        """Start postgres on the port asked for, else on the first preferred port that is
        not taken meanwhile, else on a free one (a fresh one if that was taken meanwhile)."""
        candidates: list[int | None]
        if self.port is not None:
            candidates = [self.port]
        else:
            candidates = [*self.preferred_ports, *[None] * _PORT_ATTEMPTS]
        for attempt, candidate in enumerate(candidates, 1):
            port = candidate if candidate is not None else _free_port()
            mark = os.lseek(self.log_fd, 0, os.SEEK_END)
            problem = self.launch(port)
            if problem is None:
                self.port = port
                assert self.proc is not None
                self.emit("ready", port=port, pid=self.proc.pid)
                return
            tail = self.log_tail(since=mark)
            if self.port is not None and "already in use" in tail:
                problem = f"port {port} is in use: pass another port, or none to get a free one"
            if attempt == len(candidates) or "already in use" not in tail:
                raise _Failure(f"{problem}; {tail}")

    def launch(self, port: int) -> str | None:
        """Run postgres on port; None once it accepts connections, else what went wrong."""
        argv = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-c", f"port={port}"]
        for name, value in self.settings.items():
            argv += ["-c", f"{name}={value}"]
        self.proc = subprocess.Popen(
            argv, stdout=self.log_fd, stderr=self.log_fd, **self.spawn_kwargs()
        )
        deadline = time.monotonic() + self.start_timeout
        while not self.ready(port):
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                return f"postgres exited with code {code} while starting on port {port}"
            if self.owner_gone or self.signalled:
                raise _Abort
            if time.monotonic() > deadline:
                self.shutdown("immediate")
                return f"postgres did not accept connections within {self.start_timeout:.0f} s"
            self.poll_owner(0.01)
        return None

    def ready(self, port: int) -> bool:
        """True once postmaster.pid says so: the check pg_ctl itself uses."""
        assert self.proc is not None
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return (
            len(lines) >= 8
            and lines[0].strip() == str(self.proc.pid)
            and lines[3].strip() == str(port)
            and lines[7].strip() == "ready"
        )

    def shutdown(self, mode: str = "fast") -> None:
        """Stop postgres: the requested shutdown mode, then immediate, then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        steps = [(STOP_SIGNALS[mode], 15.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)]
        for signum, patience in steps:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
            try:
                proc.wait(patience)
                return
            except subprocess.TimeoutExpired:
                self.write_log(f"aiopgq supervisor: postgres ignored signal {signum.name}\n")

    def cleanup(self) -> None:
        for path in self.cleanup_paths:
            shutil.rmtree(path, ignore_errors=True)


class Client:
    """The owner's end: starts a supervisor and exchanges JSON lines with it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            # -I -S: no environment, no site-packages; the supervisor needs the stdlib only.
            [sys.executable, "-I", "-S", __file__, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,  # no other child may hold a copy of our pipe ends
            start_new_session=True,  # Ctrl-C reaches the owner only, which stops us in order
            cwd="/",
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._writer = self.proc.stdin
        self._reader = self.proc.stdout
        self._inbox = b""
        self.exited: dict[str, Any] | None = None  # postgres died on its own

    def send(self, **command: Any) -> None:
        self._writer.write((json.dumps(command) + "\n").encode())
        self._writer.flush()

    def receive(self, events: set[str], timeout: float) -> dict[str, Any]:
        """The next event among `events`; raises EOFError or TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._inbox:
                line, self._inbox = self._inbox.split(b"\n", 1)
                event: dict[str, Any] = json.loads(line)
                if event["event"] == "exited":
                    self.exited = event
                if event["event"] in events:
                    return event
            remaining = max(0.0, deadline - time.monotonic())
            if not select.select([self._reader], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(self._reader.fileno(), 65536)
            if not chunk:
                raise EOFError
            self._inbox += chunk

    def close(self, patience: float = 30.0) -> None:
        """Close our pipe ends (EOF: the supervisor stops everything) and wait for it."""
        with contextlib.suppress(OSError):
            self._writer.close()
        self._reader.close()
        try:
            self.proc.wait(patience)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def forget_after_fork(self) -> None:
        """In a forked child: let go of the write end, which would keep the supervisor up.

        /dev/null takes over the fd number, so the file object's later close stays harmless.
        """
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._writer.fileno())
            os.close(null)


def main(argv: list[str]) -> int:
    """Supervise one server as configured by argv[0] (JSON); returns the exit code."""
    supervisor = Supervisor(json.loads(argv[0]))

    def on_signal(signum: int, frame: object) -> None:
        supervisor.signalled = True  # polling loops notice within half a second

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = 0
    try:
        supervisor.run()
    except _Failure as exc:
        supervisor.emit("error", message=str(exc))
        code = 1
    except _Abort:
        pass
    finally:
        supervisor.shutdown("fast")
        supervisor.cleanup()
        if supervisor.stop_requested:
            supervisor.emit("stopped")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
