"""Snapshots of the queues and the workers registry: what `top` and `workers` show."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._db.connection import Connection
from .._models import QueueStats
from .queries import OpsStatements


@dataclass(frozen=True)
class WorkerRow:
    """One worker of the registry, with the jobs it holds now."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    running: int
    version: str
    heartbeat_interval: float
    started_at: datetime
    last_seen: datetime
    last_seen_age: float
    uptime: float

    def as_json(self) -> dict[str, Any]:
        values = dict(self.__dict__)
        values["started_at"] = self.started_at.isoformat()
        values["last_seen"] = self.last_seen.isoformat()
        return values


@dataclass(frozen=True)
class Snapshot:
    queues: list[QueueStats]
    workers: list[WorkerRow]
    taken_at: float = field(default_factory=time.time)


async def read_workers(conn: Connection, sql: OpsStatements) -> list[WorkerRow]:
    """The registry, oldest worker first."""
    rows = await conn.fetch(sql.workers)
    return [
        WorkerRow(
            id=row["id"],
            host=row["host"],
            pid=row["pid"],
            queues=list(row["queues"]),
            concurrency=row["concurrency"],
            running=row["running"],
            version=row["version"],
            heartbeat_interval=row["heartbeat_interval"],
            started_at=row["started_at"],
            last_seen=row["last_seen"],
            last_seen_age=row["last_seen_age"],
            uptime=row["uptime"],
        )
        for row in rows
    ]


class Watcher:
    """Takes snapshots for a live view: the queues' summary over `window` seconds (the
    one every view reads) and the workers registry."""

    def __init__(self, sql: OpsStatements, *, window: float = 10.0) -> None:
        self._sql = sql
        self._window = window

    async def snapshot(self, conn: Connection) -> Snapshot:
        rows = await conn.fetch(self._sql.queue_stats, self._window)
        queues = [QueueStats.of(row, self._window) for row in rows]
        return Snapshot(queues, await read_workers(conn, self._sql))
