"""Completer: buffers job outcomes and writes them in one statement per kind per flush."""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any, Protocol

import anyio
import asyncpg

from .._db.arrays import int_array, results_object
from .._db.connection import Connection
from .._db.outage import Outage
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import Backoff
from .._models import Job
from .special import SpecialOutcomes
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.completer")


class Sink(Protocol):
    """Where the dispatcher reports how each job ended: the Completer (lease mode), a
    batch's Outcomes (hold mode), or either behind an observer (observing.py) or the
    DEBUG log (dispatcher.py)."""

    def done(self, job: Job, result: str | None) -> None: ...
    def error(self, job: Job, delay: float, error: str, final: bool) -> None: ...
    def release(self, job: Job) -> None: ...
    def special(self, job: Job, kind: str, **columns: Any) -> None: ...
    def cancelled(self, job: Job) -> None: ...  # cancelled while it ran: no write


class Outcomes:
    """Outcomes not yet written, as column arrays ready for `unnest`."""

    def __init__(self) -> None:
        self.done_ids: list[int] = []
        self.done_attempts: list[int] = []
        # (job id, result JSON) of the done jobs that returned something: most do not.
        self.done_results: list[tuple[int, str]] = []
        self.error_ids: list[int] = []
        self.error_attempts: list[int] = []
        self.error_delays: list[float] = []
        self.error_texts: list[str] = []
        self.error_final: list[bool] = []
        self.release_ids: list[int] = []
        self.release_attempts: list[int] = []
        self.specials: SpecialOutcomes | None = None  # made by the first special outcome

    def __len__(self) -> int:
        count = len(self.done_ids) + len(self.error_ids) + len(self.release_ids)
        return count if self.specials is None else count + len(self.specials)

    def ids(self) -> list[int]:
        ids = self.done_ids + self.error_ids + self.release_ids
        return ids if self.specials is None else ids + self.specials.ids

    def done(self, job: Job, result: str | None) -> None:
        self.done_ids.append(job.id)
        self.done_attempts.append(job.attempts)
        if result is not None:
            self.done_results.append((job.id, result))

    def error(self, job: Job, delay: float, error: str, final: bool) -> None:
        self.error_ids.append(job.id)
        self.error_attempts.append(job.attempts)
        self.error_delays.append(delay)
        self.error_texts.append(error)
        self.error_final.append(final)

    def release(self, job: Job) -> None:
        self.release_ids.append(job.id)
        self.release_attempts.append(job.attempts)

    def special(self, job: Job, kind: str, **columns: Any) -> None:
        """A snooze, an abort, or an outcome with progress (see special.py)."""
        if self.specials is None:
            self.specials = SpecialOutcomes()
        self.specials.add(job, kind, **columns)

    def cancelled(self, job: Job) -> None:
        """Nothing to write: cancel.sql made the job cancelled already."""

    async def write(self, conn: Connection, sql: Statements, worker_id: str) -> list[datetime]:
        """Apply every outcome (at most four statements); returns retry times scheduled."""
        retry_times: list[datetime] = []
        if self.done_ids:
            await conn.execute(
                sql.complete_done,
                int_array(self.done_ids),
                int_array(self.done_attempts),
                results_object(self.done_results),
                worker_id,
            )
        if self.error_ids:
            rows = await conn.fetch(
                sql.complete_error,
                self.error_ids,
                self.error_attempts,
                self.error_delays,
                self.error_texts,
                self.error_final,
                worker_id,
            )
            retry_times = [row[2] for row in rows if row[1] == "pending"]
        if self.release_ids:
            await conn.execute(
                sql.release, self.release_ids, self.release_attempts, worker_id, sql.channel
            )
        if self.specials:
            retry_times += await self.specials.write(conn, sql, worker_id)
        return retry_times


class Completer:
    """Commits outcomes: most `done`s ride along with the fetcher's next dequeue (one
    commit per batch); the rest are flushed every `interval` seconds, or at once when
    `batch_size` outcomes are waiting.

    A write that hits a transient database error keeps its outcomes and tries
    again with backoff; until then the jobs stay `running` under this worker's
    heartbeat, so nothing is lost and nothing is run twice. Every write is guarded
    by the job's lease (id, attempt, worker), so writing an outcome twice is harmless.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        sql: Statements,
        worker_id: str,
        *,
        wakeups: Wakeups,
        outage: Outage,
        batch_size: int,
        interval: float,
    ) -> None:
        self._pool = pool
        self._sql = sql
        self._worker_id = worker_id
        self._batch_size = batch_size
        self._interval = interval
        self._wakeups = wakeups
        self._backoff = Backoff(logger, "writing job outcomes", outage=outage)
        self._buffer = Outcomes()
        self._writing = Outcomes()  # flushed by us right now
        self._riding = Outcomes()  # on their way with a dequeue
        self._flush_requested = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._oldest: float | None = None  # when the oldest buffered outcome arrived

    @property
    def backlog(self) -> int:
        """Outcomes not yet committed (buffered, being written, or riding a dequeue)."""
        return len(self._buffer) + len(self._writing) + len(self._riding)

    def in_flight_ids(self) -> list[int]:
        """Jobs finished here whose outcome is not committed: still ours to heartbeat."""
        return self._buffer.ids() + self._writing.ids() + self._riding.ids()

    def done(self, job: Job, result: str | None) -> None:
        # Once per job: Outcomes.done and _added written out (two calls less).
        buffer = self._buffer
        buffer.done_ids.append(job.id)
        buffer.done_attempts.append(job.attempts)
        if result is not None:
            buffer.done_results.append((job.id, result))
        # Most calls: the buffer had outcomes and holds fewer than a batch of them.
        if (
            self._oldest is None
            or len(buffer.done_ids) >= self._batch_size
            or buffer.error_ids
            or buffer.release_ids
            or buffer.specials
        ):
            self._done_added()

    def done_many(self, ids: list[int], attempts: list[int]) -> None:
        """done(job, None) for each of these jobs (the dispatcher's plain lane: a batch's
        jobs that ended at once, by id and attempt)."""
        buffer = self._buffer
        buffer.done_ids += ids
        buffer.done_attempts += attempts
        self._done_added()

    def _done_added(self) -> None:
        buffer = self._buffer
        if self._oldest is None:  # the buffer was empty: so maybe were we (_settled)
            self._oldest = time.monotonic()
            if self._idle.is_set():
                self._idle = anyio.Event()
        if len(buffer.done_ids) >= self._batch_size or (
            (buffer.error_ids or buffer.release_ids or buffer.specials)
            and len(buffer) >= self._batch_size
        ):
            self._flush_requested.set()

    def error(self, job: Job, delay: float, error: str, final: bool) -> None:
        self._buffer.error(job, delay, error, final)
        self._added()

    def release(self, job: Job) -> None:
        self._buffer.release(job)
        self._added()

    def special(self, job: Job, kind: str, **columns: Any) -> None:
        self._buffer.special(job, kind, **columns)
        self._added()

    def cancelled(self, job: Job) -> None:
        """Nothing to write: cancel.sql made the job cancelled already."""

    def _added(self) -> None:
        if self._idle.is_set():
            self._idle = anyio.Event()
        if self._oldest is None:
            self._oldest = time.monotonic()
        if len(self._buffer) >= self._batch_size:
            self._flush_requested.set()

    def take_done(self) -> Outcomes:
        """Hand the buffered `done`s to a dequeue that commits them; see `landed`."""
        riding, buffer = Outcomes(), self._buffer
        if buffer.done_ids and not self._riding:
            riding.done_ids, buffer.done_ids = buffer.done_ids, []
            riding.done_attempts, buffer.done_attempts = buffer.done_attempts, []
            riding.done_results, buffer.done_results = buffer.done_results, []
            self._riding = riding
            if not buffer:
                self._oldest = None
        return riding

    def landed(self, riding: Outcomes, *, committed: bool) -> None:
        """The dequeue carrying `riding` ended: committed, or failed (write them later)."""
        if riding is not self._riding or not riding:
            return
        self._riding = Outcomes()
        if not committed:
            self._buffer.done_ids.extend(riding.done_ids)
            self._buffer.done_attempts.extend(riding.done_attempts)
            self._buffer.done_results.extend(riding.done_results)
            self._flush_requested.set()
        self._settled()

    def _settled(self) -> None:
        if not self.backlog:
            self._idle.set()
        self._wakeups.progress()

    def flush_now(self) -> None:
        """No claim will carry the buffered outcomes (a burst found nothing more to
        run): write them without waiting for the interval."""
        if self._buffer:
            self._flush_requested.set()

    async def wait_idle(self) -> None:
        """Return once every outcome recorded so far is committed."""
        while self.backlog:
            self._flush_requested.set()
            await self._idle.wait()

    async def run(self) -> None:
        """Flush forever; cancel to stop (after `wait_idle`, nothing is lost).

        Outcomes are flushed once the oldest has waited `interval` seconds: under
        load the fetcher takes the `done`s first, so they cost no commit of their own.
        """
        while True:
            oldest = self._oldest
            wait = self._interval if oldest is None else oldest + self._interval - time.monotonic()
            if wait > 0:
                with anyio.move_on_after(wait):
                    await self._flush_requested.wait()
            oldest = self._oldest
            due = oldest is not None and time.monotonic() - oldest >= self._interval
            if self._writing or (self._buffer and (due or self._flush_requested.is_set())):
                await self._flush()

    async def _flush(self) -> None:
        self._flush_requested = anyio.Event()
        if not self._writing:
            self._writing, self._buffer, self._oldest = self._buffer, Outcomes(), None
        while True:
            try:
                # Every write is guarded by the lease: running it again is harmless.
                retry_times = await run_pooled(self._pool, self._write)
                break
            except Exception as exc:
                await anyio.sleep(self._backoff.failed(exc))  # the outcomes stay ours
        self._backoff.succeeded()
        self._writing = Outcomes()
        if retry_times:
            self._wakeups.retry_scheduled(min(retry_times))
        self._settled()

    async def _write(self, conn: Connection) -> list[datetime]:
        return await self._writing.write(conn, self._sql, self._worker_id)
