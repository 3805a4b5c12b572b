"""Procrastinate 3.10 (PyPI `procrastinate`), in schema `bench_procrastinate`.

Its schema is applied with its own `SchemaManager.apply_schema_async()`; its SQL uses
unqualified names, so every connection gets `search_path=bench_procrastinate`. Workers
run `App.run_worker_async(concurrency=C, wait=False)` for burst runs (the documented
knob for async tasks is `concurrency`; it fetches and finishes one job per statement).
Enqueue: `Task.defer_async` and `Task.batch_defer_async`; no COPY path. Finished jobs
stay in `procrastinate_jobs` with status `succeeded` (`delete_jobs="never"`, default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from procrastinate import App, PsycopgConnector

from benchmarks.systems.base import (
    QUEUE_NAME,
    TASK_NAME,
    Handler,
    System,
    WorkerConfig,
    WorkerRunner,
)

SCHEMA = "bench_procrastinate"
TABLES = (
    "procrastinate_jobs",
    "procrastinate_events",
    "procrastinate_periodic_defers",
    "procrastinate_workers",
)


def make_app(dsn: str, pool_size: int, handler: Handler | None = None) -> App:
    connector = PsycopgConnector(
        conninfo=dsn,
        kwargs={"options": f"-c search_path={SCHEMA}"},
        min_size=min(pool_size, 4),
        max_size=pool_size,
    )
    app = App(connector=connector)

    async def noop(**kwargs: Any) -> None:
        if handler is not None:
            await handler(kwargs)

    app.task(name=TASK_NAME, queue=QUEUE_NAME)(noop)
    return app


class ProcrastinateSystem(System):
    name = "procrastinate"
    schema = SCHEMA

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.app: App | None = None

    async def install(self) -> None:
        await self.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE", f"CREATE SCHEMA {SCHEMA}")
        app = make_app(self.dsn, 2)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def reset(self) -> None:
        tables = ", ".join(f"{SCHEMA}.{t}" for t in TABLES)
        await self.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")

    async def finished_count(self) -> int:
        return int(
            await self.fetchval(
                f"SELECT count(*) FROM {SCHEMA}.procrastinate_jobs WHERE status = 'succeeded'"
            )
        )

    def jobs_table(self) -> str:
        return f"{SCHEMA}.procrastinate_jobs"

    def _task(self) -> Any:
        assert self.app is not None
        return self.app.tasks[TASK_NAME]

    async def open_client(self, connections: int) -> None:
        self.app = make_app(self.dsn, max(2, connections))
        await self.app.open_async()

    async def close_client(self) -> None:
        if self.app is not None:
            await self.app.close_async()
            self.app = None

    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        await self._task().defer_async(**payload)

    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        await self._task().batch_defer_async(*payloads)

    async def load_bloat(self, done_rows: int, future_rows: int) -> None:
        """Succeeded jobs (kept by default) and far-future jobs; event triggers off for the load."""
        table = self.jobs_table()
        await self.execute(
            f"ALTER TABLE {table} DISABLE TRIGGER USER",
            f"""INSERT INTO {table} (queue_name, task_name, args, status, attempts)
            SELECT '{QUEUE_NAME}', '{TASK_NAME}', jsonb_build_object('i', g), 'succeeded', 1
            FROM generate_series(1, {done_rows}) g""",
            f"""INSERT INTO {table} (queue_name, task_name, args, status, scheduled_at)
            SELECT '{QUEUE_NAME}', '{TASK_NAME}', '{{"future":1}}', 'todo',
                now() + interval '30 days'
            FROM generate_series(1, {future_rows}) g""",
            f"ALTER TABLE {table} ENABLE TRIGGER USER",
            f"VACUUM ANALYZE {table}",
        )

    def worker(self, config: WorkerConfig, handler: Handler) -> WorkerRunner:
        return ProcrastinateWorker(self.dsn, config, handler)

    def describe(self, config: WorkerConfig) -> str:
        return f"concurrency={config.concurrency} (one job per fetch)"


class ProcrastinateWorker(WorkerRunner):
    def __init__(self, dsn: str, config: WorkerConfig, handler: Handler) -> None:
        self.config = config
        # Connections serve fetch/finish only, not running jobs: cap the pool.
        self.app = make_app(dsn, min(config.concurrency + 3, 50), handler)

    async def prepare(self) -> None:
        await self.app.open_async()

    def _options(self, wait: bool) -> dict[str, Any]:
        return {
            "queues": [QUEUE_NAME],
            "concurrency": self.config.concurrency,
            "wait": wait,
            "install_signal_handlers": False,
            "listen_notify": self.config.listen,
            "fetch_job_polling_interval": self.config.poll_interval,
        }

    async def drain(self) -> None:
        await self.app.run_worker_async(**self._options(wait=False))

    async def serve(self, stop: Callable[[], Awaitable[None]]) -> None:
        runner = asyncio.ensure_future(self.app.run_worker_async(**self._options(wait=True)))
        stopping = asyncio.ensure_future(stop())
        await asyncio.wait([runner, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        runner.cancel()
        try:
            await runner
        except asyncio.CancelledError:
            pass

    async def close(self) -> None:
        await self.app.close_async()
