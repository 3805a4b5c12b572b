"""Heartbeat: extends the lease of every job this worker holds, in one statement."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import asyncpg

from ._retry import is_transient
from ._sql import Statements

logger = logging.getLogger("aiopgq.heartbeat")


async def run_heartbeat(
    pool: asyncpg.Pool,
    sql: Statements,
    worker_id: str,
    held_ids: Callable[[], list[int]],
    interval: float,
) -> None:
    """Every `interval` seconds, touch heartbeat_at of the jobs in `held_ids()`."""
    while True:
        await anyio.sleep(interval)
        ids = held_ids()
        if not ids:
            continue
        try:
            async with pool.acquire() as conn:
                await conn.execute(sql.heartbeat, ids, worker_id)
        except Exception as exc:
            if not is_transient(exc):
                raise
            logger.warning("heartbeat for %d jobs failed (%s); will retry", len(ids), exc)
