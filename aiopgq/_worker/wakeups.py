"""Wakeups: everything that can give the fetcher a reason to claim again.

A NOTIFY for one of our queues, a reconnected LISTEN, a freed slot, committed
outcomes, a retry time coming due, a limit about to let a job through. The
listener, dispatcher, completer and claims signal here; only the fetcher waits.
Wake-ups are hints: the claim statement decides.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import datetime

import anyio


class Wakeups:
    def __init__(self, queues: Sequence[str]) -> None:
        self._queues = list(queues)
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()  # a slot or a completion backlog freed up
        # A job finished or outcomes were committed: there may be room to fetch. The
        # event's own set(), bound here: the dispatcher calls it once per job.
        self.progress: Callable[[], None] = self._progress.set
        self._next_run_at: float | None = None
        self._to_drain: set[str] = set()  # queues NOTIFYed since the last skipper drain

    # -- signals (listener, dispatcher, completer, worker) ----------------------------

    def wake(self) -> None:
        """A hint that new work may be runnable (NOTIFY, reconnect, rescue, stop)."""
        self._wake.set()

    def notified(self, queue: str) -> None:
        """A NOTIFY for `queue` arrived: wake, and drain its skippers before sleeping."""
        self._to_drain.add(queue)
        self._wake.set()

    def caught_up(self) -> None:
        """LISTEN (re)connected: notifications may have been missed meanwhile."""
        self._to_drain.update(self._queues)
        self._wake.set()

    def retry_scheduled(self, when: datetime) -> None:
        """A job of ours was put back to run at `when`: wake up by then at the latest."""
        at = when.timestamp()
        known = self._next_run_at
        # Replace a time already passed, too: it was due, and may never have been seen.
        if known is None or at < known or known <= time.time():
            self._next_run_at = at
            self._wake.set()  # re-arm the sleep with the earlier deadline

    def look_again_in(self, seconds: float) -> None:
        """A limit holds jobs back until then (a rate limit's next token)."""
        at = time.time() + seconds
        known = self._next_run_at
        if known is None or at < known or known <= time.time():
            self._next_run_at = at

    # -- waiting (the fetcher) --------------------------------------------------------

    def take_to_drain(self, *, everything: bool = False) -> list[str]:
        """The queues whose skipped NOTIFYs are unaccounted for (all of ours with
        `everything`), forgotten until signalled again."""
        if everything:
            self._to_drain.update(self._queues)
        queues, self._to_drain = sorted(self._to_drain), set()
        return queues

    def owe_drain(self, queues: Sequence[str]) -> None:
        """A drain of these queues failed: they stay unaccounted for."""
        self._to_drain.update(queues)

    def clear(self) -> None:
        """About to claim: hints from before the claim are answered by it."""
        self._wake.clear()

    async def sleep(self, seconds: float, *, or_progress: bool = False) -> None:
        """Sleep up to `seconds`, less if a wake-up comes (or, with `or_progress`, a job
        of ours ends: a limit that held jobs back may let one through)."""
        if seconds <= 0 or self._wake.is_set() or (or_progress and self._progress.is_set()):
            return
        if not or_progress:
            with anyio.move_on_after(seconds):
                await self._wake.wait()
            return
        # Two waiters of our own: cancelling them afterwards touches nothing else.
        waiters = [
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(self._progress.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def sleep_timeout(self, poll_interval: float) -> float:
        """How long an idle fetcher may sleep: the poll interval, or less when a retry
        of ours comes due sooner."""
        timeout = poll_interval
        if self._next_run_at is not None:
            until = self._next_run_at - time.time()
            if until <= 0:
                self._next_run_at = None
                return 0.0
            timeout = min(timeout, until)
        return timeout

    def clear_progress(self) -> None:
        self._progress.clear()

    async def wait_progress(self) -> None:
        await self._progress.wait()
