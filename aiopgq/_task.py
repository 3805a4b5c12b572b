"""Task: a registered function and its enqueue shortcuts."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from ._context import context_parameter
from ._db.connection import Connection
from ._models import Job
from ._options import OnConflict, check_max_attempts, check_priority, check_queue_name
from ._payload import KeywordCheck, bind_arguments, check_signature
from ._retry import Retry

P = ParamSpec("P")
R = TypeVar("R")


class Enqueuer(Protocol):
    """Where a task's shortcuts enqueue: the aiopgq.Queue it was registered on."""

    async def enqueue(
        self,
        task: str,
        payload: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        idempotency_key: str | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> Job: ...

    async def enqueue_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> list[Job]: ...

    async def copy_many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        connection: Connection | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> int: ...


class Task(Generic[P, R]):
    """A function registered with `@queue.task`; call it directly or `.enqueue()` it.

    >>> @queue.task(name="demo.add")
    ... async def add(a: int, b: int) -> int: return a + b
    >>> job = await add.enqueue(1, b=2)
    """

    def __init__(
        self,
        queue: Enqueuer,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        *,
        name: str,
        queue_name: str,
        max_attempts: int,
        priority: int,
        timeout: float | None,
        retry: Retry,
        max_snoozes: int = 100,
    ) -> None:
        self.fn = fn
        self.name = name
        self.queue_name = check_queue_name(queue_name)
        self.max_attempts = check_max_attempts(max_attempts)
        self.priority = check_priority(priority)
        if timeout is not None and timeout <= 0:
            raise ValueError(f"task {name}: timeout must be > 0 seconds or None")
        self.timeout = timeout
        self.retry = retry
        if isinstance(max_snoozes, bool) or not isinstance(max_snoozes, int) or max_snoozes < 0:
            raise ValueError(f"task {name}: max_snoozes must be an int >= 0, got {max_snoozes!r}")
        self.max_snoozes = max_snoozes
        # The parameter annotated JobContext, filled by the worker, not by the payload.
        self.context_parameter = context_parameter(fn)
        self.signature = check_signature(fn, name, context=self.context_parameter)
        self.check_keywords = KeywordCheck.of(self.signature, name)
        self.is_async = inspect.iscoroutinefunction(fn)
        self._queue = queue

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R] | R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue_name}>"

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The payload dict for a call with these arguments (TypeError names a bad one)."""
        if not args:
            self.check_keywords(kwargs)
            return dict(kwargs)
        return bind_arguments(self.signature, self.name, args, kwargs)

    async def enqueue(
        self,
        *args: Any,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        connection: Connection | None = None,
        idempotency_key: str | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
        **kwargs: Any,
    ) -> Job:
        """Enqueue one run with these arguments; returns the Job (with its id).

        >>> job = await add.enqueue(1, b=2, delay=timedelta(seconds=5))
        >>> job = await add.enqueue(1, b=2, connection=conn)  # inside your transaction
        """
        return await self._queue.enqueue(
            self.name,
            self.bind(args, kwargs),
            queue=self.queue_name,
            run_at=run_at,
            delay=delay,
            priority=self.priority if priority is None else priority,
            max_attempts=self.max_attempts,
            connection=connection,
            idempotency_key=idempotency_key,
            on_conflict=on_conflict,
            unique_for=unique_for,
            concurrency_key=concurrency_key,
            enqueue_retry_for=enqueue_retry_for,
        )

    async def enqueue_many(
        self,
        arguments: Iterable[Mapping[str, Any]],
        *,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        connection: Connection | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> list[Job]:
        """Enqueue one job per dict of keyword arguments, in one round trip.

        >>> jobs = await add.enqueue_many([{"a": 1, "b": 2}, {"a": 3, "b": 4}])
        """
        return await self._queue.enqueue_many(
            self.name,
            arguments,  # checked against this task's signature by the queue
            queue=self.queue_name,
            run_at=run_at,
            delay=delay,
            priority=self.priority if priority is None else priority,
            max_attempts=self.max_attempts,
            connection=connection,
            idempotency_keys=idempotency_keys,
            on_conflict=on_conflict,
            unique_for=unique_for,
            concurrency_key=concurrency_key,
            enqueue_retry_for=enqueue_retry_for,
        )

    async def copy_many(
        self,
        arguments: Iterable[Mapping[str, Any]],
        *,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: int | None = None,
        connection: Connection | None = None,
        idempotency_keys: Sequence[str | None] | None = None,
        on_conflict: OnConflict = "ignore",
        unique_for: timedelta | float | None = None,
        concurrency_key: str | None = None,
        enqueue_retry_for: float | timedelta | None = None,
    ) -> int:
        """Enqueue one job per dict of keyword arguments with COPY; returns the count.

        >>> await add.copy_many({"a": i, "b": i} for i in range(100_000))
        """
        return await self._queue.copy_many(
            self.name,
            arguments,
            queue=self.queue_name,
            run_at=run_at,
            delay=delay,
            priority=self.priority if priority is None else priority,
            max_attempts=self.max_attempts,
            connection=connection,
            idempotency_keys=idempotency_keys,
            on_conflict=on_conflict,
            unique_for=unique_for,
            concurrency_key=concurrency_key,
            enqueue_retry_for=enqueue_retry_for,
        )
