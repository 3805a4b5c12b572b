"""The retention soak's worker target: one no-op task on the schema SOAK_SCHEMA names."""

from __future__ import annotations

import os

from aiopgq import Queue

queue = Queue(schema=os.environ.get("SOAK_SCHEMA", "soak"))


@queue.task(name="soak.noop")
async def noop() -> None:
    pass
