"""Scheduler: enqueues the due ticks of periodic tasks, each tick once across all workers.

Every worker that serves a periodic task's queue runs this loop; there is no leader.
It wakes at the next tick of its schedules (at the latest every `interval`), reads
where each schedule stands and the database's clock, and takes the due ticks with
take_ticks() (sql/functions/take_ticks.sql): a compare-and-set on the schedule's last
tick and the insert of their jobs, in one statement. Of the workers that find the same
ticks due, one moves last_tick and enqueues; the others find it moved and enqueue
nothing. So a schedule keeps ticking while any of its workers lives, and (the primary
key of periodic_ticks) no tick gets two jobs.

Ticks missed while no worker ran (or while the database was unreachable) follow the
schedule's `missed` policy: "latest" enqueues the newest one, "skip" enqueues it only
if it is at most `interval` late, "all" enqueues every one, the newest MAX_CATCH_UP.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import anyio
import asyncpg

from .._db.connection import Connection
from .._db.outage import Outage
from .._db.statements import Statements
from .._db.transient import Backoff
from .contracts import ScheduleSpec

logger = logging.getLogger("aiopgq.scheduler")

# missed="all" enqueues at most this many missed ticks of one schedule at once.
MAX_CATCH_UP = 1000


class Scheduler:
    """The periodic tasks' schedules of one worker, and the loop that ticks them."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        schedules: Sequence[ScheduleSpec],
        worker_id: str,
        *,
        interval: float,
        outage: Outage | None = None,
    ) -> None:
        self._pool = pool
        self._outage = outage  # the worker's one account of database trouble
        self._sql = sql
        self._schedules = {s.name: s for s in schedules}
        self._worker_id = worker_id
        self.interval = interval  # the longest sleep, and how late "skip" still runs a tick

    async def run(self) -> None:
        """Register the schedules, then tick them until cancelled."""
        backoff = Backoff(
            logger, "periodic schedules", consequence="ticks wait meanwhile", outage=self._outage
        )
        registered = False
        while True:
            try:
                if not registered:
                    await self.register()
                    registered = True
                delay = await self.tick()
            except Exception as exc:
                delay = max(backoff.failed(exc), 0.1)
            else:
                backoff.succeeded()
            await anyio.sleep(delay)

    async def register(self, *, since: datetime | None = None) -> None:
        """Write the schedules' definitions; a new one's ticks are due after `since`
        (default: now, by the database's clock)."""
        specs = list(self._schedules.values())
        async with self._pool.acquire() as conn:
            await conn.execute(
                self._sql.schedule_register,
                [s.name for s in specs],
                [s.cron for s in specs],
                [s.timezone for s in specs],
                [s.missed for s in specs],
                [s.queue_name for s in specs],
                since,
            )

    async def tick(self, *, now: datetime | None = None) -> float:
        """One pass: take every due tick that no other worker took first; returns the
        seconds until the next tick (at most `interval`). `now` overrides the database's
        clock (tests drive the scheduler through days this way)."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(self._sql.schedule_state, list(self._schedules))
            if len(rows) < len(self._schedules):  # a row was deleted: put it back
                await self.register()
                rows = await conn.fetch(self._sql.schedule_state, list(self._schedules))
            if not rows:
                return self.interval
            clock: datetime = now or rows[0]["now"]
            for row in rows:
                await self._take(conn, self._schedules[row["name"]], row, clock)
        upcoming = min(spec.next_after(clock) for spec in self._schedules.values())
        return min(max((upcoming - clock).total_seconds(), 0.001), self.interval)

    async def _take(
        self, conn: Connection, spec: ScheduleSpec, row: asyncpg.Record, now: datetime
    ) -> None:
        last: datetime | None = row["last_tick"]
        after = last if last is not None else row["since"]
        catch_up = spec.missed == "all"
        limit = MAX_CATCH_UP + 1 if catch_up else 2
        found = spec.due(after, now, limit)
        if not found:
            return
        latest = found[-1]
        if catch_up:
            ticks = found[-MAX_CATCH_UP:]
        elif spec.missed == "skip" and (now - latest).total_seconds() > self.interval:
            ticks = []
        else:
            ticks = [latest]
        result = await conn.fetchrow(
            self._sql.take_ticks,
            spec.name,
            last,
            latest,
            self._worker_id,
            spec.queue_name,
            spec.priority,
            spec.max_attempts,
            ticks,
            [spec.payload(tick) for tick in ticks],
        )
        assert result is not None  # one row, always
        taken, ids = result
        if not taken:
            return  # another worker took these ticks first
        extra = {"task": spec.name, "queue": spec.queue_name, "worker": self._worker_id}
        if len(ticks) < len(found):
            logger.warning(
                "schedule %s: %s ticks up to %s were due at once (no worker ran it, or it "
                "could not reach the database); missed=%r enqueued %d of them",
                spec.name,
                f"at least {len(found)}" if len(found) == limit else len(found),
                latest.isoformat(),
                spec.missed,
                len(ticks),
                extra=extra,
            )
        logger.debug(
            "schedule %s: ticks %s enqueued as jobs %s",
            spec.name,
            [tick.isoformat() for tick in ticks],
            ids,
            extra=extra,
        )
