"""aiopgq.testing: the plugin's fixtures and run_jobs do what the README says. The plugin
runs in a pytest of its own (a subprocess), as in a user's project; tests/docs runs the
README's example project."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from aiopgq import JobStatus, Queue
from aiopgq.testing import run_jobs

from .support.project import run_pytest

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
