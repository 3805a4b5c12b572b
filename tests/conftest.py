"""Fixtures: a real PostgreSQL, and a fresh schema per test so tests run in any order."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from aiopgq import Queue

from .support import system

# The fixtures that start a system program mark the tests that use them.
_FIXTURE_NEEDS = {"browser": "chromium", "bouncer": "pgbouncer"}
_INSTALL_ERRORS = pytest.StashKey[dict[str, str]]()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """How many processes `-n auto` (the default, pyproject's addopts) runs the tests in.

    Each has its own throwaway embedded server, or on DATABASE_URL its own database
    there (`database_url`), so they share nothing but the machine: one more than the
    cores (at most 4), as most tests wait rather than compute. One process (no
    distribution) for the slow set (chaos and fleets of processes load the machine by
    themselves) and when tests are named on the command line. AIOPGQ_TEST_PROCESSES
    sets the number.
    """
    chosen = os.environ.get("AIOPGQ_TEST_PROCESSES")
    if chosen:
        return int(chosen)
    if config.option.markexpr != "not slow":
        return 0
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        return 0
    return min(4, (os.cpu_count() or 1) + 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Install (as root) the system programs the selected tests need and lack, once."""
    needed: dict[str, system.Component] = {}
    for item in items:
        for fixture, name in _FIXTURE_NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.needs(name))
        for marker in item.iter_markers("needs"):
            for name in marker.args:
                needed[name] = system.COMPONENTS[name]
    lacking = [c for c in needed.values() if system.missing(c)]
    errors: dict[str, str] = {}
    if lacking and system.can_install():
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        say = reporter.write_line if reporter is not None else print
        error = system.install(lacking, say=say)
        errors = {c.name: error for c in lacking if error}
    config.stash[_INSTALL_ERRORS] = errors


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("needs"):
        for name in marker.args:
            component = system.COMPONENTS[name]
            if not system.missing(component):
                continue
            message = system.not_available(
                component, item.config.stash.get(_INSTALL_ERRORS, {}).get(name, "")
            )
            if system.in_ci():
                pytest.fail(f"CI=true, so this is a failure: {message}", pytrace=False)
            pytest.skip(message)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """DATABASE_URL when set, else a throwaway embedded server for this session.

    Fails (never skips) when neither is available.
    """
    dsn = os.environ.get("DATABASE_URL")
    if dsn:
        yield _database_of_this_process(dsn)
        return
    from aiopgq.embedded import start_throwaway

    try:
        server = start_throwaway()
    except Exception as exc:
        pytest.fail(
            f"no DATABASE_URL and the embedded server did not start ({exc}); "
            "install the test extra (pip install -e '.[test]') or set DATABASE_URL",
            pytrace=False,
        )
    with server:
        yield server.ensure_database("aiopgq_test")


def _database_of_this_process(dsn: str) -> str:
    """`dsn`, or under pytest-xdist a database of this process's own on its server
    (made once, kept for the next run): tests that look at the sessions or kill the
    backends of their database (current_database()) then see only their own process's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    parts = urlsplit(dsn)
    if not worker or parts.scheme not in ("postgres", "postgresql"):
        return dsn
    name = f"{parts.path.lstrip('/') or 'postgres'}_{worker}"

    async def create() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
                await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    try:
        asyncio.run(create())
    except Exception as exc:
        pytest.fail(f"cannot make database {name} on {dsn} for this test process ({exc})")
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
async def _reachable(database_url: str) -> str:
    try:
        conn = await asyncpg.connect(database_url, timeout=10)
    except Exception as exc:
        pytest.fail(
            f"the tests need PostgreSQL at {database_url} ({exc}); set DATABASE_URL "
            "or start a server",
            pytrace=False,
        )
    await conn.close()
    return database_url


@pytest.fixture
async def dsn(_reachable: str) -> str:
    return _reachable


@pytest.fixture
async def schema(dsn: str) -> AsyncIterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
async def queue(dsn: str, schema: str) -> AsyncIterator[Queue]:
    q = Queue(dsn, schema=schema)
    await q.migrate()
    async with q:
        yield q


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(dsn)
    yield c
    await c.close()


@pytest.fixture
async def roles(queue: Queue, conn: asyncpg.Connection) -> AsyncIterator[tuple[str, str]]:
    """A producer role (grant_producer) and a worker role (grant_worker) of the queue's
    schema, both LOGIN, dropped afterwards: (producer, worker)."""
    suffix = uuid.uuid4().hex[:8]
    producer, worker = f"aiopgq_producer_{suffix}", f"aiopgq_worker_{suffix}"
    for role in (producer, worker):
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', producer)
    await conn.execute(f'SELECT "{queue.schema}".grant_worker($1)', worker)
    yield producer, worker
    for role in (producer, worker):
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


@pytest.fixture
async def ledger(queue: Queue, conn: asyncpg.Connection) -> str:
    """A table where test handlers record each execution (see tests/support/app.py)."""
    table = f'"{queue.schema}".ledger'
    await conn.execute(
        f"CREATE TABLE {table} (job_id bigint, attempt int, pid int, task text, "
        "at timestamptz DEFAULT clock_timestamp())"
    )
    return table
