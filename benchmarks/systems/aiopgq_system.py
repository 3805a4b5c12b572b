"""aiopgq, in schema `aiopgq_bench`, through its public API only; `aiopgq-base` is the same
system run from another checkout's aiopgq (`--baseline DIR`), in schema `aiopgq_bench_base`.

`Queue(dsn, schema=...)`, `queue.migrate()`, `@queue.task`, `task.enqueue(...)`,
`task.enqueue_many([...])`, `task.copy_many([...])` (COPY, where the tree has it),
`queue.worker(queues=..., concurrency=C)` with `run(burst=True)` for drains and
`run()` + `stop()` for serving. The raw-insert and
trigger switches touch the `jobs` table directly, as the trigger-cost workload asks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiopgq import Queue, Task
from benchmarks.processes import ChildGroup, log_dir
from benchmarks.systems.base import (
    QUEUE_NAME,
    TASK_NAME,
    Handler,
    System,
    WorkerConfig,
    WorkerRunner,
)
from benchmarks.trees import child_tree, imported_aiopgq


class AiopgqSystem(System):
    name = "aiopgq"
    schema = "aiopgq_bench"
    supports_copy = hasattr(Task, "copy_many")  # COPY path, newer trees only
    supports_raw_insert = True

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.queue: Queue | None = None
        self.task: Task[Any, Any] | None = None

    def make_queue(
        self, handler: Handler | None = None, pool_size: int = 10
    ) -> tuple[Queue, Task[Any, Any]]:
        queue = Queue(
            self.dsn, schema=self.schema, min_pool_size=min(pool_size, 2), max_pool_size=pool_size
        )

        async def noop(**payload: Any) -> None:
            if handler is not None:
                await handler(payload)

        task = queue.task(name=TASK_NAME, queue=QUEUE_NAME)(noop)
        return queue, task

    async def install(self) -> None:
        await self.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        queue, _ = self.make_queue()
        await queue.migrate()

    async def reset(self) -> None:
        await self.execute(
            f"TRUNCATE {self.schema}.jobs RESTART IDENTITY", f"DELETE FROM {self.schema}.queues"
        )

    async def finished_count(self) -> int:
        return int(
            await self.fetchval(f"SELECT count(*) FROM {self.schema}.jobs WHERE status = 'done'")
        )

    def jobs_table(self) -> str:
        return f"{self.schema}.jobs"

    def raw_insert_sql(self) -> str:
        return f"INSERT INTO {self.schema}.jobs (task, payload) VALUES ('{TASK_NAME}', $1::jsonb)"

    async def set_queue_notify(self, enabled: bool) -> None:
        """aiopgq's own per-queue switch (the trigger still runs, it sends nothing)."""
        queue, _ = self.make_queue(pool_size=1)
        async with queue:
            await queue.set_notify(QUEUE_NAME, enabled)

    async def configure_limits(self, **limits: Any) -> None:
        """A queue limit through `Queue.configure` (trees with limits; the `limits` workload)."""
        queue, _ = self.make_queue(pool_size=1)
        async with queue:
            await queue.configure(QUEUE_NAME, **limits)

    async def open_client(self, connections: int) -> None:
        self.queue, self.task = self.make_queue(pool_size=max(1, connections))
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
            f"""INSERT INTO {self.schema}.jobs (task, payload, status, attempts, created_at,
                run_at, finished_at, locked_by)
            SELECT '{TASK_NAME}', jsonb_build_object('i', g), 'done', 1,
                now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour',
                NULL
            FROM generate_series(1, {done_rows}) g""",
            f"""INSERT INTO {self.schema}.jobs (task, payload, run_at)
            SELECT '{TASK_NAME}', '{{"future":1}}', now() + interval '30 days'
            FROM generate_series(1, {future_rows}) g""",
            f"VACUUM ANALYZE {self.schema}.jobs",
        )

    def worker(self, config: WorkerConfig, handler: Handler) -> WorkerRunner:
        return AiopgqWorker(self, config, handler)

    def describe(self, config: WorkerConfig) -> str:
        return f"concurrency={config.concurrency}"


class AiopgqWorker(WorkerRunner):
    def __init__(self, system: AiopgqSystem, config: WorkerConfig, handler: Handler) -> None:
        self.config = config
        self.queue, _ = system.make_queue(handler)
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


class AiopgqBaseSystem(AiopgqSystem):
    """The same system, with the aiopgq package of another checkout (`--baseline DIR`).

    Its child processes import aiopgq from that tree (`child_spec`). The parent imports
    the current tree, so the steps that call aiopgq in the parent (migrate, fixture
    load, notify switch) run in an `admin` child of the baseline too; plain SQL (reset,
    counts, bloat rows) runs in the parent, on the baseline's own schema.
    """

    name = "aiopgq-base"
    schema = "aiopgq_bench_base"

    def __init__(self, dsn: str, tree: Path | None = None) -> None:
        super().__init__(dsn)
        self.tree = tree  # set in the parent; None in the baseline's children
        self.imported_from: str | None = None

    def child_spec(self) -> dict[str, Any]:
        return {"aiopgq_tree": str(self.tree)} if self.tree is not None else {}

    @staticmethod
    def in_baseline_process() -> bool:
        return child_tree() is not None

    def make_queue(
        self, handler: Handler | None = None, pool_size: int = 10
    ) -> tuple[Queue, Task[Any, Any]]:
        if not self.in_baseline_process():
            raise RuntimeError(f"{self.name} runs aiopgq only in a child importing the baseline")
        return super().make_queue(handler, pool_size)

    async def install(self) -> None:
        if self.in_baseline_process():
            await super().install()
            return
        report = await self.in_child("install")
        self.supports_copy = bool(report["supports_copy"])
        self.imported_from = report["aiopgq"]

    async def bulk_load(self, count: int, payload: Callable[[int], dict[str, Any]]) -> None:
        if self.in_baseline_process():
            await super().bulk_load(count, payload)
            return
        path = write_payloads(log_dir() / f"{self.name}-payloads.jsonl", count, payload)
        try:
            await self.in_child("bulk_load", timeout=60 + count / 1000, payloads=str(path))
        finally:
            path.unlink(missing_ok=True)

    async def set_queue_notify(self, enabled: bool) -> None:
        if self.in_baseline_process():
            await super().set_queue_notify(enabled)
            return
        await self.in_child("set_queue_notify", enabled=enabled)

    async def in_child(self, op: str, timeout: float = 120.0, **args: Any) -> dict[str, Any]:
        """Run `op` in an `admin` child importing the baseline's aiopgq; its result."""
        spec = {
            "role": "admin",
            "system": self.name,
            "dsn": self.dsn,
            "op": op,
            "args": args,
            "deadline": timeout,
            **self.child_spec(),
        }
        async with ChildGroup() as group:
            child = await group.start(f"{self.name}-{op}", spec)
            return await child.expect("result", timeout + 10)


async def run_admin(spec: dict[str, Any]) -> dict[str, Any]:
    """Child side of `AiopgqBaseSystem.in_child`: one step with this process's aiopgq."""
    system = AiopgqBaseSystem(spec["dsn"])
    op, args = spec["op"], spec["args"]
    if op == "install":
        await system.install()
    elif op == "bulk_load":
        payloads = read_payloads(Path(args["payloads"]))
        await system.bulk_load(len(payloads), payloads.__getitem__)
    elif op == "set_queue_notify":
        await system.set_queue_notify(bool(args["enabled"]))
    else:
        raise ValueError(f"unknown admin step {op!r}")
    return {"aiopgq": imported_aiopgq(), "supports_copy": system.supports_copy}


def write_payloads(path: Path, count: int, payload: Callable[[int], dict[str, Any]]) -> Path:
    """Fixture payloads for an admin child, one JSON object a line."""
    path.write_text("".join(json.dumps(payload(i)) + "\n" for i in range(count)))
    return path


def read_payloads(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
