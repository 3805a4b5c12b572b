"""A newcomer's shell: the runnable blocks of a markdown page, pasted in order in a fresh folder.

A Python block whose first line is `# NAME.py` is saved as NAME.py in the folder; a shell
block's lines run there one by one with bash, with AIOPGQ_DSN pointing at a database of
the test's own (the README's `export AIOPGQ_DSN=...` must name what `aiopgq server` prints
by default; the tests do not start that server, they have one:
`tests/embedded/test_server_command.py` tests it). A line whose comment says "until
Ctrl-C" runs in the background and gets SIGINT at the end.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import asyncpg
import pytest

from .markdown import ROOT, Block

# `aiopgq server`'s default, as the shell line it prints spells it (its socket under $HOME)
SERVER_DSN = "postgresql://postgres@/postgres?host=$HOME/.local/share/aiopgq/pg18&port=5433"
BIN = Path(sys.executable).parent  # python, aiopgq and uvicorn of this environment


def fetchval(dsn: str, sql: str) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(go())


@dataclass
class Newcomer:
    """A shell in a fresh folder, with AIOPGQ_DSN set, that runs a markdown page's blocks."""

    folder: Path
    dsn: str
    outputs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    background: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        keep = {k: v for k, v in os.environ.items() if k not in ("AIOPGQ_DSN", "DATABASE_URL")}
        self.env = {
            **keep,
            "PATH": f"{BIN}{os.pathsep}{keep.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),  # this checkout, as `pip install -e .` would give
            "AIOPGQ_DSN": self.dsn,
        }

    def paste(self, block: Block, *, background: bool = True, extra: str = "") -> None:
        if block.language == "python":
            first = block.text.splitlines()[0]
            assert re.fullmatch(r"# \w+\.py", first), (
                f"a Python block starts with # NAME.py: {first}"
            )
            (self.folder / first[2:]).write_text(block.text + "\n", encoding="utf-8")
            return
        assert block.language == "bash", block.language
        for line in block.text.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                if name == "AIOPGQ_DSN":
                    assert value == SERVER_DSN, (
                        "the README's DSN is not what `aiopgq server` prints"
                    )
                else:
                    self.env[name] = value
            elif "until Ctrl-C" in line:
                if background:
                    self.start(line.split("#")[0].strip() + extra)
            else:
                self.run(line)

    def run(self, line: str) -> None:
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{line}\n{done.stderr}"
        self.outputs[line.split("#")[0].strip()] = done

    def start(self, command: str) -> None:
        log = (self.folder / f"background-{len(self.background)}.log").open("w+b")
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],  # exec: the signal reaches the command itself
            cwd=self.folder,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.background.append((command, proc, log))

    def still_running(self) -> None:
        """Fail at once, with its output, if a background command exited on its own."""
        for command, proc, log in self.background:
            if proc.poll() is not None:
                log.seek(0)
                output = log.read().decode(errors="replace")
                pytest.fail(f"{command} exited with {proc.returncode}:\n{output}")

    def press_ctrl_c(self) -> dict[str, str]:
        """SIGINT to every background command; their output, once each exited with 0."""
        logs = {}
        for command, proc, log in self.background:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(30)
            finally:
                proc.kill()
            log.seek(0)
            logs[command] = log.read().decode(errors="replace")
            log.close()
            assert code == 0, f"{command} exited with {code}:\n{logs[command]}"
        self.background.clear()
        return logs

    def output(self, prefix: str) -> str:
        found = [done.stdout for line, done in self.outputs.items() if line.startswith(prefix)]
        assert found, f"the README no longer runs {prefix!r}"
        return "\n".join(found)


def wait_for(condition: Any, within: float, what: str, newcomer: Newcomer | None = None) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if newcomer is not None:
            newcomer.still_running()
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
