"""Startup: a starting worker's one statement (sql/workers/worker_start.sql).

It checks the schema's version, records the worker's tasks and its row in the
registry, and reads which of its queues are paused or limited: one transaction where
a start made four (a fleet that restarts, or a CLI worker per burst, paid them all).
It runs once the LISTEN connection is up, so that its read sees every pause sent
before (pauses.py).

When it fails for any reason, the worker takes the four steps one at a time, each
with its own errors as they were before: a schema that is not there or not this
aiopgq's raises SchemaError naming the fix; a role without the rights to the tasks
table or the registry logs it and runs anyway; an unreachable database raises.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import asyncpg

from .._db import migrations
from .._db.connection import Connection
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .contracts import TaskSpec
from .pauses import Pauses
from .presence import Presence
from .registration import declarations, register_tasks

logger = logging.getLogger("aiopgq.worker")


async def start_worker(
    pool: asyncpg.Pool,
    sql: Statements,
    tasks: Mapping[str, TaskSpec],
    presence: Presence,
    pauses: Pauses,
) -> None:
    """Check the schema, record the tasks and the worker, learn the queue sets.

    Raises:
        SchemaError: the schema is missing, older or newer than this aiopgq needs.
    """
    needed = migrations.code_version()

    async def start(conn: Connection) -> asyncpg.Record | None:
        return await conn.fetchrow(sql.worker_start, *presence.row, declarations(tasks), needed)

    pauses.reading()
    try:
        row = await run_pooled(pool, start)
    except Exception as exc:
        logger.debug("the start statement failed (%s): one step at a time", exc)
        async with pool.acquire() as conn:
            await migrations.check_version(conn, sql.schema)
        await register_tasks(pool, sql, tasks, presence.row[0])
        await presence.beat()
        await pauses.refresh(pool)
        return
    assert row is not None  # aggregates without GROUP BY: always one row
    refused = migrations.version_refused(sql.schema, row["current"])
    if refused is not None:
        raise refused  # nothing was written (worker_start.sql)
    presence.listed = True
    pauses.learned(row["paused"], row["limited"])
