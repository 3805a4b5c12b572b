"""Statements on pool connections: a connection found dead before anything was sent is replaced.

`run_pooled` runs an operation on a pool connection. A connection that the server
closed while it sat in the pool can still look open for a loop iteration (see
`never_sent`); a statement on it fails before anything is sent, so the connection is
thrown away and the operation runs on another. That costs nothing while nothing fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from .connection import Connection
from .transient import never_sent

T = TypeVar("T")
Operation = Callable[[Connection], Awaitable[T]]


async def run_pooled(pool: asyncpg.Pool, op: Operation[T]) -> T:
    """`await op(conn)` on a pool connection. If a statement of `op` fails because the
    connection had died before it was sent, `op` runs again from its start on another
    connection: `op` must be safe to run again after running partly (a single
    statement, or statements that are harmless to repeat)."""
    replacements = pool.get_max_size()
    while True:
        async with pool.acquire() as conn:
            try:
                return await op(conn)
            except Exception as exc:
                if replacements <= 0 or not never_sent(exc):
                    raise
                conn.terminate()  # the pool connects afresh; the release is a no-op
        replacements -= 1
