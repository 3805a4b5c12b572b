"""tests/support/app.py with one more task, for the cancel tests' worker processes.

A module of its own, so that the workers of other tests register only app.py's tasks.
"""

from __future__ import annotations

import asyncio
import time

from .app import queue, record

__all__ = ["queue"]

_recording: set[asyncio.Task[None]] = set()


@queue.task(name="app.block", max_attempts=3)
async def block(seconds: float) -> None:
    """Runs until cancelled; records when the cancellation reached the handler."""
    await record("app.block")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        at = time.time()  # the moment the worker stopped us; written by another task
        writer = asyncio.get_running_loop().create_task(record("app.block.cancelled", at))
        _recording.add(writer)
        writer.add_done_callback(_recording.discard)
        raise
