"""aiopgq.testing: the README's example project passes as written, and the plugin's
fixtures and run_jobs do what the README says. The plugin runs in a pytest of its own
(a subprocess), as in a user's project."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from aiopgq import JobStatus, Queue
from aiopgq.testing import run_jobs

ROOT = Path(__file__).resolve().parents[1]


def readme_section(title: str) -> str:
    text = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def readme_files(title: str) -> dict[str, str]:
    """The fenced blocks of a README section whose first line names a file (`# name: ...`)."""
    files = {}
    for block in re.findall(r"```[a-z]*\n(.*?)```", readme_section(title), flags=re.S):
        first = block.splitlines()[0]
        match = re.match(r"# ([\w.]+\.(?:py|toml))\b", first)
        if match:
            files[match.group(1)] = block
    return files


def run_pytest(project: Path, env_dsn: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AIOPGQ_DSN", "DATABASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    if env_dsn is not None:
        env["AIOPGQ_DSN"] = env_dsn
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_project(project: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (project / name).write_text(text, encoding="utf-8")


def test_the_readme_example_passes_on_the_given_database(dsn: str, tmp_path: Path) -> None:
    files = readme_files("An example project")
    assert sorted(files) == ["conftest.py", "jobs.py", "pyproject.toml", "test_jobs.py"]
    write_project(tmp_path, files)
    result = run_pytest(tmp_path, dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_readme_example_passes_on_the_plugins_own_embedded_server(tmp_path: Path) -> None:
    write_project(tmp_path, readme_files("An example project"))
    (tmp_path / "test_where.py").write_text(
        "import os\nfrom urllib.parse import urlsplit\n\n\n"
        "def test_the_plugin_started_a_server_and_said_where(aiopgq_dsn):\n"
        "    assert os.environ['AIOPGQ_DSN'] == aiopgq_dsn\n"
        "    assert urlsplit(aiopgq_dsn).path == '/aiopgq_test'\n"
    )
    result = run_pytest(tmp_path, None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


# The fixtures' promises, checked from inside a user's test session: a fresh schema per
# test (dropped after), the user's queue bound and put back, pytest_plugins in conftest.
FIXTURE_TESTS = """
import asyncpg
import pytest

from aiopgq import ConfigurationError, Queue
from aiopgq.testing import run_jobs

APP = Queue("postgresql://app@elsewhere/app", schema="app")
SEEN = []


@APP.task(name="t.double")
async def double(n: int) -> int:
    return 2 * n


async def test_first(aiopgq_queue, aiopgq_schema, aiopgq_dsn):
    queue = await aiopgq_queue(APP)
    assert queue is APP and (queue.schema, queue.dsn) == (aiopgq_schema, aiopgq_dsn)
    await double.enqueue(n=21)
    [job] = await run_jobs(queue)
    assert (job.status, job.result) == ("done", 42)
    other = await aiopgq_queue()  # a new Queue on the same schema sees the job
    assert (await other.get_job(job.id)).result == 42
    SEEN.append(aiopgq_schema)


async def test_second_gets_a_fresh_schema(aiopgq_queue, aiopgq_schema, aiopgq_dsn):
    assert (APP.schema, APP.dsn, APP.is_open) == ("app", "postgresql://app@elsewhere/app", False)
    queue = await aiopgq_queue(APP)
    assert aiopgq_schema != SEEN[0]
    assert await queue.status() == []
    conn = await asyncpg.connect(aiopgq_dsn)
    try:
        dropped = await conn.fetchval("SELECT to_regnamespace($1) IS NULL", SEEN[0])
    finally:
        await conn.close()
    assert dropped


async def test_an_open_queue_is_refused(aiopgq_queue, aiopgq_dsn):
    queue = Queue(aiopgq_dsn)
    await queue.open()
    try:
        with pytest.raises(ConfigurationError, match="bind it with aiopgq_queue"):
            await aiopgq_queue(queue)
    finally:
        await queue.close()
"""


def test_fixtures_bind_and_restore_the_users_queue_on_fresh_schemas(
    dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["aiopgq.testing"]\n')
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    (tmp_path / "test_fixtures.py").write_text(FIXTURE_TESTS)
    result = run_pytest(tmp_path, dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


async def test_run_jobs_runs_chained_jobs_and_returns_how_they_ended(queue: Queue) -> None:
    @queue.task(name="chain.first")
    async def first(n: int) -> int:
        await second.enqueue(n=n + 1)
        await second.enqueue(n=n + 2, delay=timedelta(hours=1))  # not runnable now
        return n

    @queue.task(name="chain.second")
    async def second(n: int) -> int:
        return n * 10

    done_before = await first.enqueue(n=0)
    await run_jobs(queue)
    job = await first.enqueue(n=1)
    ran = await run_jobs(queue)
    assert [(j.task, j.status, j.result) for j in ran] == [
        ("chain.first", JobStatus.DONE, 1),
        ("chain.second", JobStatus.DONE, 20),
    ]
    assert ran[0].id == job.id and done_before.id not in {j.id for j in ran}
    assert await run_jobs(queue) == []


async def test_run_jobs_opens_and_closes_a_closed_queue(dsn: str, queue: Queue) -> None:
    closed = Queue(dsn, schema=queue.schema)

    @closed.task(name="closed.one")
    async def one() -> str:
        return "ok"

    await queue.enqueue("closed.one")
    [job] = await run_jobs(closed, concurrency=1)
    assert job.result == "ok" and not closed.is_open
