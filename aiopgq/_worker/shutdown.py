"""Shutdown: the order in which a worker stops fetching and gives its jobs back.

The fetcher stops (its connection is closed then if jobs still run, else at the
worker's very end, beside its registry row's delete); running jobs get the grace
period to finish; what still runs then (or when the worker is cancelled from outside)
is cancelled and released to pending.
"""

from __future__ import annotations

import logging

import anyio

from .claims import Claims
from .dispatcher import Dispatcher
from .fetcher import FetchLoop

logger = logging.getLogger("aiopgq.worker")


async def fetch_until_stopped(
    fetcher: FetchLoop,
    claims: Claims,
    dispatcher: Dispatcher,
    *,
    grace_period: float,
    burst: bool,
) -> None:
    """Run `fetcher` until it stops (or burst mode runs out of jobs), then wind down."""
    try:
        try:
            async with anyio.create_task_group() as drains:
                await fetcher.run(drains, burst=burst)
                drains.cancel_scope.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await fetcher.hand_over()
        finally:
            if dispatcher.running:  # to wait for anyway: close the claims' connection now
                await claims.drop_connection()  # (else the worker's end closes it: worker.py)
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
