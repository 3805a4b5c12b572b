"""Presence: the worker's row in the workers registry, kept fresh by the heartbeat.

One upsert when the worker starts (in its start statement: startup.py) and one per
heartbeat interval whether or not it holds jobs (never per job); one delete when it
stops cleanly. A failure here never stops the worker or its leases: it is logged and
tried again at the next beat.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence

import anyio
import asyncpg

from .._db.connection import Connection
from .._db.outage import Outage
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import Backoff
from .._version import __version__

logger = logging.getLogger("aiopgq.presence")

# The maintenance leader deletes rows not seen for this many of their heartbeat intervals.
EXPIRE_AFTER_BEATS = 3


class Presence:
    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        worker_id: str,
        *,
        queues: Sequence[str],
        concurrency: int,
        heartbeat_interval: float,
        outage: Outage,
    ) -> None:
        self._pool = pool
        self._sql = sql
        # The registry row's columns, as sql/workers/worker_register.sql takes them.
        self.row = (
            worker_id,
            socket.gethostname(),
            os.getpid(),
            list(queues),
            concurrency,
            __version__,
            heartbeat_interval,
        )
        self._backoff = Backoff(
            logger,
            "recording the worker in the registry",
            interval=heartbeat_interval,
            outage=outage,
        )
        # Our row was written (by a beat, or by the start statement: startup.py): leave()
        # deletes it. A start refused before (SchemaError) has nothing to delete.
        self.listed = False

    async def beat(self) -> None:
        """Record this worker as alive now (also its first registration)."""
        try:
            await run_pooled(self._pool, self._register)
        except Exception as exc:
            # Never fatal: a worker without its row still runs jobs (a role granted
            # before schema version 13 may lack the table; the log says so once).
            self._backoff.failed(exc, retry_any=True)
        else:
            self.listed = True
            self._backoff.succeeded()

    async def _register(self, conn: Connection) -> None:
        await conn.execute(self._sql.worker_register, *self.row)

    async def leave(self) -> None:
        """Stopping cleanly: delete our row (bounded; shielded from cancellation)."""
        if not self.listed:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            try:
                async with self._pool.acquire() as conn:
                    await conn.execute(self._sql.worker_deregister, self.row[0])
            except Exception as exc:  # it expires on its own after a few intervals
                logger.info("could not leave the workers registry (%s); the row will expire", exc)
