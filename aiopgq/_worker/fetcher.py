"""Fetcher: the only coroutine that asks the database for work (lease mode).

free = concurrency - running; if free > 0, claim up to `free` jobs in one
statement. A full batch fetches again as soon as slots free up; a short batch
sleeps until a NOTIFY, the earliest retry time this worker scheduled, or the
poll interval, whichever comes first. Wake-ups are hints: the claim decides.

While jobs keep coming (a non-empty batch), the fetcher looks again after
`recheck_interval` instead of sleeping; while they come faster than awake.py's
BUSY_RATE, it is also awake (producers skip their NOTIFY) and the `done`s ride along
with its claims.
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from .._db.outage import Outage
from .._db.transient import Backoff, never_sent
from .awake import AwakeRole
from .claims import Claims
from .completer import Completer
from .dispatcher import Dispatcher
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.fetcher")

# A worker with every slot busy for this long hands its "awake" role to its peers.
_HAND_OVER_AFTER = 0.02


class Fetcher:
    def __init__(
        self,
        claims: Claims,
        dispatcher: Dispatcher,
        completer: Completer,
        wakeups: Wakeups,
        awake: AwakeRole,
        *,
        outage: Outage,
        concurrency: int,
        poll_interval: float,
        recheck_interval: float,
    ) -> None:
        self._claims = claims
        self._dispatcher = dispatcher
        self._completer = completer
        self._wakeups = wakeups
        self._awake = awake
        self._concurrency = concurrency
        self._poll_interval = poll_interval
        self._recheck_interval = recheck_interval
        # Never let more than two batches of outcomes wait for the database.
        self._max_backlog = 2 * concurrency
        self._stopping = False
        self._backoff = Backoff(logger, "fetching jobs", outage=outage)

    def stop(self) -> None:
        self._stopping = True
        self._wakeups.wake()
        self._wakeups.progress()

    async def hand_over(self) -> None:
        """Stopping: peers take over what we advertised."""
        await self._awake.hand_over()

    async def run(self, drains: TaskGroup, *, burst: bool = False) -> None:
        """Fetch and dispatch until stop() (or, with burst, until nothing is runnable)."""
        while not self._stopping:
            free = self._concurrency - len(self._dispatcher.running)
            backlog = self._completer.backlog
            if free <= 0 or backlog >= self._max_backlog:
                await self._wait_saturated()
                continue
            settled = backlog == 0 and not self._dispatcher.running
            self._wakeups.clear()
            self._wakeups.clear_progress()  # a job ending from now on may be waited for
            try:
                conn = await self._claims.connection()
                rows = await self._claims.claim(conn, free, ride=self._awake.busy)
            except Exception as exc:
                await self._claims.drop_connection()
                delay = self._backoff.failed(exc)  # raises what no retry can cure
                if not never_sent(exc):
                    self._claims.failed()
                await self._wakeups.sleep(delay)
                continue
            self._backoff.succeeded()
            if rows:
                self._dispatcher.start(rows)
                await self._awake.claimed(len(rows), free)
            if len(rows) == free or self._claims.more:
                continue
            held_back = self._claims.held_back  # by a limit: a job ending may free it
            if burst:
                if settled and not rows and not held_back:
                    return  # everything we ran is committed and nothing is runnable
                if not rows:
                    self._completer.flush_now()  # no claim of ours will carry them
                # Not done: our jobs still run, or their outcomes wait for the completer,
                # or a limit held jobs back. Look again when a job of ours ends or
                # outcomes are committed (progress since the claim counts), or later:
                # not at once, which claimed in a loop until then.
                timeout = self._wakeups.sleep_timeout(self._poll_interval)
                await self._wakeups.sleep(timeout, or_progress=True)
                continue
            if rows and self._recheck_interval > 0:
                await self._awake.quieter(drains)
                await self._wakeups.sleep(self._recheck_interval)  # more are likely coming
                continue
            await self._awake.go_idle(drains)
            timeout = self._wakeups.sleep_timeout(self._poll_interval)
            await self._wakeups.sleep(timeout, or_progress=held_back)

    async def _wait_saturated(self) -> None:
        """No room to fetch: wait for a slot. If that takes a while, stop advertising
        that we are awake (producers would skip NOTIFY while idle peers sleep) and wake
        those peers for jobs whose NOTIFY was already skipped."""
        with anyio.move_on_after(_HAND_OVER_AFTER):
            await self._wait_progress()
            return
        await self._awake.hand_over()
        await self._wait_progress()

    async def _wait_progress(self) -> None:
        self._wakeups.clear_progress()
        free = self._concurrency - len(self._dispatcher.running)
        if (free > 0 and self._completer.backlog < self._max_backlog) or self._stopping:
            return
        await self._wakeups.wait_progress()


class FetchLoop(Protocol):
    """What the worker runs: the lease-mode Fetcher, or the HoldingFetcher (holding.py)."""

    def stop(self) -> None: ...
    async def run(self, drains: TaskGroup, *, burst: bool = False) -> None: ...
    async def hand_over(self) -> None: ...
