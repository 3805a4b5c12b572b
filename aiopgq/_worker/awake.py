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
import time
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

# Busy: the worker claims jobs faster than this (per second; counted over RATE_WINDOW
# seconds of claims, or fewer once that window's worth of jobs came). Only then may producers skip
# NOTIFY (or when a claim fills every free slot), and do the `done`s ride along with
# the next claim (claims.py). Below it a NOTIFY costs its producer little and wakes us
# at once, where being awake means looking again every recheck interval: latency for
# every job (500 jobs/s, 1 worker: p99 2-4x the bare loop's when producers skip). And a
# claim that writes the last jobs' outcomes first starts the next job later (p50 +0.3
# ms) to save a commit the completer makes anyway. Above it, the NOTIFYs' commit lock,
# our wake-ups and a commit per flush cost more (benchmarks: enqueue, drain).
# A rate, not a batch size: a worker woken by each NOTIFY claims one job at a time
# however fast they come.
BUSY_RATE = 1_000.0
RATE_WINDOW = 0.05


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
        self._window_start = time.monotonic()
        self._window_jobs = 0
        self._busy = False  # the last window's rate reached BUSY_RATE

    @property
    def busy(self) -> bool:
        """Whether we claim jobs faster than BUSY_RATE (as of the last window)."""
        return self._busy

    @property
    def held(self) -> bool:
        """Whether we advertise that we are awake (producers may skip NOTIFY)."""
        return self._listener is not None and self._listener.awake

    async def claimed(self, count: int, free: int) -> None:
        """`count` jobs came in for `free` slots: when we are busy, advertise that we are
        awake, so producers may skip NOTIFY.

        A NOTIFY costs its producer a cluster-wide lock at commit (sql/functions/wake.sql),
        which matters when jobs come faster than one claim's round trip. At a lower rate
        producers had better NOTIFY: see BUSY_RATE.
        """
        self._window_jobs += count
        now = time.monotonic()
        elapsed = now - self._window_start
        if elapsed >= RATE_WINDOW or self._window_jobs >= BUSY_RATE * RATE_WINDOW:
            self._busy = self._window_jobs >= BUSY_RATE * elapsed
            self._window_start, self._window_jobs = now, 0
        if (self._busy or count >= free) and self._listener is not None:
            if not self._listener.awake:
                await self._listener.hold_awake()

    async def quieter(self, drains: TaskGroup) -> None:
        """A batch that left slots free: if jobs come slower than BUSY_RATE, let the
        producers NOTIFY again (and catch any that skipped meanwhile)."""
        if self.held and not self._busy:
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
