"""Hostile payloads written through SQL (nested 5,000 deep; 20 MB) as the dashboard and
the CLI show them: a placeholder or a cut text, never a 500, a crash or a 20 MB page."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import httpx
import pytest

from aiopgq import Error, Queue
from aiopgq.dashboard import create_app

from ..support.cli import ROOT

DEPTH = 5000
BIG = 20 * 1024 * 1024
BOUND = 256 * 1024  # what any one page or command may print for these jobs


async def _hostile_jobs(queue: Queue, conn: asyncpg.Connection) -> tuple[int, int]:
    """A job with a payload nested DEPTH deep, and one with a BIG payload, put in by SQL."""
    deep = '{"a": ' + "[" * DEPTH + "]" * DEPTH + "}"
    jobs = f"{queue.schema}.jobs"
    deep_id = await conn.fetchval(
        f"INSERT INTO {jobs} (queue, task, payload) VALUES ('default', 'deep', $1::jsonb) "
        "RETURNING id",
        deep,
    )
    # The schema's owner raised the database's limit (8 MiB by default) for big payloads.
    await conn.execute(f"SELECT {queue.schema}.set_max_payload_bytes($1)", 2 * BIG)
    big_id = await conn.fetchval(
        f"INSERT INTO {jobs} (queue, task, payload) "
        "VALUES ('default', 'big', jsonb_build_object('blob', repeat('x', $1::int))) RETURNING id",
        BIG,
    )
    return deep_id, big_id


async def test_the_dashboard_shows_placeholders_and_cut_payloads(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    deep_id, big_id = await _hostile_jobs(queue, conn)
    await conn.execute(
        f"UPDATE {queue.schema}.jobs SET status = 'failed', finished_at = now() WHERE id = $1",
        deep_id,
    )
    transport = httpx.ASGITransport(app=create_app(queue))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for path in ("/", "/jobs", "/jobs?status=failed"):
            page = await http.get(path)
            assert page.status_code == 200, (path, page.text[:500])
            assert len(page.content) < BOUND
        deep = await http.get(f"/jobs/{deep_id}")
        assert deep.status_code == 200 and len(deep.content) < BOUND
        assert "&lt;payload not shown: nested too deep to show" in deep.text
        for live in ({}, {"X-Aiopgq-Live": "1"}):
            big = await http.get(f"/jobs/{big_id}", headers=live)
            assert big.status_code == 200 and len(big.content) < BOUND
            assert "&lt;payload not shown: too large, its first 65,536 characters" in big.text
            assert "20.0 MB" in big.text and "{&#34;blob&#34;: &#34;xxx" in big.text


def _cli(dsn: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "aiopgq", *args, "--schema", schema],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_cli_shows_placeholders_and_cut_payloads(
    dsn: str, queue: Queue, conn: asyncpg.Connection
) -> None:
    deep_id, big_id = await _hostile_jobs(queue, conn)
    listed = _cli(dsn, queue.schema, "jobs")
    assert listed.returncode == 0, listed.stderr
    assert f"{deep_id:>10} pending" in listed.stdout and f"{big_id:>10} pending" in listed.stdout
    assert len(listed.stdout) < BOUND
    deep = _cli(dsn, queue.schema, "job", str(deep_id))
    assert deep.returncode == 0, deep.stderr
    assert "payload:   <payload not shown: nested too deep to show" in deep.stdout
    big = _cli(dsn, queue.schema, "job", str(big_id))
    assert big.returncode == 0, big.stderr
    assert "<payload not shown: too large, its first 65,536 characters" in big.stdout
    assert len(big.stdout) < BOUND
    as_json = _cli(dsn, queue.schema, "job", str(deep_id), "--json")
    assert as_json.returncode == 0 and "nested too deep to show" in as_json.stdout


async def test_the_public_getters_keep_payloads_whole_or_say_what_is_wrong(
    queue: Queue, conn: asyncpg.Connection
) -> None:
    deep_id, big_id = await _hostile_jobs(queue, conn)
    assert (await queue.get_job(big_id)).payload == {"blob": "x" * BIG}
    with pytest.raises(Error, match=f"job {deep_id}'s payload, result or metadata is nested too"):
        await queue.get_job(deep_id)
    with pytest.raises(Error, match="nested too deep"):
        await queue.list_jobs()
