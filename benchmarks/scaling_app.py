"""The application the scaling benchmark's worker processes run: one no-op task."""

from __future__ import annotations

import os

from aiopgq import Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema="scaling")


@queue.task(name="scaling.noop", max_attempts=3)
async def noop(n: int) -> None:
    return None
