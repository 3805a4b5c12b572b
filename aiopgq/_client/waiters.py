"""Waiters: every queue.result() and job.wait() of one Queue, read and marked together.

A waiter marks its job `waited` (sql/results/watch_jobs.sql), so that the statement that ends
the job announces it on the done channel, and reads it once (it may have ended
already). Announced jobs are read back in one query per wake-up. The announcements
come over the process's shared LISTEN connection (_listen_hub.py), and are hints:
while that connection is down (lost, reconnecting) every waiting job is read every
poll interval, once more as soon as LISTEN is back (what was announced meanwhile is
gone), and every SAFETY_POLL seconds in any case.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import asyncpg

from .._db.migrations import missing_schema_as_error
from .._db.statements import Statements
from .._db.transient import Backoff, is_transient
from .._errors import JobNotFound, QueueNotOpen
from .listen_hub import ListenHub, listen_hub

logger = logging.getLogger("aiopgq.queue")

SAFETY_POLL = 30.0  # seconds between reads of every waiting job while LISTEN is healthy
IDLE_TIMEOUT = 30.0  # with nobody waiting this long, leave the LISTEN connection


class Waiters:
    def __init__(
        self,
        pool: Callable[[], asyncpg.Pool],
        sql: Statements,
        listen_args: Callable[[], tuple[str | None, dict[str, Any]]],
        poll_interval: Callable[[], float],
    ) -> None:
        self._pool = pool
        self._sql = sql
        self._listen_args = listen_args  # where the LISTEN connection goes
        self.poll_interval = poll_interval
        self.channel = sql.done_channel
        self._futures: dict[int, list[asyncio.Future[asyncpg.Record]]] = {}
        self._unmarked: set[int] = set()  # waited for, not yet marked in the database
        self._announced: set[int] = set()  # announced on the done channel, not yet read
        self._kick = asyncio.Event()
        self._catch_up = True  # read every waiting job at the next turn
        self._listening = False
        self._task: asyncio.Task[None] | None = None
        self.hub: ListenHub | None = None  # the shared LISTEN connection last subscribed to

    @property
    def listening(self) -> bool:
        return self._listening

    async def wait(self, job_id: int) -> asyncpg.Record:
        """The job's row once it has ended (a row of sql/results/finished_jobs.sql)."""
        future: asyncio.Future[asyncpg.Record] = asyncio.get_running_loop().create_future()
        waiting = self._futures.setdefault(job_id, [])
        if not waiting:
            self._unmarked.add(job_id)
        waiting.append(future)
        self._kick.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._serve(), name="aiopgq waiters"
            )
        try:
            return await future
        finally:
            if not future.done() or future.cancelled():
                self._forget(job_id, future)

    def _forget(self, job_id: int, future: asyncio.Future[asyncpg.Record]) -> None:
        waiting = self._futures.get(job_id, [])
        if future in waiting:
            waiting.remove(future)
        if not waiting:
            self._futures.pop(job_id, None)
            self._unmarked.discard(job_id)
            self._announced.discard(job_id)

    async def close(self) -> None:
        """Stop: the LISTEN connection closes, whoever still waits gets QueueNotOpen."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._fail_all(QueueNotOpen("the queue was closed while jobs were awaited"))

    def _fail_all(self, exc: BaseException) -> None:
        futures, self._futures = self._futures, {}
        self._unmarked.clear()
        self._announced.clear()
        for waiting in futures.values():
            for future in waiting:
                if not future.done():
                    future.set_exception(exc)

    def _resolve(self, rows: list[asyncpg.Record]) -> None:
        for row in rows:
            job_id = row["wanted"]
            if row["unmarked"]:  # locked when we tried to mark it: try again at the next turn
                if job_id in self._futures:
                    self._unmarked.add(job_id)
                continue
            self._announced.discard(job_id)
            for future in self._futures.pop(job_id, []):
                if future.done():
                    continue
                if row["id"] is None:
                    future.set_exception(
                        JobNotFound(
                            f"no job with id {job_id} in schema {self._sql.schema} (never "
                            "enqueued there, not committed yet, or finished and pruned)"
                        )
                    )
                else:
                    future.set_result(row)

    # -- what the shared LISTEN connection tells (ListenHub's Subscriber) -----------------

    def notified(self, payload: str) -> None:
        try:
            job_id = int(payload)
        except ValueError:
            return
        if job_id in self._futures:
            self._announced.add(job_id)
            self._kick.set()

    def listened_to(self, yes: bool) -> None:
        self._listening = yes
        self._catch_up = True  # what was announced before, or from now on, is missed
        self._kick.set()

    # -- the service: one task while anybody waits ---------------------------------------

    async def _serve(self) -> None:
        while True:
            try:
                hub = self.hub = listen_hub(*self._listen_args())
            except Exception as exc:  # e.g. an external pool closed meanwhile
                self._fail_all(exc)
                return
            hub.subscribe(self)
            try:
                await self._work()
            finally:
                self._listening = False
                with anyio.CancelScope(shield=True):
                    await hub.unsubscribe(self)
            if not self._futures:  # (no await since the check: nobody can come in between)
                return
            # Someone started waiting while we were leaving the connection.

    async def _work(self) -> None:
        backoff = Backoff(logger, "reading awaited jobs", consequence="retrying")
        last_poll = -SAFETY_POLL
        idle_since: float | None = None
        while True:
            self._kick.clear()
            if not self._futures:
                idle_since = idle_since or time.monotonic()
                left = idle_since + IDLE_TIMEOUT - time.monotonic()
                if left <= 0:
                    return  # nobody waited for a while: leave the LISTEN connection
                with anyio.move_on_after(left):
                    await self._kick.wait()
                continue
            idle_since = None
            interval = self.poll_interval()
            now = time.monotonic()
            every = interval if not self._listening else SAFETY_POLL
            poll_all = self._catch_up or now - last_poll >= every
            try:
                if self._unmarked:
                    await self._mark()
                if poll_all:
                    self._catch_up, last_poll = False, now
                    await self._read(list(self._futures))
                elif self._announced:
                    await self._read(list(self._announced))
            except Exception as exc:
                if not is_transient(exc):
                    self._fail_all(exc)
                    continue
                self._catch_up = True
                await anyio.sleep(min(backoff.failed(exc), interval))
                continue
            backoff.succeeded()
            wait = last_poll + every - time.monotonic()
            if self._unmarked:  # some were locked: try again soon
                wait = min(wait, interval)
            with anyio.move_on_after(max(wait, 0.0)):
                await self._kick.wait()

    async def _mark(self) -> None:
        ids = list(self._unmarked)
        self._unmarked.clear()
        try:
            async with self._pool().acquire() as conn:
                with missing_schema_as_error(self._sql.schema):
                    await conn.execute(self._sql.watch_jobs, ids)
                    rows = await conn.fetch(self._sql.finished_jobs, ids)
        except BaseException:
            self._unmarked.update(i for i in ids if i in self._futures)
            raise
        self._resolve(rows)

    async def _read(self, ids: list[int]) -> None:
        async with self._pool().acquire() as conn:
            with missing_schema_as_error(self._sql.schema):
                rows = await conn.fetch(self._sql.finished_jobs, ids)
        self._resolve(rows)
