"""The worker's own connections, outside the pool: LISTEN and the fetcher's claims.

Each is named in pg_stat_activity (`aiopgq-listener <worker id>`, `aiopgq-fetcher
<worker id>`) and made with the queue's connect arguments, so the harness of a test, a
DBA or `pg_terminate_backend` can tell them apart from the pool's. Like the pool's, they
notice a pooler in between (the fetcher may claim through pgbouncer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from .._db.pooler import PoolerAwareConnect
from .contracts import QueueSpec

Connect = Callable[[], Awaitable["asyncpg.Connection[Any]"]]


def connector(queue: QueueSpec, application_name: str, dsn: str | None = None) -> Connect:
    """Opens a connection of our own to the queue's database (or `dsn`), named."""
    queue_dsn, kwargs = queue.connect_args()
    target = dsn or queue_dsn
    settings = {**kwargs.pop("server_settings", {}), "application_name": application_name}
    pooler_aware = PoolerAwareConnect()  # its reconnects reuse what it learnt

    async def connect() -> asyncpg.Connection[Any]:
        conn: asyncpg.Connection[Any] = await pooler_aware(
            target, server_settings=settings, **kwargs
        )
        return conn

    return connect


def connection_name(role: str, worker_id: str) -> str:
    """application_name of a worker's own connection (PostgreSQL keeps 63 bytes)."""
    return f"aiopgq-{role} {worker_id}"[:63]
