"""Hold-the-transaction mode: claim, run and complete each batch in one transaction.

The claimed rows stay locked by the open transaction while the jobs run, so a
crash rolls them back to pending at once (the attempt is not counted). For short
jobs only: the transaction, and the rows it locks, last as long as the batch.
"""

from __future__ import annotations

import asyncio
import logging

from anyio.abc import TaskGroup

from .._db.outage import Outage
from .._db.statements import Statements
from .._db.transient import Backoff, never_sent
from .awake import AwakeRole
from .claims import Claims
from .completer import Outcomes
from .dispatcher import Dispatcher
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.fetcher")


class HoldingFetcher:
    def __init__(
        self,
        claims: Claims,
        dispatcher: Dispatcher,
        sql: Statements,
        worker_id: str,
        wakeups: Wakeups,
        awake: AwakeRole,
        *,
        outage: Outage,
        concurrency: int,
        poll_interval: float,
    ) -> None:
        self._claims = claims
        self._dispatcher = dispatcher
        self._sql = sql
        self._worker_id = worker_id
        self._wakeups = wakeups
        self._awake = awake
        self._concurrency = concurrency
        self._poll_interval = poll_interval
        self._stopping = False
        self._backoff = Backoff(logger, "held batch", outage=outage)

    def stop(self) -> None:
        self._stopping = True
        self._wakeups.wake()

    async def hand_over(self) -> None:
        """Nothing to hand over: this mode never advertises itself awake."""

    async def run(self, drains: TaskGroup, *, burst: bool = False) -> None:
        while not self._stopping:
            self._wakeups.clear()
            try:
                rows = await self._run_batch()
            except Exception as exc:
                await self._claims.drop_connection()
                delay = self._backoff.failed(exc)  # raises what no retry can cure
                if not never_sent(exc):
                    self._claims.failed()
                await self._wakeups.sleep(delay)
                continue
            self._backoff.succeeded()
            if rows == self._concurrency or self._claims.more:
                continue
            if burst and rows == 0:
                if not self._claims.held_back:
                    return
                await self._wakeups.sleep(self._wakeups.sleep_timeout(self._poll_interval))
                continue
            if not burst:
                self._awake.start_drain(drains)
                await self._wakeups.sleep(self._wakeups.sleep_timeout(self._poll_interval))

    async def _run_batch(self) -> int:
        conn = await self._claims.connection()
        async with conn.transaction():
            rows = await self._claims.claim(conn, self._concurrency, held=True)
            if rows:
                outcomes = Outcomes()
                await asyncio.gather(*self._dispatcher.start(rows, sink=outcomes))
                retry_times = await outcomes.write(conn, self._sql, self._worker_id)
                if retry_times:
                    self._wakeups.retry_scheduled(min(retry_times))
        return len(rows)
