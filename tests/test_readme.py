"""The docs' runnable blocks (README.md, docs/*.md), pasted in order the way a newcomer pastes them.

A fenced block right after `<!-- run: GROUP -->` belongs to GROUP. A Python block whose
first line is `# NAME.py` is saved as NAME.py in a fresh folder; a shell block's lines run
there one by one with bash, with AIOPGQ_DSN pointing at a database of this test's own (the
README's `export AIOPGQ_DSN=...` must name what `aiopgq server` prints by default; the test
does not start that server, it has one: `tests/embedded/test_server_command.py` tests it).
A line whose comment says "until Ctrl-C" runs in the background and gets SIGINT at the end.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from aiopgq._embedded.running import DEFAULT_PORT, dsn_for, export_line

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GETTING_STARTED = DOCS / "getting-started.md"
# `aiopgq server`'s default, as the shell line it prints spells it (its socket under $HOME)
SERVER_DSN = "postgresql://postgres@/postgres?host=$HOME/.local/share/aiopgq/pg18&port=5433"
BIN = Path(sys.executable).parent  # python, aiopgq and uvicorn of this environment
_BLOCK = re.compile(r"<!-- run: (\w+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)


@dataclass
class Block:
    group: str
    language: str
    text: str


def blocks(group: str, markdown: Path = README) -> list[Block]:
    found = [Block(*m.groups()) for m in _BLOCK.finditer(markdown.read_text(encoding="utf-8"))]
    return [b for b in found if b.group == group]


def fetchval(dsn: str, sql: str) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture
def database(database_url: str) -> Iterator[str]:
    """A database of its own: the README works in the default schema, aiopgq."""
    name = f"readme_{uuid.uuid4().hex[:12]}"
    fetchval(database_url, f'CREATE DATABASE "{name}"')
    yield urlunsplit(urlsplit(database_url)._replace(path=f"/{name}"))
    fetchval(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Newcomer:
    """A shell in a fresh folder, with AIOPGQ_DSN set, that runs the README's blocks."""

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


@pytest.fixture
def newcomer(database: str, tmp_path: Path) -> Iterator[Newcomer]:
    person = Newcomer(tmp_path, database)
    yield person
    for _, proc, log in person.background:  # a failed test leaves them running
        proc.kill()
        proc.wait()
        log.close()


def wait_for(condition: Any, within: float, what: str, newcomer: Newcomer | None = None) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if newcomer is not None:
            newcomer.still_running()
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.1)


def test_the_readme_dsn_is_the_one_aiopgq_server_prints_by_default() -> None:
    default = Path.home() / ".local" / "share" / "aiopgq" / "pg18"
    line = export_line(dsn_for(default, DEFAULT_PORT))
    assert line == f'export AIOPGQ_DSN="{SERVER_DSN}"'
    assert f"`{line}`" in GETTING_STARTED.read_text(encoding="utf-8")


def test_quick_start_runs_as_pasted(newcomer: Newcomer) -> None:
    quick = blocks("quickstart", GETTING_STARTED)
    assert [b.language for b in quick] == ["python", "bash", "bash"]
    for block in quick:
        newcomer.paste(block)

    first_job = newcomer.output("python app.py")
    assert "task='demo.add'" in first_job
    assert "status=<JobStatus.DONE: 'done'>" in first_job and "result=3," in first_job
    assert newcomer.output("aiopgq migrate").strip() == "schema aiopgq is up to date"
    ids = newcomer.output("aiopgq enqueue").split() + newcomer.output("echo").split()
    assert len(ids) == 2 and all(i.isdigit() for i in ids)
    assert "pending" in newcomer.output("aiopgq status")

    # the CLI worker runs what app.py left (the delayed job) and the CLI's jobs
    jobs = "SELECT count(*) FILTER (WHERE status = 'done') || '/' || count(*) FROM aiopgq.jobs"
    wait_for(lambda: fetchval(newcomer.dsn, jobs) == "1005/1005", 30, "all done", newcomer)
    log = newcomer.press_ctrl_c()["aiopgq worker app:queue --concurrency 50"]
    assert "started on queues default" in log and "stopped" in log
    results = "SELECT array_agg(result::int ORDER BY id) FROM aiopgq.jobs WHERE id = ANY($1)"
    assert fetchval_args(newcomer.dsn, results, [int(i) for i in ids]) == [3, 5]


def fetchval_args(dsn: str, sql: str, *args: Any) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


async def test_fastapi_example_enqueues_and_its_embedded_worker_runs(
    newcomer: Newcomer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for block in blocks("fastapi", GETTING_STARTED):
        newcomer.paste(block, background=False)  # migrate; the app runs in-process below
    assert "applied migrations" in newcomer.output("aiopgq migrate")
    monkeypatch.setenv("AIOPGQ_DSN", newcomer.dsn)
    aiopgq_level = logging.getLogger("aiopgq").level
    spec = importlib.util.spec_from_file_location("readme_service", newcomer.folder / "service.py")
    assert spec is not None and spec.loader is not None
    service = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(service)
        app = service.app
        transport = httpx.ASGITransport(app=app)
        # The lifespan as FastAPI runs it at startup and shutdown: the pool and the worker.
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://service") as client,
        ):
            created = await client.post("/signups", params={"email": "ada@example.com"})
            assert created.status_code == 200, created.text
            job_id = created.json()["job_id"]
            deadline = time.monotonic() + 20
            while (status := (await client.get(f"/jobs/{job_id}")).json())["status"] != "done":
                assert time.monotonic() < deadline, (
                    f"the lifespan's worker did not run it: {status}"
                )
                await asyncio.sleep(0.05)
            assert status == {"status": "done", "result": "welcomed ada@example.com", "error": None}
            assert (await client.get("/jobs/999999999")).status_code == 404
            assert service.queue.is_open
        assert not service.queue.is_open  # the lifespan closed what it opened
    finally:
        logging.getLogger("aiopgq").setLevel(aiopgq_level)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_fastapi_example_under_uvicorn_shows_aiopgq_logs(newcomer: Newcomer) -> None:
    port = free_port()
    for block in blocks("fastapi", GETTING_STARTED):
        # as written, but on a free port: 8000 may be taken on a shared machine
        newcomer.paste(block, extra=f" --port {port}")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{base}/jobs/1", timeout=1).status_code == 404
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "uvicorn serving the example", newcomer)
    job_id = httpx.post(f"{base}/signups", params={"email": "bo@example.com"}).json()["job_id"]
    wait_for(lambda: httpx.get(f"{base}/jobs/{job_id}").json()["status"] == "done", 20, "job")
    log = newcomer.press_ctrl_c()[f"uvicorn service:app --port {port}"]
    # aiopgq's INFO lines next to uvicorn's own, as the Logging section says
    assert re.search(r" INFO aiopgq\.worker: worker \S+ started on queues emails", log), log
    assert re.search(r" INFO aiopgq\.worker: worker \S+ stopped", log), log
    assert "Application startup complete" in log
