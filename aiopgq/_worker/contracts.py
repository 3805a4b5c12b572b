"""What the worker runtime needs of the client, as Protocols: it never imports Queue or Task.

`aiopgq.Queue` and `aiopgq.Task` satisfy these; mypy checks it where the client
hands itself to the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import asyncpg

from .._context import Middleware
from .._db.statements import Statements
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
    def check_keywords(self) -> Callable[[Mapping[str, Any]], None]: ...
    @property
    def context_parameter(self) -> str | None: ...  # the JobContext parameter, if any
    @property
    def max_snoozes(self) -> int: ...


class QueueSpec(Protocol):
    """What a worker needs of the queue it serves."""

    @property
    def schema(self) -> str: ...
    @property
    def sql(self) -> Statements: ...
    @property
    def tasks(self) -> Mapping[str, TaskSpec]: ...
    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def is_open(self) -> bool: ...
    @property
    def middlewares(self) -> Sequence[Middleware]: ...
    async def open(self, *, retry_for: float = 0.0) -> None: ...
    async def close(self) -> None: ...
    async def check_schema(self) -> None: ...
    def connect_args(self) -> tuple[str | None, dict[str, Any]]: ...
