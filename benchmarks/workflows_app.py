"""The application `python -m benchmarks.workflows` runs in `aiopgq worker` processes:
a no-op job, and a chain link that returns when its run started (for the latency of a
child after its parent)."""

from __future__ import annotations

import os
import time

from aiopgq import JobContext, Queue

queue = Queue(os.environ["AIOPGQ_DSN"], schema=os.environ["AIOPGQ_BENCH_SCHEMA"])


@queue.task(name="bench.noop")
async def noop(n: int = 0) -> None:
    return None


@queue.task(name="bench.callback")
async def callback(ctx: JobContext) -> int:
    return len(await ctx.parent_results())


@queue.task(name="bench.link")
async def link(n: int) -> dict[str, float]:
    return {"started": time.time(), "returned": time.time()}
