"""Core: the state one Queue's parts share, built once (schema, statements, pool, tasks,
observers), and the outage retry of its enqueues.

Outage retry: `Queue(enqueue_retry_for=...)` sets it for every enqueue, the
`enqueue_retry_for` option of each enqueue for one call. What is retried
(`aiopgq._db.retrying.run_pooled_retrying`): an attempt whose connection could not be
made (server down, restarting, out of connections), a statement that certainly never
reached the server, and, when every job of the call has an idempotency key and
`on_conflict="ignore"`, any transient error: a second keyed insert returns the jobs of
the first. Any other insert whose reply was lost is never sent again (it may have
committed): its error is raised. The registry read before an enqueue of a task not
registered here is retried like a keyed insert (a read runs twice harmlessly).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

import asyncpg

from .._db.connection import Connection
from .._db.dsn import check_dsn, resolve_dsn
from .._db.outage import Outage
from .._db.retrying import Operation, run_pooled, run_pooled_retrying
from .._db.statements import Statements, validate_identifier
from .._errors import ConfigurationError, JobNotFound, QueueNotOpen, shown
from .._observer import Observer, combine
from .._retry import Retry
from .._schedule import Schedule
from .._task import Enqueuer, Task
from .task_registry import RegistryCache

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
logger = logging.getLogger("aiopgq.queue")


class Core:
    """Where one Queue keeps its state; every part of the Queue reads it from here."""

    def __init__(
        self,
        dsn: str | None,
        *,
        pool: asyncpg.Pool | None,
        schema: str,
        pool_sizes: tuple[int, int],
        max_payload_bytes: int,
        connect_kwargs: Mapping[str, Any] | None,
        observers: Sequence[Observer],
        enqueue_retry_for: float | timedelta | None,
    ) -> None:
        self.schema = validate_identifier(schema)
        self.dsn = check_dsn(dsn) if dsn else None
        if pool is None and self.dsn is None:
            env_dsn = resolve_dsn()
            if env_dsn is None:
                raise ConfigurationError(
                    "no database given: pass Queue(dsn) or Queue(pool=...), "
                    "or set AIOPGQ_DSN (or DATABASE_URL)"
                )
            self.dsn = check_dsn(env_dsn)
        self.sql = Statements(self.schema)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}  # of the periodic tasks, by task name
        self.registry = RegistryCache()
        self.registry_lock: asyncio.Lock | None = None  # made on first use: bound to a loop
        self.max_payload_bytes = max_payload_bytes
        self.pool_or_none = pool
        self.owns_pool = pool is None
        self.pool_sizes = pool_sizes
        self.connect_kwargs = dict(connect_kwargs or {})
        self.enqueue_retry = EnqueueRetry(enqueue_retry_for)
        self.observers = list(observers)
        self.observer: Observer | None = combine(self.observers)  # None without observers

    def set_schema(self, schema: str) -> None:
        self.schema = validate_identifier(schema)
        self.sql = Statements(schema)

    def add_observer(self, observer: Observer) -> None:
        if not isinstance(observer, Observer):
            raise TypeError(f"observers are aiopgq.Observer instances, not {observer!r}")
        self.observers.append(observer)
        self.observer = combine(self.observers)

    @property
    def pool(self) -> asyncpg.Pool:
        """The open pool; QueueNotOpen before open() and after close()."""
        if self.pool_or_none is None:
            raise QueueNotOpen(
                "the queue is not open: use `async with queue:` or `await queue.open()`"
            )
        return self.pool_or_none

    def check_open(self, connection: Connection | None) -> None:
        """QueueNotOpen unless a call can get a connection: its own, or the pool's."""
        if connection is None:
            self.pool  # noqa: B018 - raises QueueNotOpen when closed

    def connect_args(self) -> tuple[str | None, dict[str, Any]]:
        """How to open a connection outside the pool (the worker's LISTEN connection)."""
        if self.dsn is not None:
            return self.dsn, dict(self.connect_kwargs)
        # An external pool keeps its connect arguments; asyncpg has no public accessor.
        pool = self.pool
        args = getattr(pool, "_connect_args", ())
        kwargs = dict(getattr(pool, "_connect_kwargs", {}))
        return (args[0] if args else None), kwargs

    def register_task(
        self,
        queue: Enqueuer,
        func: Callable[P, R],
        *,
        name: str | None,
        queue_name: str,
        max_attempts: int,
        priority: int,
        timeout: float | None,
        retry: Retry | None,
        max_snoozes: int = 100,
        key_concurrency: int | None = None,
    ) -> Task[P, R]:
        """Make `func` a task of `queue` (`@queue.task` and `@queue.periodic`)."""
        task_name = name or f"{func.__module__}.{func.__qualname__}"
        if task_name in self.tasks:
            raise ConfigurationError(f"a task named {shown(task_name)} is already registered")
        task: Task[P, R] = Task(
            queue,
            func,
            name=task_name,
            queue_name=queue_name,
            max_attempts=max_attempts,
            priority=priority,
            timeout=timeout,
            retry=retry or Retry(),
            max_snoozes=max_snoozes,
            key_concurrency=key_concurrency,
        )
        self.tasks[task_name] = task
        return task

    @asynccontextmanager
    async def connection(self, connection: Connection | None) -> AsyncIterator[Connection]:
        """The caller's connection, else one of the pool's for the block."""
        if connection is not None:
            yield connection
        else:
            async with self.pool.acquire() as conn:
                yield conn

    async def run(
        self,
        connection: Connection | None,
        op: Operation[T],
        retry_for: float | timedelta | None = None,
        *,
        idempotent: bool = False,
    ) -> T:
        """`op` on the caller's connection, else on a pool connection: one found dead
        before anything was sent is replaced, and with a retry time (the call's, else
        the queue's `enqueue_retry_for`) what cannot run twice is retried (see the
        module's docstring; `idempotent`: `op` may run twice harmlessly)."""
        seconds = self.enqueue_retry.seconds_for(retry_for, connection is not None)
        if connection is not None:
            return await op(connection)
        return await self.enqueue_retry.run(self.pool, op, seconds, idempotent=idempotent)

    def not_found(self, job_id: int) -> JobNotFound:
        return JobNotFound(
            f"no job with id {job_id} in schema {self.schema} "
            "(never enqueued there, or finished and pruned after the retention period)"
        )


def retry_seconds(value: float | timedelta | None, name: str = "enqueue_retry_for") -> float:
    """Seconds from a number, a timedelta or None (no retry); ConfigurationError if bad."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigurationError(f"{name} must be seconds or a timedelta, got {shown(value)}")
    if not 0 <= seconds <= 86400:
        raise ConfigurationError(f"{name} must be between 0 and 86400 seconds, got {seconds}")
    return seconds


class EnqueueRetry:
    """The queue's default wait, and one account of the outages its enqueues ride out."""

    def __init__(self, retry_for: float | timedelta | None) -> None:
        self.seconds = retry_seconds(retry_for)
        self._outage = Outage()

    def seconds_for(self, override: float | timedelta | None, own_connection: bool) -> float:
        """The wait of one call: its override, else the queue's; none on the caller's
        connection (its transaction is the caller's to retry)."""
        if override is not None:
            seconds = retry_seconds(override)
            if seconds and own_connection:
                raise ConfigurationError(
                    "enqueue_retry_for cannot be used with connection=...: the enqueue is "
                    "part of your transaction, so retry the transaction instead"
                )
            return seconds
        return 0.0 if own_connection else self.seconds

    async def run(
        self, pool: asyncpg.Pool, op: Operation[T], seconds: float, *, idempotent: bool
    ) -> T:
        if not seconds:
            return await run_pooled(pool, op)
        return await run_pooled_retrying(
            pool,
            op,
            retry_for=seconds,
            idempotent=idempotent,
            outage=self._outage,
            logger=logger,
            what="enqueue",
        )
