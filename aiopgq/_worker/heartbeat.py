"""Heartbeat: extends the lease of every job this worker holds, in one statement."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import asyncpg

from .._db.statements import Statements
from .._db.transient import Backoff
from .leases import Leases
from .progress import ProgressBoard

logger = logging.getLogger("aiopgq.heartbeat")


async def run_heartbeat(
    pool: asyncpg.Pool,
    sql: Statements,
    worker_id: str,
    held_ids: Callable[[], list[int]],
    interval: float,
    leases: Leases,
    progress: ProgressBoard,
) -> None:
    """Every `interval` seconds, touch heartbeat_at of the jobs in `held_ids()`; the
    progress handlers reported since the last beat rides along in the same statement."""
    backoff = Backoff(logger, "heartbeat", consequence="will retry at the next beat")
    while True:
        await anyio.sleep(interval)
        ids = held_ids()
        if not ids:
            continue
        reported = progress.take() if progress else []
        sent = time.monotonic()
        try:
            async with pool.acquire() as conn:
                if reported:
                    rows = await conn.fetch(
                        sql.heartbeat_progress,
                        ids,
                        worker_id,
                        [c.job_id for c in reported],
                        [c.attempt for c in reported],
                        [c.progress_value for c in reported],
                        [c.state_text for c in reported],
                    )
                else:
                    rows = await conn.fetch(sql.heartbeat, ids, worker_id)
        except Exception as exc:
            progress.restore(reported)
            backoff.failed(exc)  # the interval is the delay
        else:
            leases.renewed(sent, [row[0] for row in rows])
            backoff.succeeded()
