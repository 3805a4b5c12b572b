"""Claims: the fetcher's own connection and the one statement that claims jobs.

A claim locks up to `limit` runnable jobs with SKIP LOCKED and marks them running
in one statement; the `done`s the completer buffered ride along and commit with it.

The fetcher's connection is its own, outside the pool (application_name
`aiopgq-fetcher <worker id>`). A pool connection held for the worker's life would be
taken back by asyncpg when the server closes it, and the holder's proxy disabled: the
next look at it raised "connection has been released back to the pool". Our own
connection can always be asked `is_closed()`, and is replaced at once when it is.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from .._db.connection import Connection, close_quietly
from .._db.statements import Statements
from .completer import Completer

logger = logging.getLogger("aiopgq.fetcher")


class Claims:
    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection[Any]]],
        sql: Statements,
        queues: Sequence[str],
        worker_id: str,
        completer: Completer,
        held_ids: Callable[[], list[int]],
        *,
        traced: bool = False,
    ) -> None:
        self._connect = connect
        self._sql = sql
        self._worker_id = worker_id
        self._completer = completer
        self._held_ids = held_ids  # jobs this worker runs or has not yet committed
        several = len(queues) > 1
        self._claim = sql.claim(several_queues=several, completing=False, traced=traced)
        self._claim_completing = sql.claim(several_queues=several, completing=True, traced=traced)
        self._queues_arg: str | list[str] = list(queues) if several else queues[0]
        self._conn: asyncpg.Connection[Any] | None = None
        self._orphans_possible = False  # a claim failed: it may have committed unseen
        self._resuming = False  # the next claim is the first since the failure
        self.count = 0

    async def claim(self, conn: Connection, limit: int) -> list[asyncpg.Record]:
        """Claim up to `limit` jobs on `conn` (committing the `done`s riding along)."""
        if self._resuming:
            self._resuming = False  # claim first: the orphans can wait one claim
        elif self._orphans_possible:
            orphans = await conn.fetch(self._sql.release_orphans, self._worker_id, self._held_ids())
            self._orphans_possible = False
            if orphans:
                logger.info(
                    "released %d jobs claimed by a dequeue whose reply was lost", len(orphans)
                )
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

    def failed(self) -> None:
        """A claim failed: its reply was lost, maybe after it committed. Jobs marked ours
        that we do not hold go back to pending, before the second claim from now: the
        first one resumes the work at once (what it claims is held by then)."""
        self._orphans_possible = self._resuming = True

    async def connection(self) -> asyncpg.Connection[Any]:
        """The fetcher's connection, made afresh if there is none or the server closed it."""
        conn = self._conn
        if conn is None or conn.is_closed():
            if conn is not None:
                logger.info("fetch connection lost; reconnecting")
            self._conn = None
            conn = self._conn = await self._connect()
        return conn

    async def drop_connection(self) -> None:
        """Close the connection (after a failure, or when stopping); the next claim
        connects afresh."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await close_quietly(conn)
