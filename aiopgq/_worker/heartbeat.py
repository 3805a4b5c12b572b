"""Heartbeat: extends the lease of every job this worker holds, in one statement,
and tells the workers registry this worker is alive.

The lease statement also returns the jobs among them that were cancelled meanwhile:
the fallback for a cancel NOTIFY the listener missed (sql/heartbeat.sql).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio
import asyncpg

from .._db.connection import Connection
from .._db.outage import Outage
from .._db.pooled import run_pooled
from .._db.statements import Statements
from .._db.transient import Backoff
from .presence import Presence

logger = logging.getLogger("aiopgq.heartbeat")


async def run_heartbeat(
    pool: asyncpg.Pool,
    sql: Statements,
    worker_id: str,
    held_ids: Callable[[], list[int]],
    interval: float,
    cancelled: Callable[[Sequence[int]], object],
    presence: Presence,
    outage: Outage,
) -> None:
    """Every `interval` seconds, touch heartbeat_at of the jobs in `held_ids()` and pass
    those that were cancelled to `cancelled`, then the registry row (one statement more
    per interval, held jobs or not)."""
    backoff = Backoff(logger, "heartbeat", interval=interval, outage=outage)
    while True:
        await anyio.sleep(interval)
        ids = held_ids()
        if ids:

            async def beat(conn: Connection, ids: list[int] = ids) -> list[int]:
                gone: list[int] = await conn.fetchval(sql.heartbeat, ids, worker_id)
                return gone

            try:
                gone = await run_pooled(pool, beat)
            except Exception as exc:
                backoff.failed(exc)  # the interval is the delay
            else:
                backoff.succeeded()
                if gone:
                    cancelled(gone)
        else:
            backoff.idle()  # nothing to extend: no failure left to retry
        await presence.beat()
