"""What every benchmark handler does, whatever system calls it.

Payload keys decide what is recorded:
- `seq`: the handler start time goes into the shared `SeqClock` (latency workloads);
- `sleep`: sleep that long, counting concurrently running handlers (RSS test);
- `batch`: one call stands for that many jobs (the bare loop's strict drain).
Every call is counted, so the harness can check each job ran exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from benchmarks.clock import SeqClock


class Recorder:
    def __init__(
        self, clock: SeqClock | None = None, on_running: Callable[[int], None] | None = None
    ) -> None:
        self.clock = clock
        self.on_running = on_running
        self.handled = 0
        self.first_start = 0.0
        self.last_start = 0.0
        self.running = 0

    async def handle(self, payload: dict[str, Any]) -> None:
        now = time.time()
        if not self.handled:
            self.first_start = now
        self.handled += payload.get("batch", 1)
        self.last_start = now
        seq = payload.get("seq")
        if seq is not None and self.clock is not None:
            self.clock.start(int(seq), now)
        sleep = payload.get("sleep")
        if sleep:
            self.running += 1
            if self.on_running is not None:
                self.on_running(self.running)
            try:
                await asyncio.sleep(float(sleep))
            finally:
                self.running -= 1

    def report(self) -> dict[str, Any]:
        return {
            "handled": self.handled,
            "first_start": self.first_start,
            "last_start": self.last_start,
        }
