"""QueueCore: what every part of Queue builds on (schema, statements, tasks, pool).

Queue's features are mixins on this base, one module each (`_inspection.py`, ...),
so that Queue itself stays the lifecycle and the task registry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from ._db.connection import Connection
from ._db.statements import Statements
from ._errors import QueueNotOpen
from ._task import Task


class QueueCore:
    schema: str
    sql: Statements
    tasks: dict[str, Task[Any, Any]]
    dsn: str | None
    _pool: asyncpg.Pool | None
    _connect_kwargs: dict[str, Any]

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

    @asynccontextmanager
    async def _connection(self, connection: Connection | None) -> AsyncIterator[Connection]:
        if connection is not None:
            yield connection
        else:
            async with self.pool.acquire() as conn:
                yield conn
