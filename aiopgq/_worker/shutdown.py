"""Shutdown: how a worker stops fetching, hands over, and gives its running jobs back.

The order matters: the fetch loop ends first (a burst run when nothing is left, else
at stop()), the awake role hands the NOTIFY duty back, the fetcher's own connection
is closed, running jobs get the grace period to finish, and whatever still runs then
(or when the worker is cancelled from outside) is cancelled and released to pending.
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio
from anyio.abc import TaskGroup

from .claims import Claims
from .dispatcher import Dispatcher

logger = logging.getLogger("aiopgq.worker")


class FetchLoop(Protocol):
    """The lease-mode Fetcher or the HoldingFetcher."""

    def stop(self) -> None: ...
    async def run(self, drains: TaskGroup, *, burst: bool = False) -> None: ...
    async def hand_over(self) -> None: ...


async def fetch_until_stopped(
    fetcher: FetchLoop,
    claims: Claims,
    dispatcher: Dispatcher,
    *,
    burst: bool,
    grace_period: float,
) -> None:
    """Run `fetcher` until it stops, then wind down in the order above."""
    try:
        try:
            async with anyio.create_task_group() as drains:
                await fetcher.run(drains, burst=burst)
                drains.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await fetcher.hand_over()
        finally:
            await claims.drop_connection()
        with anyio.move_on_after(grace_period):
            await dispatcher.wait_idle()
    finally:
        # Grace period over, or cancelled from outside: give running jobs back.
        if dispatcher.running:
            logger.warning(
                "stopping: releasing %d running jobs to pending", len(dispatcher.running)
            )
        with anyio.CancelScope(shield=True):
            await dispatcher.cancel_all()
