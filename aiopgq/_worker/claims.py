"""Claims: the fetcher's own connection and the one statement that claims jobs.

A claim locks up to `limit` runnable jobs with SKIP LOCKED and marks them running
in one statement; the `done`s the completer buffered ride along and commit with it.
It reads the worker's queues that are not paused (pauses.py): the statement and its
queue argument are chosen again only when that set changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import asyncpg
from asyncpg.pool import PoolConnectionProxy

from .._db.connection import Connection
from .._db.statements import Statements
from .completer import Completer
from .pauses import Pauses

logger = logging.getLogger("aiopgq.fetcher")


class Claims:
    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        pauses: Pauses,
        worker_id: str,
        completer: Completer,
        held_ids: Callable[[], list[int]],
        *,
        traced: bool = False,
    ) -> None:
        self._pool = pool
        self._sql = sql
        self._worker_id = worker_id
        self._completer = completer
        self._held_ids = held_ids  # jobs this worker runs or has not yet committed
        self._pauses = pauses
        self._claim = self._claim_completing = ""
        self._queues_arg: str | list[str] | None = None  # None: every queue is paused
        self._version = -1
        self._traced = traced
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
        if self._version != self._pauses.version:
            self._target()
        if self._queues_arg is None:
            return []
        self.count += 1
        riding = self._completer.take_done()
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
        return rows

    def _target(self) -> None:
        """Claim from the queues not paused: one queue's statement or the several's."""
        queues = self._pauses.active()
        several = len(queues) > 1
        traced = self._traced
        self._claim = self._sql.claim(several_queues=several, completing=False, traced=traced)
        self._claim_completing = self._sql.claim(
            several_queues=several, completing=True, traced=traced
        )
        self._queues_arg = (list(queues) if several else queues[0]) if queues else None
        self._version = self._pauses.version

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
