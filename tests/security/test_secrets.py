"""No password in a command line, a log line, an error, a page or an application_name.

Every local user can read every process's command line (`ps`, /proc/PID/cmdline); the
environment (/proc/PID/environ) only the same user and root. Worker processes under a
supervisor therefore get their database URLs in the environment, and everything that
prints a URL or a libpq keyword string hides its passwords.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from aiopgq import Queue
from aiopgq._db.dsn import redact
from aiopgq.dashboard import create_app

from ..support.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
# Distinctive enough that finding any of its pieces in an output means it leaked.
PASSWORD = "Sw0rdf1sh@Qx:7"
PIECES = ("Sw0rdf1sh", "Qx:7", quote(PASSWORD, safe=""))


def assert_no_password(text: str, where: str) -> None:
    for piece in PIECES:
        assert piece not in text, f"the password ({piece!r}) is in {where}:\n{text}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
        ("postgres://:pw@h/db", "postgres://:***@h/db"),
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p:a/s#s@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p%40ss%3A@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u@h/db?password=s3", "postgresql://u@h/db?password=***"),
        (
            "postgresql://u@h/db?sslmode=require&password=s3&x=y",
            "postgresql://u@h/db?sslmode=require&password=***&x=y",
        ),
        ("postgresql://u@h/db?pass%77ord=s3", "postgresql://u@h/db?pass%77ord=***"),
        ("postgresql://u@h/db?PASSWORD=s3", "postgresql://u@h/db?PASSWORD=***"),
        ("postgresql://u@h/db?sslpassword=k3y", "postgresql://u@h/db?sslpassword=***"),
        (
            "postgresql://u@h/db?password=a&b&sslmode=disable",
            "postgresql://u@h/db?password=***&sslmode=disable",
        ),
        ("postgresql://h/db?a=b?password=s3", "postgresql://h/db?a=b?password=***"),
        ("postgresql://u@h/db?password=p@ss", "postgresql://u@h/db?password=***"),
        ("host=h password=s3 user=u", "host=h password=*** user=u"),
        ("host=h password = s3", "host=h password = ***"),
        ("password='a b\\' c' user=u", "password=*** user=u"),
        ("host=h password='never closed user=u", "host=h password=***"),
        ("sslpassword=k3y host=h", "sslpassword=*** host=h"),
        ("PGPASSWORD=s3 aiopgq status", "PGPASSWORD=*** aiopgq status"),
        (
            "cannot connect to 'postgresql://app:s3@db:5432/x': connection refused",
            "cannot connect to 'postgresql://app:***@db:5432/x': connection refused",
        ),
        (
            "a postgresql://u:one@h/a and postgresql://v@h/b?password=two end",
            "a postgresql://u:***@h/a and postgresql://v@h/b?password=*** end",
        ),
        ("dsn=postgresql://u:s3@h/db", "dsn=postgresql://u:***@h/db"),
    ],
)
def test_redact_hides_each_form_of_password(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://user@host:5432/dbname",
        "postgresql://h1:5432,h2:5433/db?sslmode=require&application_name=me",
        "must start with postgresql:// (for example postgresql://user@host:5432/dbname)",
        "host=h port=5432 user=u dbname=d sslmode=require",
        'password authentication failed for user "app"',
    ],
)
def test_redact_leaves_text_without_passwords_alone(text: str) -> None:
    assert redact(text) == text


def with_password(dsn: str, user: str, password: str) -> str:
    parts = urlsplit(dsn)
    host = parts.hostname or ""  # none: the socket folder in the query string (?host=)
    where = f"{host}:{parts.port}" if parts.port else host
    netloc = f"{user}:{quote(password, safe='')}@{where}"
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass
class Role:
    name: str
    dsn: str  # the test database, as this role, with PASSWORD in it


@pytest.fixture
async def role(dsn: str, conn: asyncpg.Connection) -> AsyncIterator[Role]:
    """A login role with PASSWORD (superuser: the worker migrates nothing but reads and
    writes the test's schema; the server may trust it, the password still travels)."""
    name = f"secret_{uuid.uuid4().hex[:8]}"
    await conn.execute(f"CREATE ROLE {name} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    try:
        yield Role(name, with_password(dsn, name, PASSWORD))
    finally:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", name
        )
        await eventually(
            lambda: conn.fetchval(
                "SELECT count(*) = 0 FROM pg_stat_activity WHERE usename = $1", name
            )
        )
        await conn.execute(f"DROP OWNED BY {name}")
        await conn.execute(f"DROP ROLE {name}")


def children(pid: int) -> list[int]:
    """Live child processes of `pid`, by the parent pid in /proc/*/stat."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rpartition(")")[2].split()  # after "pid (comm)": state, ppid, ...
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def environ(pid: int) -> str:
    return Path(f"/proc/{pid}/environ").read_bytes().replace(b"\0", b"\n").decode()


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    env = {**env, "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    return subprocess.Popen(
        args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


async def check_workers(
    proc: subprocess.Popen[str], role: Role, conn: asyncpg.Connection, queue: Queue
) -> str:
    """Wait for both children to serve as `role` and run a job; check every command line
    and application_name; stop; the captured output (logs of supervisor and children)."""
    try:
        await eventually(lambda: len(children(proc.pid)) == 2, within=60)
        await eventually(
            lambda: conn.fetchval(
                "SELECT count(*) = 2 FROM pg_stat_activity "
                "WHERE usename = $1 AND application_name LIKE 'aiopgq-listener %'",
                role.name,
            ),
            within=60,
        )
        job = await queue.enqueue("app.noop", {"n": 1})
        await eventually(
            lambda: conn.fetchval(
                f"SELECT status = 'done' FROM \"{queue.schema}\".jobs WHERE id = $1", job.id
            ),
            within=60,
        )
        names = await conn.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE usename = $1", role.name
        )
        assert names
        for row in names:
            assert_no_password(row["application_name"], "an application_name")
        kids = children(proc.pid)
        for pid in kids:
            assert_no_password(cmdline(pid), f"the command line of child {pid}")
            # The URL went through the environment, readable by the same user only.
            assert role.dsn in environ(pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, out
    assert "starting 2 worker processes" in out
    assert_no_password(out, "the logs")
    return out


@pytest.mark.parametrize("given", ["flags", "environment"])
async def test_worker_processes_keep_the_password_off_command_lines_and_logs(
    given: str, role: Role, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    command = [
        sys.executable,
        "-m",
        "aiopgq",
        "worker",
        "tests.support.app:queue",
        "--processes",
        "2",
    ]
    env = {**os.environ, "AIOPGQ_TEST_SCHEMA": queue.schema}
    if given == "flags":  # the supervisor's own command line is the caller's choice
        command += ["--dsn", role.dsn, "--listen-dsn", role.dsn]
        env.pop("AIOPGQ_DSN", None)
    else:
        env.update(AIOPGQ_DSN=role.dsn, AIOPGQ_LISTEN_DSN=role.dsn)
    proc = spawn([*command, "--verbose"], env)
    if given == "environment":
        await eventually(lambda: len(children(proc.pid)) == 2, within=60)
        assert_no_password(cmdline(proc.pid), "the supervisor's command line")
    out = await check_workers(proc, role, conn, queue)
    # A password on the caller's own command line gets a warning that says what to do.
    assert ("set AIOPGQ_DSN instead" in out) == (given == "flags")


async def test_run_workers_keeps_dsn_and_listen_dsn_off_command_lines_and_logs(
    dsn: str, role: Role, queue: Queue, ledger: str, conn: asyncpg.Connection
) -> None:
    code = (
        "import logging, os, sys, aiopgq\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        "dsn = os.environ.pop('TEST_SECRET_DSN')\n"
        "sys.exit(aiopgq.run_workers('tests.support.app:queue', processes=2, dsn=dsn,"
        " listen_dsn=dsn, concurrency=2))\n"
    )
    env = {**os.environ, "AIOPGQ_TEST_SCHEMA": queue.schema, "TEST_SECRET_DSN": role.dsn}
    env["AIOPGQ_DSN"] = dsn  # what tests.support.app imports with; dsn= overrides it as --dsn does
    proc = spawn([sys.executable, "-c", code], env)
    await eventually(lambda: len(children(proc.pid)) == 2, within=60)
    assert_no_password(cmdline(proc.pid), "the command line of run_workers' process")
    await check_workers(proc, role, conn, queue)


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://app@127.0.0.1:1/db?sslmode=disable&password={quote(PASSWORD)}",
        f"postgresql://app:{PASSWORD}@127.0.0.1:1/db",
        f"host=127.0.0.1 port=1 password='{PASSWORD} x\\' y' user=app",
    ],
)
def test_the_cli_hides_the_password_when_it_cannot_connect_or_parse(dsn: str) -> None:
    env = {**os.environ, "AIOPGQ_DSN": dsn, "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "aiopgq", "status", "--verbose"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "aiopgq: " in done.stderr
    assert_no_password(done.stdout + done.stderr, "the CLI's output")
    assert "7@" not in done.stderr  # a piece of the raw password next to the host


async def test_the_dashboard_error_page_hides_the_password_while_the_database_is_down() -> None:
    queue = Queue(f"postgresql://app@127.0.0.1:1/db?password={quote(PASSWORD)}")
    transport = httpx.ASGITransport(app=create_app(queue))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        page = await http.get("/")
    assert page.status_code == 503
    assert "cannot" in page.text
    assert_no_password(page.text, "the error page")


async def test_the_cli_hides_passwords_that_a_handler_puts_in_its_error(
    role: Role, queue: Queue
) -> None:
    job = await queue.enqueue("secrets.quote_the_dsn", max_attempts=1)
    env = {**os.environ, "AIOPGQ_DSN": role.dsn, "AIOPGQ_TEST_SCHEMA": queue.schema}
    proc = spawn(
        [sys.executable, "-m", "aiopgq", "worker", "tests.support.secrets_app:queue", "--burst"],
        env,
    )
    out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 0, out
    assert (await queue.get_job(job.id)).status == "failed", out
    assert f"job {job.id}" in out and "cannot reach postgresql://" in out
    assert_no_password(out, "the worker's log")
