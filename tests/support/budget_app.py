"""The application of the connection-budget fleet test: one task that sleeps and touches no
database, so that every connection counted is the worker's own."""

from __future__ import annotations

import asyncio
import os

from aiopgq import Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_TEST_SCHEMA"])


@queue.task(name="budget.pause", max_attempts=3)
async def pause(seconds: float) -> None:
    await asyncio.sleep(seconds)
