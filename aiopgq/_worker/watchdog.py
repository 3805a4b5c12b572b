"""Watchdog: warns when a handler blocks the event loop, naming the job and task.

A thread watches a timestamp that a coroutine on the loop refreshes every tick.
When the timestamp goes stale, the loop is stuck inside one task's step; the
thread reads which task that is (job tasks are named JOB_TASK_PREFIX + id).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import anyio

from .._models import Job, as_job
from .job_tasks import JOB_TASK_PREFIX

logger = logging.getLogger("aiopgq.worker")

_TICK = 0.1


class LoopWatchdog:
    def __init__(self, threshold: float, job_by_id: Callable[[int], Job | None]) -> None:
        self._threshold = threshold
        self._job_by_id = job_by_id
        self._last_tick = time.monotonic()
        self._stop = threading.Event()
        self.warnings = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        thread = threading.Thread(
            target=self._watch, args=(loop,), name="aiopgq-loop-watchdog", daemon=True
        )
        thread.start()
        try:
            while True:
                self._last_tick = time.monotonic()
                await anyio.sleep(_TICK)
        finally:
            self._stop.set()

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        warned_for = 0.0
        while not self._stop.wait(_TICK):
            last = self._last_tick
            stalled = time.monotonic() - last
            if stalled < self._threshold or warned_for == last:
                continue
            warned_for = last  # one warning per stall
            self.warnings += 1
            task = asyncio.current_task(loop)  # read-only peek from another thread
            name = task.get_name() if task else "?"
            # A plain lane's task carries its job or claimed row (not in `running` yet).
            carried = getattr(task, "job", None)
            job = as_job(carried) if carried is not None else self._job_for(name)
            if job is not None:
                logger.warning(
                    "event loop blocked for %.1f s by job %s (task %s): a handler must not "
                    "block; await async I/O, or make it a plain `def` so it runs in a thread",
                    stalled,
                    job.id,
                    job.task,
                    extra={"job_id": job.id, "task": job.task, "queue": job.queue},
                )
            else:
                logger.warning("event loop blocked for %.1f s (in %s)", stalled, name)

    def _job_for(self, task_name: str) -> Job | None:
        job_id = task_name.removeprefix(JOB_TASK_PREFIX)
        if job_id != task_name and job_id.isdigit():
            return self._job_by_id(int(job_id))
        return None
