"""Heartbeat: extends the lease of every job this worker holds, in one statement,
and tells the workers registry this worker is alive.

The lease statement also carries the progress handlers reported since the last beat,
and returns which jobs it renewed, which it found no longer ours (the fence stops
those, leases.py), and which among them were cancelled meanwhile: the fallback for a
cancel NOTIFY the listener missed (sql/lease/heartbeat.sql).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio
import asyncpg

from .._context import JobContext
from .._db.connection import Connection
from .._db.outage import Outage
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import Backoff
from .leases import Leases
from .presence import Presence
from .progress import ProgressBoard

logger = logging.getLogger("aiopgq.heartbeat")


async def run_heartbeat(
    pool: asyncpg.Pool,
    sql: Statements,
    worker_id: str,
    held_ids: Callable[[], list[int]],
    interval: float,
    cancelled: Callable[[Sequence[int]], object],
    leases: Leases,
    progress: ProgressBoard,
    presence: Presence,
    outage: Outage,
) -> None:
    """Every `interval` seconds, touch heartbeat_at of the jobs in `held_ids()` (with
    the progress reported since the last beat), pass those that were cancelled to
    `cancelled` and tell `leases` which were renewed; then the registry row (one
    statement more per interval, held jobs or not)."""
    backoff = Backoff(logger, "heartbeat", interval=interval, outage=outage)
    while True:
        await anyio.sleep(interval)
        ids = held_ids()
        if ids:
            reported = progress.take() if progress else []
            sent = time.monotonic()

            async def beat(
                conn: Connection, ids: list[int] = ids, reported: list[JobContext] = reported
            ) -> tuple[list[int], list[int], list[int]]:
                return await _beat(conn, sql, worker_id, ids, reported)

            try:
                # One statement: run again on another connection only if never sent.
                renewed, lost, gone = await run_pooled(pool, beat)
            except Exception as exc:
                progress.restore(reported)
                backoff.failed(exc)  # the interval is the delay
            else:
                backoff.succeeded()
                if gone:  # first: a cancelled job ends cancelled, not fenced
                    cancelled(gone)
                leases.renewed(sent, ids, renewed, lost)
        else:  # nothing held: no lease to renew, and none of the claims so far matters
            leases.renewed(time.monotonic(), (), (), ())
            backoff.idle()  # nothing to extend: no failure left to retry
        await presence.beat()


async def _beat(
    conn: Connection, sql: Statements, worker_id: str, ids: list[int], reported: list[JobContext]
) -> tuple[list[int], list[int], list[int]]:
    """Extend the leases of `ids` (with the progress `reported`): the ids renewed, lost
    and cancelled (sql/lease/heartbeat.sql)."""
    if reported:
        row = await conn.fetchrow(
            sql.heartbeat_progress,
            ids,
            worker_id,
            [c.job_id for c in reported],
            [c.attempt for c in reported],
            [c.progress_value for c in reported],
            [c.state_text for c in reported],
        )
    else:
        row = await conn.fetchrow(sql.heartbeat, ids, worker_id)
    assert row is not None  # aggregates: always one row
    return list(row["renewed"]), list(row["lost"]), list(row["cancelled"])
