"""What the worker runtime needs of the client, as Protocols: it never imports Queue or Task.

`aiopgq.Queue` and `aiopgq.Task` satisfy these; mypy checks it where the client
hands itself to the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from .._context import Middleware
from .._db.statements import Statements
from .._models import Job
from .._observer import JobObservation
from .._payload import KeywordCheck
from .._retry import Retry


class TaskSpec(Protocol):
    """What the dispatcher needs of a registered task."""

    @property
    def name(self) -> str: ...
    @property
    def queue_name(self) -> str: ...
    @property
    def fn(self) -> Callable[..., Any]: ...
    @property
    def is_async(self) -> bool: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def retry(self) -> Retry: ...
    @property
    def check_keywords(self) -> KeywordCheck: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def context_parameter(self) -> str | None: ...  # the JobContext parameter, if any
    @property
    def max_snoozes(self) -> int: ...
    @property
    def key_concurrency(self) -> int | None: ...  # the key limit it declares for its queue


class JobObserver(Protocol):
    """What the dispatcher calls around each job when the queue has observers
    (aiopgq.Observer); with none, the dispatcher calls nothing."""

    @property
    def reads_trace_context(self) -> bool: ...
    def job_started(
        self, job: Job, trace_context: Mapping[str, str] | None
    ) -> JobObservation | None: ...


class ScheduleSpec(Protocol):
    """What the scheduler needs of a periodic task's schedule (an aiopgq Schedule)."""

    @property
    def name(self) -> str: ...  # the task's name
    @property
    def cron(self) -> str: ...
    @property
    def timezone(self) -> str: ...
    @property
    def missed(self) -> str: ...  # latest | skip | all
    @property
    def queue_name(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    def due(self, after: datetime, now: datetime, limit: int) -> list[datetime]:
        """The newest `limit` ticks in (after, now], oldest first."""
        ...

    def next_after(self, moment: datetime) -> datetime: ...
    def payload(self, tick: datetime) -> str:
        """The JSON payload of the tick's job."""
        ...


class QueueSpec(Protocol):
    """What a worker needs of the queue it serves."""

    @property
    def schema(self) -> str: ...
    @property
    def sql(self) -> Statements: ...
    @property
    def tasks(self) -> Mapping[str, TaskSpec]: ...
    @property
    def schedules(self) -> Mapping[str, ScheduleSpec]: ...
    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def observer(self) -> JobObserver | None: ...
    @property
    def is_open(self) -> bool: ...
    @property
    def middlewares(self) -> Sequence[Middleware]: ...
    async def open(self, *, retry_for: float = 0.0) -> None: ...
    async def close(self) -> None: ...
    async def check_schema(self) -> None: ...
    def connect_args(self) -> tuple[str | None, dict[str, Any]]: ...


def is_queue(obj: object) -> bool:
    """True if `obj`'s class has what QueueSpec names: how `aiopgq worker` checks its
    target without importing the client. Read on the class: the instance's properties
    (the pool) raise until the queue is open."""
    names = [n for n in vars(QueueSpec) if not n.startswith("_")]
    return all(hasattr(type(obj), name) for name in names)
