"""Task: a registered function and its enqueue shortcuts."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10
    from typing_extensions import Unpack

from ._context import context_parameter
from ._enqueue_options import (
    EnqueueManyOptions,
    EnqueueOptions,
    TaskDefaults,
    check_limit,
    check_max_attempts,
    check_priority,
    check_queue_name,
    split_options,
)
from ._models import Job
from ._payload import KeywordCheck, bind_arguments, check_signature
from ._retry import Retry

P = ParamSpec("P")
R = TypeVar("R")


class Enqueuer(Protocol):
    """Where a task's shortcuts enqueue: the enqueue part of the Queue it was registered on.
    `known` is the task whose arguments the payloads already are (bound and checked)."""

    async def one(
        self,
        task: str,
        payload: Mapping[str, Any] | None,
        known: TaskDefaults | None,
        options: EnqueueOptions,
    ) -> Job: ...

    async def many(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        known: TaskDefaults | None,
        options: EnqueueManyOptions,
    ) -> list[Job]: ...

    async def copy(
        self,
        task: str,
        payloads: Iterable[Mapping[str, Any]],
        known: TaskDefaults | None,
        options: EnqueueManyOptions,
    ) -> int: ...


class Task(Generic[P, R]):
    """A function registered with `@queue.task`; call it directly or `.enqueue()` it.

    >>> @queue.task(name="demo.add")
    ... async def add(a: int, b: int) -> int: return a + b
    >>> job = await add.enqueue(1, b=2)

    `@queue.task` makes it; its arguments are those of `Queue.task`.

    Args:
        queue: where its shortcuts enqueue (the Queue's enqueue part).
        fn: the function, an `async def` or a `def`.
        name: the task's name.
        queue_name: the queue its jobs go to.
        max_attempts: the most runs of a job before it ends failed, >= 1.
        priority: its jobs' priority, a 32-bit int, higher first.
        timeout: seconds a run may take before it is cancelled (None: no limit).
        retry: the backoff between failed attempts.
        max_snoozes: the snoozes of a job that do not count as a failed attempt
            (default 100, >= 0).
        key_concurrency: the key limit it declares for its queue (default None: none).

    Raises:
        ValueError: a bad queue name, `max_attempts`, `priority`, `timeout` or
            `max_snoozes`.
        TypeError: a `priority` that is not an int, or a parameter a payload cannot carry
            (positional-only, *args, named as an enqueue option, a second JobContext).
        ConfigurationError: a bad `key_concurrency`.
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
        key_concurrency: int | None = None,
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
        # The key limit this task declares for its queue (see Queue.task).
        self.key_concurrency = check_limit(f"key_concurrency of task {name}", key_concurrency)
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
        """The payload dict for a call with these arguments (TypeError names a bad one).

        Args:
            args: the call's positional arguments.
            kwargs: the call's keyword arguments.

        Returns:
            The arguments by parameter name.

        Raises:
            TypeError: an argument the function does not take, or a missing one.
        """
        if not args:
            self.check_keywords(kwargs)
            return dict(kwargs)
        return bind_arguments(self.signature, self.name, args, kwargs)

    async def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Enqueue one run with these arguments; returns the Job (with its id). The enqueue
        options (`EnqueueOptions`: queue, run_at or delay, priority, max_attempts,
        connection, idempotency_key, on_conflict, unique_for, concurrency_key, depends_on,
        on_parent_failure, enqueue_retry_for) go with the task's own keyword arguments: a
        task cannot have a parameter of those names. The task's settings are the defaults.

        >>> job = await add.enqueue(1, b=2, delay=timedelta(seconds=5))
        >>> job = await add.enqueue(1, b=2, connection=conn)  # inside your transaction

        Args:
            *args: the function's positional arguments.
            **kwargs: the function's keyword arguments, and the enqueue options of
                `Queue.enqueue`.

        Returns:
            The new Job, or the job that holds the idempotency key.

        Raises:
            TypeError: as `Queue.enqueue`.
            ValueError: as `Queue.enqueue`.
            DuplicateJob: as `Queue.enqueue`.
            JobNotFound: as `Queue.enqueue`.
            PayloadTooLarge: as `Queue.enqueue`.
            ConfigurationError: as `Queue.enqueue`.
            QueueNotOpen: as `Queue.enqueue`.
            SchemaError: as `Queue.enqueue`.
        """
        arguments, options = split_options(kwargs)
        return await self._queue.one(self.name, self.bind(args, arguments), self, options)

    async def enqueue_many(
        self, arguments: Iterable[Mapping[str, Any]], **options: Unpack[EnqueueManyOptions]
    ) -> list[Job]:
        """Enqueue one job per dict of keyword arguments, in one round trip; the options of
        Queue.enqueue_many.

        >>> jobs = await add.enqueue_many([{"a": 1, "b": 2}, {"a": 3, "b": 4}])

        Args:
            arguments: one dict of the function's keyword arguments per job.
            **options: the options of `Queue.enqueue_many`.

        Returns:
            The Jobs, in the order of `arguments`.

        Raises:
            TypeError: as `Queue.enqueue`.
            ValueError: as `Queue.enqueue`.
            DuplicateJob: as `Queue.enqueue`.
            JobNotFound: as `Queue.enqueue`.
            PayloadTooLarge: as `Queue.enqueue`.
            ConfigurationError: as `Queue.enqueue`.
            QueueNotOpen: as `Queue.enqueue`.
            SchemaError: as `Queue.enqueue`.
        """
        return await self._queue.many(self.name, arguments, self, options)

    async def copy_many(
        self, arguments: Iterable[Mapping[str, Any]], **options: Unpack[EnqueueManyOptions]
    ) -> int:
        """Enqueue one job per dict of keyword arguments with COPY; returns the count.

        >>> await add.copy_many({"a": i, "b": i} for i in range(100_000))

        Args:
            arguments: one dict of the function's keyword arguments per job.
            **options: the options of `Queue.enqueue_many`.

        Returns:
            How many jobs it created.

        Raises:
            TypeError: as `Queue.enqueue`.
            ValueError: as `Queue.enqueue`.
            DuplicateJob: as `Queue.enqueue`.
            PayloadTooLarge: as `Queue.enqueue`.
            ConfigurationError: as `Queue.enqueue`.
            QueueNotOpen: as `Queue.enqueue`.
            SchemaError: as `Queue.enqueue`.
        """
        return await self._queue.copy(self.name, arguments, self, options)
