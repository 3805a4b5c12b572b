"""The awake role: while a worker claims jobs, producers may skip their NOTIFY.

A fetching worker advertises itself through the listener's session locks, and the
insert trigger skips NOTIFY while one is held. Before the worker sleeps it stops
advertising and waits (in the background) for the producers that skipped, then
claims again; a busy worker hands the role over by waking its peers.
sql/functions/wake.sql explains why that makes skipping safe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import asyncpg
from anyio.abc import TaskGroup

from .._db.connection import Connection
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import describe, is_transient
from .claims import Claims
from .listener import Listener
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.fetcher")

# A claim that finds this many jobs (or fills every free slot) is a busy batch: 2, not
# more, so one fast producer (its raw INSERTs) still skips NOTIFY (benchmarks: enqueue).
BUSY_BATCH = 2


class AwakeRole:
    def __init__(
        self,
        listener: Listener | None,
        pool: asyncpg.Pool,
        sql: Statements,
        claims: Claims,
        wakeups: Wakeups,
        queues: Sequence[str],
        *,
        drain_timeout: float,
    ) -> None:
        self._listener = listener
        self._pool = pool
        self._sql = sql
        self._claims = claims
        self._wakeups = wakeups
        self._queues = list(queues)
        self._drain_timeout = drain_timeout
        self._draining = False

    @property
    def held(self) -> bool:
        """Whether we advertise that we are awake (producers may skip NOTIFY)."""
        return self._listener is not None and self._listener.awake

    async def claimed(self, count: int, free: int) -> None:
        """`count` jobs came in for `free` slots: when that is a busy batch, advertise
        that we are awake, so producers may skip NOTIFY.

        A NOTIFY costs its producer a cluster-wide lock at commit (sql/functions/wake.sql),
        which matters when jobs come faster than one claim's round trip; then our claims
        find several jobs each. At a lower rate a claim finds one, and producers had better
        NOTIFY: a NOTIFY wakes us at once, while being awake means looking again every
        recheck interval (a few ms of latency per job).
        """
        if count >= min(BUSY_BATCH, free) and self._listener is not None:
            if not self._listener.awake:
                await self._listener.hold_awake()

    async def quieter(self, drains: TaskGroup) -> None:
        """A short batch while advertised: jobs come slower than our claims; let the
        producers NOTIFY again (and catch any that skipped meanwhile)."""
        if self.held:
            await self.go_idle(drains)

    async def hand_over(self) -> None:
        """Stop advertising (busy or stopping) and wake the peers for jobs whose
        NOTIFY was already skipped."""
        if self._listener is None or not await self._listener.release_awake():
            return
        try:
            conn = await self._claims.connection()
            await conn.execute(self._sql.notify_queues, self._sql.channel, self._queues)
        except Exception as exc:
            await self._claims.drop_connection()
            if not is_transient(exc):
                raise
            # Transient: the fetcher's own retries report database trouble.
            logger.info("waking peer workers failed (%s); they poll meanwhile", describe(exc))

    async def go_idle(self, drains: TaskGroup) -> None:
        """About to sleep: stop advertising, then catch the producers that skipped NOTIFY."""
        released = self._listener is not None and await self._listener.release_awake()
        self.start_drain(drains, everything=released)

    def start_drain(self, drains: TaskGroup, *, everything: bool = False) -> None:
        if self._draining:
            if everything:
                self._wakeups.owe_drain(self._queues)
            return
        queues = self._wakeups.take_to_drain(everything=everything)
        if queues:
            self._draining = True
            drains.start_soon(self._drain_skippers, queues)

    async def _drain_skippers(self, queues: list[str]) -> None:

        async def wait(conn: Connection) -> None:
            await conn.execute(
                self._sql.wait_for_skippers,
                self._sql.schema,  # the advisory-lock namespace
                queues,
                timeout=self._drain_timeout,
            )

        try:
            await run_pooled(self._pool, wait)
        except asyncio.TimeoutError:
            pass  # a skipper's transaction is still open: the next poll covers it
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._wakeups.owe_drain(queues)  # those skippers are still unaccounted for
            logger.info(
                "waiting for skipped notifications failed (%s); will wait again", describe(exc)
            )
        finally:
            self._draining = False
        self._wakeups.wake()
