"""Queue: pool lifecycle and task registry; its features are mixins (enqueuing, limits...)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

import asyncpg

from .._db import migrations
from .._db.dsn import check_dsn, redact, resolve_dsn
from .._db.pool import connect, create_pool
from .._db.statements import Statements, validate_identifier
from .._errors import ConfigurationError
from .._observer import Observer, combine
from .._retry import Retry
from .._schedule import Schedule
from .._task import Task
from .._worker.worker import Worker
from .admin import Control
from .enqueue import Enqueuing
from .enqueue_retry import EnqueueRetry
from .instrumented import Instrumented
from .limits import Limits
from .overview import Overview
from .partitions import Archive
from .periodic import Periodic
from .task_registry import RegistryCache

P = ParamSpec("P")
R = TypeVar("R")


class Queue(Control, Overview, Archive, Instrumented, Periodic, Enqueuing, Limits):
    """A job queue in one PostgreSQL schema.

    Its database: `dsn` (a postgresql:// URL), else `pool` (an asyncpg pool of yours), else
    the environment's AIOPGQ_DSN, else DATABASE_URL; ConfigurationError when none is set.

    >>> queue = Queue()  # AIOPGQ_DSN
    >>> queue = Queue("postgresql://localhost/app", enqueue_retry_for=15)
    >>> async with queue: await queue.enqueue("demo.add", {"a": 1, "b": 2})

    `enqueue_retry_for` (seconds or a timedelta, default 0: fail at once) makes enqueues
    wait out a database they cannot reach, retrying only what cannot run twice (README,
    "Producers during an outage").
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: asyncpg.Pool | None = None,
        schema: str = "aiopgq",
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        max_payload_bytes: int = 1_000_000,
        connect_kwargs: Mapping[str, Any] | None = None,
        observers: Sequence[Observer] = (),
        enqueue_retry_for: float | timedelta | None = None,
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
        self.sql = Statements(schema)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self._registry = RegistryCache()
        self.schedules: dict[str, Schedule] = {}  # of the periodic tasks, by task name
        self.max_payload_bytes = max_payload_bytes
        self._pool = pool
        self._owns_pool = pool is None
        self._pool_sizes = (min_pool_size, max_pool_size)
        self._connect_kwargs = dict(connect_kwargs or {})
        self._enqueue_retry = EnqueueRetry(enqueue_retry_for)
        self._observers = list(observers)
        self._observer = combine(self._observers)

    def __repr__(self) -> str:
        where = redact(self.dsn) if self.dsn else "external pool"
        return f"<Queue schema={self.schema} {where}>"

    # -- lifecycle -------------------------------------------------------------

    def reconfigure(
        self,
        *,
        dsn: str | None = None,
        schema: str | None = None,
        max_pool_size: int | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """Point a closed queue at another database or schema, size its pool, or add asyncpg
        connect arguments (the CLI's --dsn, --schema, --max-pool-size and
        --statement-cache-size); None keeps a setting.

        >>> queue.reconfigure(schema="staging")
        """
        if self._pool is not None:
            raise RuntimeError("reconfigure() needs a closed queue")
        if connect_kwargs:
            self._connect_kwargs.update(connect_kwargs)
        if dsn is not None:
            self.dsn = check_dsn(dsn)
            self._owns_pool = True
        if schema is not None:
            self.schema = validate_identifier(schema)
            self.sql = Statements(schema)
        if max_pool_size is not None:
            if max_pool_size < 1:
                raise ConfigurationError(f"max_pool_size must be >= 1, got {max_pool_size}")
            self._pool_sizes = (min(self._pool_sizes[0], max_pool_size), max_pool_size)
        self._registry = RegistryCache()  # another database's registry

    async def open(self, *, retry_for: float = 0.0) -> None:
        """Create the connection pool (a no-op for an external or open pool).

        An unreachable server raises ConfigurationError at once; with `retry_for`, it is
        retried with backoff for that many seconds first (a WARNING on the `aiopgq.queue`
        logger when the outage starts, reminders every 30 s), e.g. while a database
        container starts next to yours. Wrong credentials or a missing database fail at once.

        >>> await queue.open(retry_for=30)  # wait up to 30 s for the server
        """
        if self._pool is not None:
            return
        assert self.dsn is not None
        self._pool = await create_pool(
            self.dsn, self._pool_sizes, self._connect_kwargs, retry_for=retry_for
        )

    async def close(self) -> None:
        """Close the pool if this Queue created it (and stop waiting for jobs)."""
        self._registry_lock = None  # bound to this event loop
        await self._close_waiters()
        if self._owns_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def __aenter__(self) -> Queue:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def migrate(self) -> list[int]:
        """Create or upgrade the schema; returns the versions applied. Needs no open():
        a closed queue uses a connection of its own. Safe to run concurrently.

        >>> await queue.migrate()  # [] when already up to date
        """
        if self._pool is None:
            assert self.dsn is not None
            own = await connect(self.dsn, self._connect_kwargs)
            try:
                return await migrations.migrate(own, self.schema)
            finally:
                await own.close()
        async with self.pool.acquire() as conn:
            return await migrations.migrate(conn, self.schema)

    async def check_schema(self) -> None:
        """Raise SchemaError unless the schema matches this aiopgq ("run `aiopgq migrate`")."""
        async with self.pool.acquire() as conn:
            await migrations.check_version(conn, self.schema)

    # -- tasks -----------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        priority: int = 0,
        timeout: float | None = None,
        retry: Retry | None = None,
        max_snoozes: int = 100,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy cannot match the typevars of overload 2
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        priority: int = 0,
        timeout: float | None = None,
        retry: Retry | None = None,
        max_snoozes: int = 100,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register an `async def` (run on the loop) or `def` (run in a thread) as a task.

        >>> @queue.task(name="demo.add", queue="default", max_attempts=5)
        ... async def add(a: int, b: int) -> int: return a + b
        """

        def register(func: Callable[P, R]) -> Task[P, R]:
            return self._register_task(
                func,
                name=name,
                queue=queue,
                max_attempts=max_attempts,
                priority=priority,
                timeout=timeout,
                retry=retry,
                max_snoozes=max_snoozes,
            )

        return register(fn) if fn is not None else register

    # -- workers ---------------------------------------------------------------

    def worker(self, queues: Sequence[str] | None = None, **options: Any) -> Worker:
        """A worker for these queues (default: every queue of the registered tasks).

        >>> worker = queue.worker(queues=["default"], concurrency=50)
        >>> await worker.run()
        """
        return Worker(self, queues=queues, **options)
