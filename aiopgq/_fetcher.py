"""Fetcher: the only coroutine that asks the database for work.

free = concurrency - running; if free > 0, claim up to `free` jobs in one
statement. A full batch fetches again as soon as slots free up; a short batch
sleeps until a NOTIFY, the earliest retry time this worker scheduled, or the
poll interval, whichever comes first. Wake-ups are hints: the dequeue decides.

While jobs keep coming (a non-empty batch), the fetcher stays awake: it looks
again after `recheck_interval` instead of sleeping, and advertises that through
the listener so producers skip their NOTIFY. Before it sleeps it stops
advertising and waits (in the background) for the producers that skipped to
end, then fetches again: sql/migrations/0003_notify_once.sql explains why that
makes skipping safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import anyio
import asyncpg
from anyio.abc import TaskGroup
from asyncpg.pool import PoolConnectionProxy

from ._completer import Completer, Outcomes
from ._dispatcher import Dispatcher
from ._listener import Listener
from ._retry import is_transient, reconnect_delay
from ._sql import Statements
from ._types import Connection

logger = logging.getLogger("aiopgq.fetcher")

# A worker with every slot busy for this long hands its "awake" role to its peers.
_HAND_OVER_AFTER = 0.02


class Fetcher:
    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        queues: Sequence[str],
        worker_id: str,
        *,
        concurrency: int,
        poll_interval: float,
        recheck_interval: float,
        dispatcher: Dispatcher,
        completer: Completer,
    ) -> None:
        self._pool = pool
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._poll_interval = poll_interval
        self._recheck_interval = recheck_interval
        self.listener: Listener | None = None  # set by the worker when it listens
        self._dispatcher = dispatcher
        self._completer = completer
        # Never let more than two batches of outcomes wait for the database.
        self._max_backlog = 2 * concurrency
        several = len(queues) > 1
        self._claim = sql.claim(several_queues=several, completing=False)
        self._claim_completing = sql.claim(several_queues=several, completing=True)
        self._queues_arg: str | list[str] = list(queues) if several else queues[0]
        self._sql = sql
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()  # a slot or a completion backlog freed up
        self._next_run_at: float | None = None
        self._stopping = False
        self._conn: PoolConnectionProxy[Any] | None = None
        self._orphans_possible = False  # a dequeue failed: it may have committed unseen
        self._queues = list(queues)
        self._to_drain: set[str] = set()  # queues NOTIFYed since the last skipper drain
        self._draining = False
        self.fetches = 0

    def wake(self) -> None:
        """A hint that new work may be runnable (NOTIFY, reconnect, rescue)."""
        self._wake.set()

    def notified(self, queue: str) -> None:
        """A NOTIFY for `queue` arrived: wake, and drain its skippers before sleeping."""
        self._to_drain.add(queue)
        self._wake.set()

    def caught_up(self) -> None:
        """LISTEN (re)connected: notifications may have been missed meanwhile."""
        self._to_drain.update(self._queues)
        self._wake.set()

    def progress(self) -> None:
        """A job finished or outcomes were committed: there may be room to fetch."""
        self._progress.set()

    def retry_scheduled(self, when: datetime) -> None:
        at = when.timestamp()
        known = self._next_run_at
        # Replace a time already passed, too: it was due, and may never have been seen.
        if known is None or at < known or known <= time.time():
            self._next_run_at = at
            self._wake.set()  # re-arm the sleep with the earlier deadline

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._progress.set()

    async def _dequeue(self, conn: Connection, limit: int) -> list[asyncpg.Record]:
        if self._orphans_possible:
            held = list(self._dispatcher.running) + self._completer.in_flight_ids()
            orphans = await conn.fetch(self._sql.release_orphans, self._worker_id, held)
            self._orphans_possible = False
            if orphans:
                logger.warning(
                    "released %d jobs claimed by a dequeue whose reply was lost", len(orphans)
                )
        self.fetches += 1
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

    async def _connection(self) -> PoolConnectionProxy[Any]:
        # One pool connection held for the fetcher's life: no acquire and release
        # (with the pool's reset, maybe a round trip) per fetch.
        if self._conn is None or self._conn.is_closed():
            self._conn = await self._pool.acquire()
        return self._conn

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self._pool.release(conn, timeout=5)
                except Exception as exc:  # broken: asyncpg terminates it
                    logger.debug("releasing the fetch connection failed (%s)", exc)

    async def run(self, *, burst: bool = False) -> None:
        """Fetch and dispatch until stop() (or, with burst, until nothing is runnable)."""
        try:
            async with anyio.create_task_group() as drains:
                await self._fetch_loop(drains, burst=burst)
                drains.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._hand_over()  # stopping: peers take over what we advertised
        finally:
            await self._drop_connection()

    async def _fetch_loop(self, drains: TaskGroup, *, burst: bool) -> None:
        failures = 0
        while not self._stopping:
            free = self._concurrency - len(self._dispatcher.running)
            backlog = self._completer.backlog
            if free <= 0 or backlog >= self._max_backlog:
                await self._wait_saturated()
                continue
            settled = backlog == 0 and not self._dispatcher.running
            self._wake.clear()
            try:
                rows = await self._dequeue(await self._connection(), free)
            except Exception as exc:
                await self._drop_connection()
                if not is_transient(exc):
                    raise
                self._orphans_possible = True
                failures += 1
                delay = reconnect_delay(failures)
                logger.warning("fetching jobs failed (%s); retrying in %.1f s", exc, delay)
                await self._sleep(delay)
                continue
            failures = 0
            if rows:
                self._dispatcher.start(rows)
                if self.listener is not None and not self.listener.awake:
                    await self.listener.hold_awake()
            if len(rows) == free:
                continue
            if burst:
                if settled and not rows:
                    return  # everything we ran is committed and nothing is runnable
                await self._wait_progress()
                continue
            if rows and self._recheck_interval > 0:
                await self._sleep(self._recheck_interval)  # more are likely on their way
                continue
            await self._go_idle(drains)
            await self._sleep(self._sleep_timeout())

    async def _wait_saturated(self) -> None:
        """No room to fetch: wait for a slot. If that takes a while, stop advertising
        that we are awake (producers would skip NOTIFY while idle peers sleep) and wake
        those peers for jobs whose NOTIFY was already skipped."""
        with anyio.move_on_after(_HAND_OVER_AFTER):
            await self._wait_progress()
            return
        await self._hand_over()
        await self._wait_progress()

    async def _hand_over(self) -> None:
        if self.listener is None or not await self.listener.release_awake():
            return
        try:
            conn = await self._connection()
            await conn.execute(self._sql.notify_queues, self._sql.schema, self._queues)
        except Exception as exc:
            await self._drop_connection()
            if not is_transient(exc):
                raise
            logger.warning("waking peer workers failed (%s); they poll meanwhile", exc)

    async def _go_idle(self, drains: TaskGroup) -> None:
        """About to sleep: stop advertising, then catch the producers that skipped NOTIFY."""
        if self.listener is not None and await self.listener.release_awake():
            self._to_drain.update(self._queues)
        self._start_drain(drains)

    def _start_drain(self, drains: TaskGroup) -> None:
        if self._to_drain and not self._draining:
            queues, self._to_drain = sorted(self._to_drain), set()
            self._draining = True
            drains.start_soon(self._drain_skippers, queues)

    async def _drain_skippers(self, queues: list[str]) -> None:
        try:
            async with self._pool.acquire() as conn:
                await conn.execute(
                    self._sql.wait_for_skippers,
                    self._sql.schema,
                    queues,
                    timeout=self._poll_interval,
                )
        except asyncio.TimeoutError:
            pass  # a skipper's transaction is still open: the next poll covers it
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._to_drain.update(queues)  # those skippers are still unaccounted for
            logger.warning("waiting for skipped notifications failed (%s)", exc)
        finally:
            self._draining = False
        self._wake.set()

    async def run_holding(self, *, burst: bool = False) -> None:
        """Hold-the-transaction mode: claim, run and complete each batch in one transaction.

        The claimed rows stay locked by the open transaction while the jobs run, so a
        crash rolls them back to pending at once (the attempt is not counted).
        """
        try:
            async with anyio.create_task_group() as drains:
                await self._hold_loop(drains, burst=burst)
                drains.cancel_scope.cancel()
        finally:
            await self._drop_connection()

    async def _hold_loop(self, drains: TaskGroup, *, burst: bool) -> None:
        failures = 0
        while not self._stopping:
            self._wake.clear()
            try:
                rows = await self._run_held_batch()
            except Exception as exc:
                await self._drop_connection()
                if not is_transient(exc):
                    raise
                failures += 1
                delay = reconnect_delay(failures)
                logger.warning("held batch failed (%s); retrying in %.1f s", exc, delay)
                await self._sleep(delay)
                continue
            failures = 0
            if rows == self._concurrency:
                continue
            if burst and rows == 0:
                return
            if not burst:
                self._start_drain(drains)
                await self._sleep(self._sleep_timeout())

    async def _run_held_batch(self) -> int:
        conn = await self._connection()
        async with conn.transaction():
            rows = await self._dequeue(conn, self._concurrency)
            if rows:
                outcomes = Outcomes()
                await asyncio.gather(*self._dispatcher.start(rows, sink=outcomes))
                retry_times = await outcomes.write(conn, self._sql, self._worker_id)
                if retry_times:
                    self.retry_scheduled(min(retry_times))
        return len(rows)

    def _sleep_timeout(self) -> float:
        timeout = self._poll_interval
        if self._next_run_at is not None:
            until = self._next_run_at - time.time()
            if until <= 0:
                self._next_run_at = None
                return 0.0
            timeout = min(timeout, until)
        return timeout

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0 and not self._wake.is_set():
            with anyio.move_on_after(seconds):
                await self._wake.wait()

    async def _wait_progress(self) -> None:
        self._progress.clear()
        free = self._concurrency - len(self._dispatcher.running)
        if (free > 0 and self._completer.backlog < self._max_backlog) or self._stopping:
            return
        await self._progress.wait()
