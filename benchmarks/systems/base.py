"""What every compared system provides: schema install, enqueue paths, a worker."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import asyncpg

Handler = Callable[[dict[str, Any]], Awaitable[None]]
TASK_NAME = "bench.noop"
QUEUE_NAME = "default"


@dataclass
class WorkerConfig:
    """How one worker process runs.

    `mode` is `drain` (burst: return when no runnable job is left) or `serve` (run until
    stopped). `concurrency` is the system's own knob (bare: batch size; PGQueuer:
    max_concurrent_tasks; Procrastinate/aiopgq: concurrency); `batch` the dequeue batch
    where the system has one separate from concurrency.
    """

    mode: str = "drain"
    concurrency: int = 100
    batch: int = 100
    listen: bool = True
    poll_interval: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerConfig:
        return cls(**data)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "concurrency": self.concurrency,
            "batch": self.batch,
            "listen": self.listen,
            "poll_interval": self.poll_interval,
            "extra": self.extra,
        }


class WorkerRunner(ABC):
    """One system's worker inside a child process."""

    @abstractmethod
    async def prepare(self) -> None:
        """Import, build and connect everything that can be done before the clock starts."""

    @abstractmethod
    async def drain(self) -> None:
        """Process jobs until none is runnable, with completions committed."""

    @abstractmethod
    async def serve(self, stop: Callable[[], Awaitable[None]]) -> None:
        """Process jobs as they arrive until `stop()` returns."""

    def request_stop(self) -> None:  # noqa: B027 - optional hook
        """Ask a running drain/serve to stop gracefully (finish, commit completions)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class System(ABC):
    """A compared system, installed in its own schema of the benchmark database."""

    name: ClassVar[str]
    schema: ClassVar[str]
    supports_copy: ClassVar[bool] = False
    supports_raw_insert: ClassVar[bool] = False

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    # --- administration (parent process) ---------------------------------------------

    @abstractmethod
    async def install(self) -> None:
        """Create the system's schema with its own mechanism."""

    @abstractmethod
    async def reset(self) -> None:
        """Empty every table the system writes jobs or history to."""

    @abstractmethod
    async def finished_count(self) -> int:
        """Jobs that completed successfully (for the exactly-once check)."""

    async def admin(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.dsn)

    async def execute(self, *statements: str) -> None:
        conn = await self.admin()
        try:
            for sql in statements:
                await conn.execute(sql)
        finally:
            await conn.close()

    async def fetchval(self, sql: str) -> Any:
        conn = await self.admin()
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    # --- producer side --------------------------------------------------------------

    @abstractmethod
    async def open_client(self, connections: int) -> None:
        """Open what enqueueing needs, for up to `connections` concurrent callers."""

    @abstractmethod
    async def close_client(self) -> None: ...

    @abstractmethod
    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        """One job, one transaction, through the system's normal client API."""

    @abstractmethod
    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        """Many jobs in one round trip, through the system's batch API."""

    async def enqueue_copy(self, payloads: list[dict[str, Any]]) -> None:
        raise NotImplementedError(f"{self.name} has no COPY path")

    async def bulk_load(self, count: int, payload: Callable[[int], dict[str, Any]]) -> None:
        """Fixture loading (not timed): `count` jobs in chunks of the batch API."""
        await self.open_client(1)
        try:
            for start in range(0, count, 1000):
                stop = min(count, start + 1000)
                await self.enqueue_many([payload(i) for i in range(start, stop)])
        finally:
            await self.close_client()

    # --- raw table access (trigger cost, bloat fixtures) ------------------------------

    def raw_insert_sql(self) -> str:
        """Plain single-row INSERT into the jobs table, `$1` = JSON payload text."""
        raise NotImplementedError

    def jobs_table(self) -> str:
        raise NotImplementedError

    async def set_triggers(self, enabled: bool) -> None:
        verb = "ENABLE" if enabled else "DISABLE"
        await self.execute(f"ALTER TABLE {self.jobs_table()} {verb} TRIGGER USER")

    async def load_bloat(self, done_rows: int, future_rows: int) -> None:
        """Retained finished rows and far-future pending rows, then VACUUM ANALYZE."""
        raise NotImplementedError(f"{self.name} has no bloat fixture")

    # --- worker side ----------------------------------------------------------------

    @abstractmethod
    def worker(self, config: WorkerConfig, handler: Handler) -> WorkerRunner: ...

    def describe(self, config: WorkerConfig) -> str:
        return f"concurrency={config.concurrency}"

    def child_spec(self) -> dict[str, Any]:
        """What each child spec of this system adds (aiopgq-base: the tree to import)."""
        return {}

    async def analyze(self) -> None:
        """ANALYZE the system's tables after a fixture load."""
        await self.execute(f"ANALYZE {self.jobs_table()}")


def dumps(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"))
