"""Pauses: which of the worker's queues are paused, so that its claims leave them out,
and which have limits, so that its claims apply them (Queue.configure, or a key limit
its tasks declare: key_limits.py).

The claim statement never reads the `queues` table: a worker keeps the paused set
and the limited set here and claims only the queues not paused, the limited ones
through the limited claim (claims.py rebuilds its queue lists when a set changes,
which costs the claim nothing while no queue is paused or limited). The sets are
learned
  - when the worker starts, before its first claim;
  - when a control NOTIFY of `Queue.pause`, `Queue.resume` or `Queue.configure` arrives
    (at once): the message only makes the worker read the sets again, since any role
    that can connect can send one (control.py);
  - when the LISTEN connection (re)connects (NOTIFYs may have been missed);
  - every `refresh_interval` seconds (the worker uses half its poll interval), the
    fallback that holds without a LISTEN connection (`listen=False`, burst mode, a
    connection that died silently). So a claim that starts later than half a poll
    interval plus one query after a pause leaves the queue out: within one poll
    interval, in every case (a limit set or lifted likewise).
A queue that is resumed wakes the fetcher, as a NOTIFY for it would.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import anyio
import asyncpg

from .._db.connection import Connection
from .._db.outage import Outage
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import Backoff
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.worker")


class Pauses:
    def __init__(
        self,
        sql: Statements,
        queues: Sequence[str],
        wakeups: Wakeups,
        *,
        refresh_interval: float,
        outage: Outage | None = None,
        declared: Mapping[str, int] | None = None,
    ) -> None:
        self._sql = sql
        self._outage = outage  # the worker's one account of database trouble
        self._queues = list(queues)
        self._wakeups = wakeups
        self._refresh_interval = refresh_interval
        self._paused: frozenset[str] = frozenset()
        self._limited: frozenset[str] = frozenset()
        # The key limits our tasks declare, per queue (key_limits.py): those queues are
        # limited for us whatever their settings.
        self.key_limits: Mapping[str, int] = dict(declared or {})
        self.version = 0  # bumped on every change of either set (claims.py watches it)
        self._refresh_requested = anyio.Event()

    @property
    def paused(self) -> frozenset[str]:
        return self._paused

    @property
    def limited(self) -> frozenset[str]:
        """The worker's queues with limits, set or declared by its tasks (paused or not)."""
        return self._limited

    def active(self) -> list[str]:
        """The worker's queues that are not paused, in the worker's order."""
        return [q for q in self._queues if q not in self._paused]

    def refresh_soon(self) -> None:
        """Read both sets again now (a control message arrived, or the LISTEN connection
        was re-established); requests made during a read bring one more read."""
        self._refresh_requested.set()

    async def refresh(self, pool: asyncpg.Pool) -> None:
        """Read the paused set and the limited set from the database. A request made before
        the read starts is served by it (the worker's start reads once, after its LISTEN
        connection is up, which asks for a read as every (re)connection does)."""
        self.reading()
        paused, limited = await run_pooled(pool, self._read)
        self.learned(paused, limited)

    def reading(self) -> None:
        """A read of the sets starts (refresh(), or the worker's start statement:
        startup.py): it serves every request made before, so they are forgotten."""
        self._refresh_requested = anyio.Event()

    def learned(self, paused: Iterable[str], limited: Iterable[str]) -> None:
        """The sets as read from the database (by refresh(), or by the worker's start
        statement: startup.py); the limited set gains the key-limited queues."""
        now_limited = frozenset(limited).union(self.key_limits)
        if now_limited != self._limited:
            logger.info(
                "queues with limits: %s",
                ",".join(sorted(now_limited)) or "none",
                extra={"queues": sorted(now_limited)},
            )
            self._limited = now_limited
            self.version += 1
        self._set(frozenset(paused))

    async def _read(self, conn: Connection) -> tuple[list[str], list[str]]:
        row = await conn.fetchrow(self._sql.queue_sets, self._queues)
        assert row is not None  # an aggregate without GROUP BY: always one row
        return row["paused"], row["limited"]

    async def run(self, pool: asyncpg.Pool) -> None:
        """After the first refresh: refresh every `refresh_interval` seconds, or sooner
        when asked; cancel to stop."""
        backoff = Backoff(
            logger, "reading paused queues", interval=self._refresh_interval, outage=self._outage
        )
        while True:
            # A request made while a read runs outlives it (reading() replaced the event
            # the read started with) and brings one more read.
            with anyio.move_on_after(self._refresh_interval):
                await self._refresh_requested.wait()
            try:
                await self.refresh(pool)
            except Exception as exc:
                backoff.failed(exc)  # the interval is the delay
            else:
                backoff.succeeded()

    def _set(self, paused: frozenset[str]) -> None:
        if paused == self._paused:
            return
        resumed = self._paused - paused
        newly = paused - self._paused
        self._paused = paused
        self.version += 1
        for queue in sorted(newly):
            logger.info("queue %s is paused: not claiming its jobs", queue, extra={"queue": queue})
        for queue in sorted(resumed):
            logger.info("queue %s is resumed", queue, extra={"queue": queue})
            self._wakeups.notified(queue)  # claim at once, and drain its skipped NOTIFYs
