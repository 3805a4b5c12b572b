"""PGQueuer 1.6 (PyPI `pgqueuer`), in schema `bench_pgqueuer` via PGQUEUER_SCHEMA.

Installed with its own `Queries.install()`. Workers use the documented building blocks:
`QueueManager` over an asyncpg pool (`AsyncpgPoolDriver`), one `entrypoint`, `run(...)`
with `batch_size` and `max_concurrent_tasks` (its throughput knobs) and
`QueueExecutionMode.drain` for burst runs. Enqueue is `Queries.enqueue` (lists = one
batch statement); PGQueuer has no COPY path. Finished jobs leave the queue table and are
logged in `pgqueuer_log`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg

SCHEMA = "bench_pgqueuer"
# PGQueuer reads its object names from the environment once per process (db_settings()).
os.environ["PGQUEUER_SCHEMA"] = SCHEMA

from pgqueuer import AsyncpgPoolDriver, Job, Queries, QueueManager  # noqa: E402
from pgqueuer.domain.settings import db_settings  # noqa: E402
from pgqueuer.domain.types import QueueExecutionMode  # noqa: E402

from benchmarks.systems.base import (  # noqa: E402
    TASK_NAME,
    Handler,
    System,
    WorkerConfig,
    WorkerRunner,
    dumps,
)

db_settings.cache_clear()


class PgQueuerSystem(System):
    name = "pgqueuer"
    schema = SCHEMA

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.pool: asyncpg.Pool | None = None
        self.queries: Queries | None = None

    async def install(self) -> None:
        conn = await self.admin()
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
            await Queries.from_asyncpg_connection(conn).install()
        finally:
            await conn.close()

    async def reset(self) -> None:
        await self.execute(
            f"TRUNCATE {SCHEMA}.pgqueuer, {SCHEMA}.pgqueuer_log, {SCHEMA}.pgqueuer_statistics "
            "RESTART IDENTITY"
        )

    async def finished_count(self) -> int:
        return int(
            await self.fetchval(
                f"SELECT count(*) FROM {SCHEMA}.pgqueuer_log WHERE status = 'successful'"
            )
        )

    def jobs_table(self) -> str:
        return f"{SCHEMA}.pgqueuer"

    async def open_client(self, connections: int) -> None:
        self.pool = await asyncpg.create_pool(
            self.dsn, min_size=connections, max_size=max(2, connections)
        )
        self.queries = Queries(AsyncpgPoolDriver(self.pool))

    async def close_client(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        self.pool = self.queries = None

    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        assert self.queries is not None
        await self.queries.enqueue(TASK_NAME, dumps(payload).encode())

    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        assert self.queries is not None
        n = len(payloads)
        await self.queries.enqueue([TASK_NAME] * n, [dumps(p).encode() for p in payloads], [0] * n)

    async def load_bloat(self, done_rows: int, future_rows: int) -> None:
        """History rows in `pgqueuer_log` (PGQueuer deletes finished jobs) + future jobs."""
        await self.execute(
            f"""INSERT INTO {SCHEMA}.pgqueuer_log (created, job_id, status, priority, entrypoint)
            SELECT now() - interval '1 day', g, 'successful', 0, '{TASK_NAME}'
            FROM generate_series(1, {done_rows}) g""",
        )
        await self.open_client(1)
        try:
            assert self.queries is not None
            later = timedelta(days=30)
            for start in range(0, future_rows, 1000):
                n = min(1000, future_rows - start)
                await self.queries.enqueue(
                    [TASK_NAME] * n, [b'{"future":1}'] * n, [0] * n, [later] * n
                )
        finally:
            await self.close_client()
        await self.execute(
            f"VACUUM ANALYZE {SCHEMA}.pgqueuer", f"VACUUM ANALYZE {SCHEMA}.pgqueuer_log"
        )

    def worker(self, config: WorkerConfig, handler: Handler) -> WorkerRunner:
        return PgQueuerWorker(self.dsn, config, handler)

    def describe(self, config: WorkerConfig) -> str:
        return f"batch_size={config.batch}, max_concurrent_tasks={config.concurrency}"


class PgQueuerWorker(WorkerRunner):
    def __init__(self, dsn: str, config: WorkerConfig, handler: Handler) -> None:
        self.dsn = dsn
        self.config = config
        self.handler = handler
        self.pool: asyncpg.Pool | None = None
        self.qm: QueueManager | None = None

    async def prepare(self) -> None:
        self.pool = await asyncpg.create_pool(self.dsn, min_size=4, max_size=8)
        self.qm = QueueManager(Queries(AsyncpgPoolDriver(self.pool)))
        handler = self.handler

        @self.qm.entrypoint(TASK_NAME)
        async def noop(job: Job) -> None:
            await handler(json.loads(job.payload) if job.payload else {})

    async def _run(self, mode: QueueExecutionMode) -> None:
        assert self.qm is not None
        await self.qm.run(
            batch_size=self.config.batch,
            max_concurrent_tasks=self.config.concurrency,
            mode=mode,
            dequeue_timeout=timedelta(seconds=self.config.poll_interval),
        )

    async def drain(self) -> None:
        await self._run(QueueExecutionMode.drain)

    async def serve(self, stop: Callable[[], Awaitable[None]]) -> None:
        import asyncio

        assert self.qm is not None
        runner = asyncio.ensure_future(self._run(QueueExecutionMode.continuous))
        stopping = asyncio.ensure_future(stop())
        await asyncio.wait([runner, stopping], return_when=asyncio.FIRST_COMPLETED)
        self.qm.shutdown.set()
        stopping.cancel()
        await runner

    def request_stop(self) -> None:
        if self.qm is not None:
            self.qm.shutdown.set()

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
