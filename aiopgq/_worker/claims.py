"""Claims: the fetcher's own connection and the statements that claim jobs.

A claim locks up to `limit` runnable jobs with SKIP LOCKED and marks them running
in one statement; the `done`s the completer buffered ride along and commit with it.

Queues with limits (concurrency, rate, per-key: see `Queue.configure`) are claimed
through their own statement, which applies them (sql/dequeue_limited.sql); the
others through the plain one, which never reads a queue's settings. Which queues
have limits is read at the first claim, again when configure() says so (NOTIFY),
and at least every `settings_interval` seconds.
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
from .completer import Completer, Outcomes
from .wakeups import Wakeups

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
        wakeups: Wakeups,
        *,
        settings_interval: float,
        hold_transaction: bool = False,
        traced: bool = False,
    ) -> None:
        self._pool = pool
        self._sql = sql
        self._worker_id = worker_id
        self._completer = completer
        self._held_ids = held_ids  # jobs this worker runs or has not yet committed
        self._wakeups = wakeups
        self._traced = traced  # rows carry each job's trace_context as a tenth column
        self._claim_limited_sql = sql.dequeue_limited_traced if traced else sql.dequeue_limited
        self._queues = list(queues)
        self._settings_interval = settings_interval
        # A held transaction keeps a limited queue's lock for its whole batch: peers
        # skip that queue meanwhile instead of waiting for it.
        self._wait_for_locks = not hold_transaction
        self._limited: list[str] = []  # claimed through dequeue_limited, in turn order
        self._plain_queues: list[str] = []
        self._claim = self._claim_completing = ""
        self._queues_arg: str | list[str] = ""
        self._use_plain(self._queues)
        self._settings_due = 0.0  # time.monotonic() of the next read: at the first claim
        self._conn: PoolConnectionProxy[Any] | None = None
        self._orphans_possible = False  # a claim failed: it may have committed unseen
        self.count = 0
        # After a claim: a limit held back runnable jobs (then claim again when a job of
        # ours ends, or at the time given to wakeups), or left keys unvisited (`more`).
        self.held_back = False
        self.more = False

    def _use_plain(self, queues: list[str]) -> None:
        self._plain_queues = queues
        several = len(queues) > 1
        self._claim = self._sql.claim(several_queues=several, completing=False, traced=self._traced)
        self._claim_completing = self._sql.claim(
            several_queues=several, completing=True, traced=self._traced
        )
        self._queues_arg = list(queues) if several else (queues[0] if queues else "")

    async def claim(self, conn: Connection, limit: int) -> list[asyncpg.Record]:
        """Claim up to `limit` jobs on `conn` (committing the `done`s riding along)."""
        if self._orphans_possible:
            orphans = await conn.fetch(self._sql.release_orphans, self._worker_id, self._held_ids())
            self._orphans_possible = False
            if orphans:
                logger.warning(
                    "released %d jobs claimed by a dequeue whose reply was lost", len(orphans)
                )
        if self._wakeups.settings_stale or time.monotonic() >= self._settings_due:
            await self._read_settings(conn)
        self.count += 1
        riding = self._completer.take_done()
        try:
            if self._limited:
                rows = await self._claim_limited(conn, limit, riding)
                self._completer.landed(riding, committed=True)
                riding = Outcomes()
                if len(rows) >= limit or not self._plain_queues:
                    return rows
                return rows + await self._claim_plain(conn, limit - len(rows), riding)
            return await self._claim_plain(conn, limit, riding)
        except BaseException:
            self._completer.landed(riding, committed=False)
            raise

    async def _claim_plain(
        self, conn: Connection, limit: int, riding: Outcomes
    ) -> list[asyncpg.Record]:
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
        self._completer.landed(riding, committed=True)
        return rows

    async def _claim_limited(
        self, conn: Connection, limit: int, riding: Outcomes
    ) -> list[asyncpg.Record]:
        queues = self._limited
        self._limited = queues[1:] + queues[:1]  # each limited queue goes first in turn
        rows: list[asyncpg.Record] = await conn.fetch(
            self._claim_limited_sql,
            queues,
            limit,
            self._worker_id,
            self._wait_for_locks,
            riding.done_ids,
            riding.done_attempts,
            riding.done_results,
        )
        self.held_back = self.more = False
        jobs = []
        for row in rows:
            if row[0] is not None:
                jobs.append(row)
                continue
            wait = row[7]  # see sql/dequeue_limited.sql
            if wait < 0:
                self.more = True
            else:
                self.held_back = True
                if wait > 0:
                    self._wakeups.look_again_in(wait)
        return jobs

    async def _read_settings(self, conn: Connection) -> None:
        self._wakeups.settings_stale = False  # a NOTIFY from now on asks again
        try:
            limited: list[str] = list(await conn.fetchval(self._sql.limited_queues, self._queues))
        except BaseException:
            self._wakeups.settings_stale = True
            raise
        self._settings_due = time.monotonic() + self._settings_interval
        if sorted(limited) == sorted(self._limited):
            return
        logger.info(
            "queues with limits: %s",
            ",".join(limited) or "none",
            extra={"worker": self._worker_id, "queues": limited},
        )
        self._limited = limited
        self._use_plain([q for q in self._queues if q not in limited])
        self.held_back = self.more = False

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
