"""aiopgq, in schema `aiopgq_bench`, through its public API only.

`Queue(dsn, schema=...)`, `queue.migrate()`, `@queue.task`, `task.enqueue(...)`,
`task.enqueue_many([...])`, `task.copy_many([...])` (COPY, where the tree has it),
`queue.worker(queues=..., concurrency=C)` with `run(burst=True)` for drains and
`run()` + `stop()` for serving. The raw-insert and
trigger switches touch the `jobs` table directly, as the trigger-cost workload asks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiopgq import Queue, Task
from benchmarks.systems.base import (
    QUEUE_NAME,
    TASK_NAME,
    Handler,
    System,
    WorkerConfig,
    WorkerRunner,
)

SCHEMA = "aiopgq_bench"


def make_queue(
    dsn: str, handler: Handler | None = None, pool_size: int = 10
) -> tuple[Queue, Task[Any, Any]]:
    queue = Queue(dsn, schema=SCHEMA, min_pool_size=min(pool_size, 2), max_pool_size=pool_size)

    async def noop(**payload: Any) -> None:
        if handler is not None:
            await handler(payload)

    task = queue.task(name=TASK_NAME, queue=QUEUE_NAME)(noop)
    return queue, task


class AiopgqSystem(System):
    name = "aiopgq"
    schema = SCHEMA
    supports_copy = hasattr(Task, "copy_many")  # COPY path, newer trees only
    supports_raw_insert = True

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.queue: Queue | None = None
        self.task: Task[Any, Any] | None = None

    async def install(self) -> None:
        await self.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        queue, _ = make_queue(self.dsn)
        await queue.migrate()

    async def reset(self) -> None:
        await self.execute(
            f"TRUNCATE {SCHEMA}.jobs RESTART IDENTITY", f"DELETE FROM {SCHEMA}.queues"
        )

    async def finished_count(self) -> int:
        return int(await self.fetchval(f"SELECT count(*) FROM {SCHEMA}.jobs WHERE status = 'done'"))

    def jobs_table(self) -> str:
        return f"{SCHEMA}.jobs"

    def raw_insert_sql(self) -> str:
        return f"INSERT INTO {SCHEMA}.jobs (task, payload) VALUES ('{TASK_NAME}', $1::jsonb)"

    async def set_queue_notify(self, enabled: bool) -> None:
        """aiopgq's own per-queue switch (the trigger still runs, it sends nothing)."""
        queue, _ = make_queue(self.dsn, pool_size=1)
        async with queue:
            await queue.set_notify(QUEUE_NAME, enabled)

    async def open_client(self, connections: int) -> None:
        self.queue, self.task = make_queue(self.dsn, pool_size=max(1, connections))
        await self.queue.open()

    async def close_client(self) -> None:
        if self.queue is not None:
            await self.queue.close()
        self.queue = self.task = None

    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        assert self.task is not None
        await self.task.enqueue(**payload)

    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        assert self.task is not None
        await self.task.enqueue_many(payloads)

    async def enqueue_copy(self, payloads: list[dict[str, Any]]) -> None:
        assert self.task is not None
        await self.task.copy_many(payloads)

    async def load_bloat(self, done_rows: int, future_rows: int) -> None:
        await self.execute(
            f"""INSERT INTO {SCHEMA}.jobs (task, payload, status, attempts, created_at,
                run_at, finished_at, locked_by)
            SELECT '{TASK_NAME}', jsonb_build_object('i', g), 'done', 1,
                now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour',
                NULL
            FROM generate_series(1, {done_rows}) g""",
            f"""INSERT INTO {SCHEMA}.jobs (task, payload, run_at)
            SELECT '{TASK_NAME}', '{{"future":1}}', now() + interval '30 days'
            FROM generate_series(1, {future_rows}) g""",
            f"VACUUM ANALYZE {SCHEMA}.jobs",
        )

    def worker(self, config: WorkerConfig, handler: Handler) -> WorkerRunner:
        return AiopgqWorker(self.dsn, config, handler)

    def describe(self, config: WorkerConfig) -> str:
        return f"concurrency={config.concurrency}"


class AiopgqWorker(WorkerRunner):
    def __init__(self, dsn: str, config: WorkerConfig, handler: Handler) -> None:
        self.config = config
        self.queue, _ = make_queue(dsn, handler)
        self.worker = self.queue.worker(
            queues=[QUEUE_NAME],
            concurrency=config.concurrency,
            poll_interval=config.poll_interval,
            listen=config.listen,
            **config.extra.get("aiopgq", {}),
        )

    async def prepare(self) -> None:
        await self.queue.open()

    async def drain(self) -> None:
        await self.worker.run(burst=True)

    async def serve(self, stop: Callable[[], Awaitable[None]]) -> None:
        runner = asyncio.ensure_future(self.worker.run())
        stopping = asyncio.ensure_future(stop())
        await asyncio.wait([runner, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        self.worker.stop()
        await runner

    def request_stop(self) -> None:
        self.worker.stop()

    async def close(self) -> None:
        await self.queue.close()
