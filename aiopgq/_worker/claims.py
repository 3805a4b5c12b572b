"""Claims: the fetcher's own connection and the one statement that claims jobs.

A claim locks up to `limit` runnable jobs with SKIP LOCKED and marks them running
in one statement; the `done`s the completer buffered ride along and commit with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import asyncpg
from asyncpg.pool import PoolConnectionProxy

from .._db.connection import Connection
from .._db.statements import Statements
from .completer import Completer
from .leases import Leases

logger = logging.getLogger("aiopgq.fetcher")


class Claims:
    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        queues: Sequence[str],
        worker_id: str,
        completer: Completer,
        held_ids: Callable[[], list[int]],
        leases: Leases,
        *,
        traced: bool = False,
        checkpoint: bool = False,
    ) -> None:
        self._pool = pool
        self._sql = sql
        self._worker_id = worker_id
        self._completer = completer
        self._held_ids = held_ids  # jobs this worker runs or has not yet committed
        self._leases = leases
        several = len(queues) > 1
        # Extra columns: `traced` the trace context, `checkpoint` each job's saved state
        # (workers whose handlers take a JobContext or have middleware).
        extra = {"traced": traced, "checkpoint": checkpoint}
        self._claim = sql.claim(several_queues=several, completing=False, **extra)
        self._claim_completing = sql.claim(several_queues=several, completing=True, **extra)
        self._queues_arg: str | list[str] = list(queues) if several else queues[0]
        self._conn: PoolConnectionProxy[Any] | None = None
        self._orphans_possible = False  # a claim failed: it may have committed unseen
        self.count = 0

    async def claim(self, conn: Connection, limit: int) -> list[asyncpg.Record]:
        """Claim up to `limit` jobs on `conn` (committing the `done`s riding along)."""
        if self._orphans_possible:
            orphans = await conn.fetch(self._sql.release_orphans, self._worker_id, self._held_ids())
            self._orphans_possible = False
            if orphans:
                logger.warning(
                    "released %d jobs claimed by a dequeue whose reply was lost", len(orphans)
                )
        self.count += 1
        riding = self._completer.take_done()
        sent = time.monotonic()  # the leases of the jobs claimed start after this
        try:
            if riding:
                rows: list[asyncpg.Record] = await conn.fetch(
                    self._claim_completing,
                    self._queues_arg,
                    limit,
                    self._worker_id,
                    riding.done_ids,
                    riding.done_attempts,
                    riding.done_results,
                )
            else:  # a lighter statement: this is the latency path of an idle worker
                rows = await conn.fetch(self._claim, self._queues_arg, limit, self._worker_id)
        except BaseException:
            self._completer.landed(riding, committed=False)
            raise
        self._completer.landed(riding, committed=True)
        if rows:
            self._leases.claimed(sent)
        return rows

    def failed(self) -> None:
        """A claim failed: its reply was lost, maybe after it committed. Before the next
        claim, jobs marked ours that we do not hold go back to pending."""
        self._orphans_possible = True

    async def connection(self) -> PoolConnectionProxy[Any]:
        # One pool connection held for the fetcher's life: no acquire and release
        # (with the pool's reset, maybe a round trip) per fetch.
        if self._conn is None or self._conn.is_closed():
            self._conn = await self._pool.acquire()
        return self._conn

    async def drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._pool.release(conn, timeout=5)
                except Exception as exc:  # broken: asyncpg terminates it
                    logger.debug("releasing the fetch connection failed (%s)", exc)
