"""Hooks: middleware around every job's handler, and callbacks after every enqueue."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._context import Middleware
from .._models import Job

logger = logging.getLogger("aiopgq.queue")

EnqueueHook = Callable[[Job], Awaitable[None] | None]
M = TypeVar("M", bound=Middleware)
H = TypeVar("H", bound=EnqueueHook)


class Hooks:
    """The middleware and enqueue hooks of one Queue."""

    def __init__(self) -> None:
        # Tuples, replaced (never mutated) as hooks are added: read without a copy.
        self.middleware: tuple[Middleware, ...] = ()
        self.enqueue_hooks: tuple[EnqueueHook, ...] = ()

    def add_middleware(self, fn: M) -> M:
        """Register `async def fn(ctx, call_next)` around every job's handler run by this
        queue's workers (register before they start). `await call_next()` runs the next
        middleware, then the handler, and returns its result; what `fn` returns is stored
        as the job's result; what it raises fails the job like the handler's own error.

        >>> @queue.middleware
        ... async def timed(ctx, call_next): t = time.monotonic(); r = await call_next(); ...
        """
        is_async = inspect.iscoroutinefunction(fn)  # (not in the `if`: no narrowing of M)
        if not is_async:
            raise TypeError(
                f"middleware {getattr(fn, '__qualname__', fn)!r} must be an `async def "
                "fn(ctx, call_next)`"
            )
        self.middleware = (*self.middleware, fn)
        return fn

    def add_enqueue_hook(self, fn: H) -> H:
        """Register `fn(job)` (a function or an `async def`), called with each Job after
        enqueue or enqueue_many inserted it (copy_many returns no Jobs and calls none), in
        the order registered. An error of a hook is logged (logger `aiopgq.queue`) and
        does not fail the enqueue: the job is written.

        >>> @queue.on_enqueue
        ... def count(job): ENQUEUED.labels(job.task).inc()
        """
        if not callable(fn):
            raise TypeError(f"on_enqueue: {fn!r} is not callable")
        self.enqueue_hooks = (*self.enqueue_hooks, fn)
        return fn

    async def enqueued(self, jobs: list[Job]) -> None:
        """Run the enqueue hooks on `jobs` (the caller checked there are hooks)."""
        for job in jobs:
            for hook in self.enqueue_hooks:
                try:
                    outcome: Any = hook(job)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    logger.exception(
                        "on_enqueue hook %s failed for job %s (the job is enqueued)",
                        getattr(hook, "__qualname__", hook),
                        job.id,
                        extra={"job_id": job.id, "task": job.task, "queue": job.queue},
                    )
