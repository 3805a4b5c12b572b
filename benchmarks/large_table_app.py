"""The large-table benchmark's worker target: one no-op task on the schema LARGE_SCHEMA names."""

from __future__ import annotations

import os

from aiopgq import Queue

queue = Queue(schema=os.environ.get("LARGE_SCHEMA", "large"))


@queue.task(name="large.noop")
async def noop(i: int = 0) -> None:
    pass
