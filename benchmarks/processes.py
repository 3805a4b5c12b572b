"""Child processes (workers, producers): started, driven over pipes, always stopped.

Every child is `python -m benchmarks.child SPEC`. It prints `@@ {json}` lines on stdout
and reads `go` / `stop` lines on stdin. A `ChildGroup` owns the children it started and
stops them on exit, however the block ends (error, Ctrl-C, time-out); an atexit hook is
the last resort, and each child also dies with its parent (PR_SET_PDEATHSIG) and at its
own deadline.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks.trees import REPO_ROOT, TREE_ENV, note_import

MESSAGE_PREFIX = "@@ "
_LIVE_PIDS: set[int] = set()
_log_dir: Path | None = None


class ChildError(RuntimeError):
    """A child exited, timed out or reported an error."""


def log_dir() -> Path:
    """Per-run folder of child stderr logs, made on first use (by the parent only)."""
    global _log_dir
    if _log_dir is None:
        _log_dir = Path(tempfile.mkdtemp(prefix="aiopgq-bench-"))
    return _log_dir


def _kill_leftovers() -> None:
    for pid in list(_LIVE_PIDS):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _LIVE_PIDS.discard(pid)


atexit.register(_kill_leftovers)


class Child:
    """One child process and its message stream."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log_path: Path) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    async def message(self, timeout: float) -> dict[str, Any]:
        """The next `@@` message; raises ChildError on exit, error report or time-out."""
        assert self.proc.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ChildError(f"{self.name}: no message within {timeout:.0f}s")
            try:
                line = await asyncio.wait_for(self.proc.stdout.readline(), remaining)
            except asyncio.TimeoutError:
                raise ChildError(f"{self.name}: no message within {timeout:.0f}s") from None
            if not line:
                code = await self.proc.wait()
                raise ChildError(f"{self.name} exited ({code}):\n{self.log_tail()}")
            text = line.decode(errors="replace")
            if not text.startswith(MESSAGE_PREFIX):
                continue
            msg: dict[str, Any] = json.loads(text[len(MESSAGE_PREFIX) :])
            if msg.get("event") == "error":
                raise ChildError(f"{self.name} failed: {msg.get('error')}\n{self.log_tail()}")
            return msg

    async def expect(self, event: str, timeout: float) -> dict[str, Any]:
        """Skip messages until one with `event` arrives."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            msg = await self.message(max(0.01, deadline - loop.time()))
            if msg.get("event") == event:
                return msg

    def send(self, word: str) -> None:
        if self.proc.stdin is None or self.proc.stdin.is_closing():
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.proc.stdin.write(word.encode() + b"\n")

    async def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, wait `grace` seconds, then SIGKILL."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        _LIVE_PIDS.discard(self.proc.pid)


class ChildGroup:
    """Starts children; stops every one of them on exit."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    async def start(self, name: str, spec: dict[str, Any]) -> Child:
        """Start `python -m benchmarks.child SPEC`; with `aiopgq_tree` in the spec, the child
        imports aiopgq from that checkout (see `benchmarks.trees`)."""
        env = child_env(spec.get("aiopgq_tree"))
        log_path = log_dir() / f"{name}-{len(self.children)}-{os.getpid()}.log"
        with log_path.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.child",
                json.dumps(spec),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=str(REPO_ROOT),
                env=env,
                limit=256 * 1024 * 1024,
            )
        _LIVE_PIDS.add(proc.pid)
        child = Child(name, proc, log_path)
        self.children.append(child)
        return child

    async def start_ready(
        self, name: str, spec: dict[str, Any], count: int = 1, timeout: float = 60.0
    ) -> list[Child]:
        """Start `count` children from one spec and wait until each says `ready`."""
        started = [await self.start(f"{name}{i}", dict(spec, index=i)) for i in range(count)]
        ready = await asyncio.gather(*(c.expect("ready", timeout) for c in started))
        for msg in ready:
            note_import(str(spec.get("system")), msg.get("aiopgq"))
        return started

    async def stop_all(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.children), return_exceptions=True)
        self.children.clear()

    async def __aenter__(self) -> ChildGroup:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.stop_all())


def child_env(aiopgq_tree: str | None) -> dict[str, str]:
    """Environment of a child: the harness from REPO_ROOT; aiopgq from `aiopgq_tree` if given
    (else from REPO_ROOT too, which `-m` puts first on sys.path as the working directory)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.pop(TREE_ENV, None)
    if aiopgq_tree:
        env[TREE_ENV] = aiopgq_tree
    return env


async def run_command(args: list[str], timeout: float) -> str:
    """Run a helper program (pgbench); killed on time-out or cancellation. Returns stdout."""
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    _LIVE_PIDS.add(proc.pid)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        _LIVE_PIDS.discard(proc.pid)
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise ChildError(f"{args[0]} exited {proc.returncode}: {text[-2000:]}")
    return text


async def results(children: list[Child], timeout: float) -> list[dict[str, Any]]:
    """Wait for the `result` message of every child."""
    return list(await asyncio.gather(*(c.expect("result", timeout) for c in children)))


def go(children: list[Child]) -> None:
    send_all(children, "go")


def stop(children: list[Child]) -> None:
    send_all(children, "stop")


def send_all(children: list[Child], word: str) -> None:
    for c in children:
        c.send(word)
