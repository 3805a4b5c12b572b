"""Snapshots of the queues and the workers registry: what `top` and `workers` show."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .._db.connection import Connection
from .queries import OpsStatements


@dataclass(frozen=True)
class QueueRow:
    """One queue now: jobs waiting, scheduled and running, recent rates, failed jobs."""

    queue: str
    pending: int
    scheduled: int
    running: int
    failed: int
    rate_in: float  # jobs enqueued per second over the window
    rate_out: float  # jobs finished (done, failed or cancelled) per second over the window
    oldest_runnable_age: float | None


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
    queues: list[QueueRow]
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
    """Takes snapshots for a live view: the rates over `window` seconds on every
    snapshot, the failed counts (a scan of the retained finished rows) at most every
    `failed_every` seconds."""

    def __init__(self, sql: OpsStatements, *, window: float = 10.0, failed_every: float = 10.0):
        self._sql = sql
        self._window = window
        self._failed_every = failed_every
        self._failed: dict[str, int] = {}
        self._failed_at = float("-inf")

    async def snapshot(self, conn: Connection) -> Snapshot:
        if time.monotonic() - self._failed_at >= self._failed_every:
            rows = await conn.fetch(self._sql.failed_jobs)
            self._failed = {row["queue"]: row["failed"] for row in rows}
            self._failed_at = time.monotonic()
        activity = {
            row["queue"]: row for row in await conn.fetch(self._sql.queue_activity, self._window)
        }
        queues = []
        for name in sorted(set(activity) | set(self._failed)):
            row = activity.get(name)
            queues.append(
                QueueRow(
                    queue=name,
                    pending=row["pending"] if row else 0,
                    scheduled=row["scheduled"] if row else 0,
                    running=row["running"] if row else 0,
                    failed=self._failed.get(name, 0),
                    rate_in=(row["arrived"] if row else 0) / self._window,
                    rate_out=(row["finished"] if row else 0) / self._window,
                    oldest_runnable_age=row["oldest_runnable_age"] if row else None,
                )
            )
        return Snapshot(queues, await read_workers(conn, self._sql))
