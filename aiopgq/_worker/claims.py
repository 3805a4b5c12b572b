"""Claims: the fetcher's own connection and the statements that claim jobs.

A claim locks up to `limit` runnable jobs with SKIP LOCKED and marks them running
in one statement; the `done`s the completer buffered ride along and commit with it.
It reads the worker's queues that are not paused (pauses.py). Those with limits
(concurrency, rate, per-key: see `Queue.configure`; or a key limit our tasks declare;
pauses.py knows which) are claimed through their own statement, which applies them
(sql/claim/dequeue_limited.sql); the others through the plain one, which never reads
a queue's settings. The statements and their queue arguments are chosen again only
when the paused set or the limited set changes.

The fetcher's connection is its own, outside the pool (application_name
`aiopgq-fetcher <worker id>`). A pool connection held for the worker's life would be
taken back by asyncpg when the server closes it, and the holder's proxy disabled: the
next look at it raised "connection has been released back to the pool". Our own
connection can always be asked `is_closed()`, and is replaced at once when it is.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg

from .._db.arrays import aligned_results, int_array, results_object
from .._db.connection import Connection, close_quietly
from .._db.statements import Statements
from .completer import Completer, Outcomes
from .leases import Leases
from .pauses import Pauses
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.fetcher")

# What a claim carrying `done`s meets when one of their rows is locked by another
# transaction: the plain claim's lock_timeout (dequeue_completing.sql), or a deadlock.
_LOCKED = (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError)


class Claims:
    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection[Any]]],
        sql: Statements,
        pauses: Pauses,
        worker_id: str,
        completer: Completer,
        held_ids: Callable[[], list[int]],
        wakeups: Wakeups,
        leases: Leases,
        *,
        traced: bool = False,
        checkpoint: bool = False,
    ) -> None:
        self._connect = connect
        self._sql = sql
        self._worker_id = worker_id
        self._completer = completer
        self._held_ids = held_ids  # jobs this worker runs or has not yet committed
        self._pauses = pauses
        self._wakeups = wakeups
        self._leases = leases
        # Extra columns: `traced` each job's trace context (a tenth column), `checkpoint`
        # its saved state (the last; workers whose handlers take a JobContext or have
        # middleware).
        self._extra = {"traced": traced, "checkpoint": checkpoint}
        self._claim_limited_sql = sql.limited_claim(traced=traced, checkpoint=checkpoint)
        # The key limits our tasks declare, per queue (key_limits.py), as the claim reads them.
        self._key_limits = json.dumps(dict(pauses.key_limits)) if pauses.key_limits else None
        self._version = -1  # of the sets (pauses.py) the targets below were chosen for
        self._limited: list[str] = []  # active, claimed through dequeue_limited, in turn
        self._claim = self._claim_completing = ""
        self._queues_arg: str | list[str] | None = None  # None: no plain queue is active
        self._conn: asyncpg.Connection[Any] | None = None
        self._connecting = anyio.Lock()
        self._orphans_possible = False  # a claim failed: it may have committed unseen
        self._resuming = False  # the next claim is the first since the failure
        self.count = 0
        # After a claim: a limit held back runnable jobs (then claim again when a job of
        # ours ends, or at the time given to wakeups), or left keys unvisited (`more`).
        self.held_back = False
        self.more = False

    async def claim(
        self, conn: Connection, limit: int, *, held: bool = False, ride: bool = True
    ) -> list[asyncpg.Record]:
        """Claim up to `limit` jobs on `conn`, committing the `done`s riding along unless
        not `ride` (the completer writes them: see awake.py's BUSY_RATE).
        `held`: in a transaction held for the batch (holding.py), which would keep a
        limited queue's lock as long: skip a queue whose lock a peer holds, do not wait."""
        if self._resuming:
            self._resuming = False  # claim first: the orphans can wait one claim
        elif self._orphans_possible:
            orphans = await conn.fetch(self._sql.release_orphans, self._worker_id, self._held_ids())
            self._orphans_possible = False
            if orphans:
                logger.info(
                    "released %d jobs claimed by a dequeue whose reply was lost", len(orphans)
                )
        if self._version != self._pauses.version:
            self._target()
        self.held_back = self.more = False
        if self._queues_arg is None and not self._limited:
            return []  # every queue is paused
        self.count += 1
        riding = self._completer.take_done() if ride else Outcomes()
        sent = time.monotonic()  # the leases of the jobs claimed start after this
        try:
            rows = await self._claim_carrying(conn, limit, riding, held)
        except _LOCKED as exc:
            self._completer.landed(riding, committed=False)
            if held or not riding:  # a held transaction is aborted: the fetcher's to handle
                raise
            # A row of a job we finished is locked by another transaction (an operator's,
            # a cancel's, or a peer's claim in a deadlock): the claim gave up at once
            # (dequeue_completing.sql). Nothing was written; claim again without the
            # `done`s, which the completer writes once the lock is gone.
            logger.debug("a claim's riding outcomes met a lock (%s): claiming without them", exc)
            rows = await self._claim_carrying(conn, limit, Outcomes(), held)
        except BaseException:
            self._completer.landed(riding, committed=False)
            raise
        if rows:
            self._leases.claimed(sent)
        return rows

    async def _claim_carrying(
        self, conn: Connection, limit: int, riding: Outcomes, held: bool
    ) -> list[asyncpg.Record]:
        """One claim: the limited queues', then the plain ones' for the slots left, the
        `riding` outcomes committed by the first."""
        if not self._limited:
            return await self._claim_plain(conn, limit, riding)
        rows = await self._claim_limited(conn, limit, riding, wait=not held)
        self._completer.landed(riding, committed=True)
        if len(rows) < limit and self._queues_arg is not None:
            rows += await self._claim_plain(conn, limit - len(rows), Outcomes())
        return rows

    async def _claim_plain(
        self, conn: Connection, limit: int, riding: Outcomes
    ) -> list[asyncpg.Record]:
        if riding:
            rows: list[asyncpg.Record] = await conn.fetch(
                self._claim_completing,
                self._queues_arg,
                limit,
                self._worker_id,
                int_array(riding.done_ids),
                int_array(riding.done_attempts),
                results_object(riding.done_results),
            )
        else:  # a lighter statement: this is the latency path of an idle worker
            rows = await conn.fetch(self._claim, self._queues_arg, limit, self._worker_id)
        self._completer.landed(riding, committed=True)
        return rows

    async def _claim_limited(
        self, conn: Connection, limit: int, riding: Outcomes, *, wait: bool
    ) -> list[asyncpg.Record]:
        queues = self._limited
        self._limited = queues[1:] + queues[:1]  # each limited queue goes first in turn
        rows: list[asyncpg.Record] = await conn.fetch(
            self._claim_limited_sql,
            queues,
            limit,
            self._worker_id,
            wait,
            int_array(riding.done_ids),
            int_array(riding.done_attempts),
            aligned_results(riding.done_ids, riding.done_results),
            self._key_limits,
        )
        jobs = []
        for row in rows:
            if row[0] is not None:
                jobs.append(row)
                continue
            wait = row[7]  # see sql/claim/dequeue_limited.sql
            if wait < 0:
                self.more = True
            else:
                self.held_back = True
                if wait > 0:
                    self._wakeups.look_again_in(wait)
        return jobs

    def _target(self) -> None:
        """Claim from the queues not paused: those with limits through the limited claim,
        the others through one queue's statement or the several's."""
        active, limited = self._pauses.active(), self._pauses.limited
        self._limited = [q for q in active if q in limited]
        plain = [q for q in active if q not in limited]
        several = len(plain) > 1
        extra = self._extra
        self._claim = self._sql.claim(several_queues=several, completing=False, **extra)
        self._claim_completing = self._sql.claim(several_queues=several, completing=True, **extra)
        self._queues_arg = (list(plain) if several else plain[0]) if plain else None
        self._version = self._pauses.version

    def failed(self) -> None:
        """A claim failed: its reply was lost, maybe after it committed. Jobs marked ours
        that we do not hold go back to pending, before the second claim from now: the
        first one resumes the work at once (what it claims is held by then)."""
        self._orphans_possible = self._resuming = True

    async def connection(self) -> asyncpg.Connection[Any]:
        """The fetcher's connection, made afresh if there is none or the server closed it."""
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        async with self._connecting:  # one connection, though two callers may ask at once
            conn = self._conn
            if conn is None or conn.is_closed():
                if conn is not None:
                    logger.info("fetch connection lost; reconnecting")
                self._conn = None
                conn = self._conn = await self._connect()
        return conn

    async def connect_ahead(self) -> None:
        """Make the connection while the worker starts, so that its first claim does
        not wait for it. A failure is left to the fetcher, which retries and reports."""
        try:
            await self.connection()
        except Exception as exc:
            logger.debug("connecting ahead of the first claim failed (%s)", exc)

    async def drop_connection(self) -> None:
        """Close the connection (after a failure, or when stopping); the next claim
        connects afresh."""
        async with self._connecting:  # and the one being made, if any
            conn, self._conn = self._conn, None
        if conn is not None:
            await close_quietly(conn)
