"""QueueCore: what every part of Queue builds on (schema, statements, tasks, pool).

Queue's features are mixins on this base, one module each (`_inspection.py`, ...),
so that Queue itself stays the lifecycle and the task registry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, cast

import asyncpg

from .._db.connection import Connection
from .._db.retrying import Operation
from .._db.statements import Statements
from .._errors import ConfigurationError, QueueNotOpen
from .._observer import Observer
from .._retry import Retry
from .._task import Enqueuer, Task
from .enqueue_retry import EnqueueRetry

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class QueueCore:
    schema: str
    sql: Statements
    tasks: dict[str, Task[Any, Any]]
    dsn: str | None
    _pool: asyncpg.Pool | None
    _connect_kwargs: dict[str, Any]
    _observers: list[Observer]
    _observer: Observer | None  # all of _observers as one, None when there are none
    _enqueue_retry: EnqueueRetry  # how long enqueues wait out an unreachable database

    @property
    def is_open(self) -> bool:
        """True once open() made (or was given) a pool, until close()."""
        return self._pool is not None

    @property
    def pool(self) -> asyncpg.Pool:
        """The open pool; QueueNotOpen before open() and after close()."""
        if self._pool is None:
            raise QueueNotOpen(
                "the queue is not open: use `async with queue:` or `await queue.open()`"
            )
        return self._pool

    def _check_open(self, connection: Connection | None) -> None:
        """QueueNotOpen unless a call can get a connection: its own, or the pool's."""
        if connection is None:
            self.pool  # noqa: B018 - raises QueueNotOpen when closed

    def connect_args(self) -> tuple[str | None, dict[str, Any]]:
        """How to open a connection outside the pool (the worker's LISTEN connection)."""
        if self.dsn is not None:
            return self.dsn, dict(self._connect_kwargs)
        # An external pool keeps its connect arguments; asyncpg has no public accessor.
        pool = self.pool
        args = getattr(pool, "_connect_args", ())
        kwargs = dict(getattr(pool, "_connect_kwargs", {}))
        return (args[0] if args else None), kwargs

    def _register_task(
        self,
        func: Callable[P, R],
        *,
        name: str | None,
        queue: str,
        max_attempts: int,
        priority: int,
        timeout: float | None,
        retry: Retry | None,
        max_snoozes: int = 100,
    ) -> Task[P, R]:
        """Make `func` a task of this queue (`@queue.task` and `@queue.periodic`)."""
        task_name = name or f"{func.__module__}.{func.__qualname__}"
        if task_name in self.tasks:
            raise ConfigurationError(f"a task named {task_name!r} is already registered")
        task: Task[P, R] = Task(
            cast(Enqueuer, self),  # the Queue these mixins make up
            func,
            name=task_name,
            queue_name=queue,
            max_attempts=max_attempts,
            priority=priority,
            timeout=timeout,
            retry=retry or Retry(),
            max_snoozes=max_snoozes,
        )
        self.tasks[task_name] = task
        return task

    @asynccontextmanager
    async def _connection(self, connection: Connection | None) -> AsyncIterator[Connection]:
        if connection is not None:
            yield connection
        else:
            async with self.pool.acquire() as conn:
                yield conn

    async def _run(
        self,
        connection: Connection | None,
        op: Operation[T],
        retry_for: float | timedelta | None = None,
        *,
        idempotent: bool = False,
    ) -> T:
        """`op` on the caller's connection, else on a pool connection: one found dead
        before anything was sent is replaced, and with a retry time (the call's, else
        the queue's `enqueue_retry_for`) what cannot run twice is retried
        (aiopgq/_client/enqueue_retry.py; `idempotent`: `op` may run twice harmlessly)."""
        seconds = self._enqueue_retry.seconds_for(retry_for, connection is not None)
        if connection is not None:
            return await op(connection)
        return await self._enqueue_retry.run(self.pool, op, seconds, idempotent=idempotent)
