"""The baseline: a bare asyncpg loop, no framework.

Seed schema, canonical `FOR UPDATE SKIP LOCKED` dequeue with `LIMIT batch`, completion
by `UPDATE ... WHERE id = ANY($1)`. For latency it has a LISTEN connection and a
statement-level insert trigger that NOTIFYs, so it is a fair "minimal correct" baseline.
Handlers of a batch run one after another (no-op jobs); the RSS test runs them together.

A drain is strict: the dequeue returns only the ids and the handler is called once per
batch with the batch's size (the recorder counts them), so the loop does no Python work
per job beyond building the id list: the ceiling a framework is measured against.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from benchmarks.systems.base import (
    QUEUE_NAME,
    TASK_NAME,
    Handler,
    System,
    WorkerConfig,
    WorkerRunner,
    dumps,
)

if TYPE_CHECKING:
    PoolConnection = asyncpg.pool.PoolConnectionProxy[asyncpg.Record]


@dataclass(frozen=True)
class Flavor:
    """A bare loop's schema and statements (each flavor in its own schema)."""

    schema: str
    channel: str
    install: str
    dequeue: str
    complete: str

    @property
    def dequeue_ids(self) -> str:  # the strict drain's dequeue: only the ids come back
        return self.dequeue.replace("RETURNING j.id, j.task, j.payload", "RETURNING j.id")


def _install(schema: str, channel: str, columns: str = "", indexes: str = "") -> str:
    return f"""
CREATE SCHEMA {schema};
SET search_path TO {schema};
CREATE TYPE job_status AS ENUM ('pending','running','done','failed');
CREATE TABLE jobs (
    id bigserial primary key, queue text not null default 'default', task text not null,
    payload jsonb not null default '{{}}', status job_status not null default 'pending',
    priority int not null default 0, attempts int not null default 0,
    max_attempts int not null default 5, run_at timestamptz not null default now(),
    locked_at timestamptz, locked_by text, last_error text,
    created_at timestamptz not null default now(){columns});
CREATE INDEX ON jobs (queue, priority DESC, run_at, id) WHERE status = 'pending';{indexes}
CREATE FUNCTION notify_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('{channel}', ''); RETURN NULL; END $$;
CREATE TRIGGER jobs_notify AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_jobs();
"""


_DEQUEUE = """
WITH next AS (
    SELECT id FROM jobs
    WHERE status = 'pending' AND queue = $1 AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED)
UPDATE jobs j SET status = 'running', locked_at = now(), locked_by = $3,
    attempts = j.attempts + 1{lease}
FROM next WHERE j.id = next.id
RETURNING j.id, j.task, j.payload
"""

BARE = Flavor(
    schema="bench_bare",
    channel="bench_bare_jobs",
    install=_install("bench_bare", "bench_bare_jobs"),
    dequeue=_DEQUEUE.format(lease=""),
    complete="UPDATE jobs SET status = 'done' WHERE id = ANY($1::bigint[])",
)

# The same loop with the two things a crash-safe queue with retention keeps per job and
# the bare loop does not: a lease (heartbeat_at, indexed so that expired ones are found
# without a scan) and a finish time (indexed so that retention deletes old rows without
# a scan). Each costs an index entry per job, at the claim and at the finish: this
# flavor measures what that costs, apart from any framework.
LEASED = Flavor(
    schema="bench_bare_leased",
    channel="bench_bare_leased_jobs",
    install=_install(
        "bench_bare_leased",
        "bench_bare_leased_jobs",
        columns=", heartbeat_at timestamptz, finished_at timestamptz",
        indexes="""
CREATE INDEX ON jobs (heartbeat_at) WHERE heartbeat_at IS NOT NULL;
CREATE INDEX ON jobs (status, finished_at) WHERE status IN ('done', 'failed');""",
    ),
    dequeue=_DEQUEUE.format(lease=", heartbeat_at = now()"),
    complete="UPDATE jobs SET status = 'done', finished_at = now(), heartbeat_at = NULL "
    "WHERE id = ANY($1::bigint[])",
)
INSERT_ONE = "INSERT INTO jobs (task, payload) VALUES ($1, $2::jsonb)"
INSERT_MANY = "INSERT INTO jobs (task, payload) SELECT $1, p FROM unnest($2::jsonb[]) AS p"


async def _no_reset(conn: asyncpg.Connection) -> None:
    return None


def _settings(flavor: Flavor) -> dict[str, str]:
    return {"search_path": flavor.schema}


class BareSystem(System):
    name = "bare"
    flavor = BARE
    schema = BARE.schema
    supports_copy = True
    supports_raw_insert = True

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.pool: asyncpg.Pool | None = None

    async def install(self) -> None:
        await self.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE", self.flavor.install)

    async def reset(self) -> None:
        await self.execute(f"TRUNCATE {self.schema}.jobs RESTART IDENTITY")

    async def finished_count(self) -> int:
        done = f"SELECT count(*) FROM {self.schema}.jobs WHERE status='done'"
        return int(await self.fetchval(done))

    def jobs_table(self) -> str:
        return f"{self.schema}.jobs"

    def raw_insert_sql(self) -> str:
        return f"INSERT INTO {self.schema}.jobs (task, payload) VALUES ('{TASK_NAME}', $1::jsonb)"

    async def open_client(self, connections: int) -> None:
        # Minimal client: this code never changes session state, so the pool skips
        # asyncpg's default reset query (one extra round trip per release).
        self.pool = await asyncpg.create_pool(
            self.dsn,
            min_size=connections,
            max_size=connections,
            server_settings=_settings(self.flavor),
            reset=_no_reset,
        )

    async def close_client(self) -> None:
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    async def enqueue_one(self, payload: dict[str, Any]) -> None:
        assert self.pool is not None
        await self.pool.execute(INSERT_ONE, TASK_NAME, dumps(payload))

    async def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        assert self.pool is not None
        await self.pool.execute(INSERT_MANY, TASK_NAME, [dumps(p) for p in payloads])

    async def enqueue_copy(self, payloads: list[dict[str, Any]]) -> None:
        assert self.pool is not None
        records = [(TASK_NAME, dumps(p)) for p in payloads]
        async with self.pool.acquire() as conn:
            await conn.copy_records_to_table(
                "jobs", records=records, columns=["task", "payload"], schema_name=self.schema
            )

    async def bulk_load(self, count: int, payload: Callable[[int], dict[str, Any]]) -> None:
        conn = await self.admin()
        try:
            records = [(TASK_NAME, dumps(payload(i))) for i in range(count)]
            await conn.copy_records_to_table(
                "jobs", records=records, columns=["task", "payload"], schema_name=self.schema
            )
        finally:
            await conn.close()

    async def load_bloat(self, done_rows: int, future_rows: int) -> None:
        await self.execute(
            f"""INSERT INTO {self.schema}.jobs (task, payload, status, attempts, locked_at,
                locked_by, created_at, run_at)
            SELECT '{TASK_NAME}', jsonb_build_object('i', g), 'done', 1, now(), 'old',
                now() - interval '1 day', now() - interval '1 day'
            FROM generate_series(1, {done_rows}) g""",
            f"""INSERT INTO {self.schema}.jobs (task, payload, run_at)
            SELECT '{TASK_NAME}', jsonb_build_object('i', g), now() + interval '30 days'
            FROM generate_series(1, {future_rows}) g""",
            f"VACUUM ANALYZE {self.schema}.jobs",
        )

    def worker(self, config: WorkerConfig, handler: Handler) -> WorkerRunner:
        return BareWorker(self.dsn, config, handler, self.flavor)

    def describe(self, config: WorkerConfig) -> str:
        return f"1 consumer loop x batch {config.concurrency}"


class BareWorker(WorkerRunner):
    """`consumers` loops per process (default 1), each dequeueing `LIMIT batch`."""

    def __init__(
        self, dsn: str, config: WorkerConfig, handler: Handler, flavor: Flavor = BARE
    ) -> None:
        self.dsn = dsn
        self.flavor = flavor
        self.config = config
        self.handler = handler
        self.batch = config.concurrency
        self.consumers = int(config.extra.get("consumers", 1))
        self.concurrent_handlers = bool(config.extra.get("concurrent_handlers", False))
        self.worker_id = f"bare-{os.getpid()}"
        self.pool: asyncpg.Pool | None = None
        self.listener: asyncpg.Connection | None = None
        self.wake = asyncio.Event()

    async def prepare(self) -> None:
        self.pool = await asyncpg.create_pool(
            self.dsn,
            min_size=self.consumers,
            max_size=self.consumers,
            server_settings=_settings(self.flavor),
        )
        if self.config.mode == "serve" and self.config.listen:
            self.listener = await asyncpg.connect(self.dsn)
            await self.listener.add_listener(self.flavor.channel, lambda *_: self.wake.set())

    async def _run_strict_batch(self, conn: PoolConnection) -> int:
        rows = await conn.fetch(self.flavor.dequeue_ids, QUEUE_NAME, self.batch, self.worker_id)
        if not rows:
            return 0
        await self.handler({"batch": len(rows)})
        await conn.execute(self.flavor.complete, [r[0] for r in rows])
        return len(rows)

    async def _run_batch(self, conn: PoolConnection) -> int:
        rows = await conn.fetch(self.flavor.dequeue, QUEUE_NAME, self.batch, self.worker_id)
        if not rows:
            return 0
        if self.concurrent_handlers:
            await asyncio.gather(*(self.handler(json.loads(r["payload"])) for r in rows))
        else:
            for r in rows:
                await self.handler(json.loads(r["payload"]))
        await conn.execute(self.flavor.complete, [r["id"] for r in rows])
        return len(rows)

    async def _consume_until_empty(self) -> None:
        assert self.pool is not None
        run_batch = self._run_batch if self.concurrent_handlers else self._run_strict_batch
        async with self.pool.acquire() as conn:
            while await run_batch(conn):
                pass

    async def drain(self) -> None:
        await asyncio.gather(*(self._consume_until_empty() for _ in range(self.consumers)))

    async def serve(self, stop: Callable[[], Awaitable[None]]) -> None:
        stopping = asyncio.ensure_future(stop())

        async def consume() -> None:
            assert self.pool is not None
            async with self.pool.acquire() as conn:
                while not stopping.done():
                    self.wake.clear()
                    if await self._run_batch(conn):
                        continue
                    waker = asyncio.ensure_future(self.wake.wait())
                    await asyncio.wait(
                        [waker, stopping],
                        timeout=self.config.poll_interval,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    waker.cancel()

        try:
            await asyncio.gather(*(consume() for _ in range(self.consumers)))
        finally:
            stopping.cancel()

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.close()
        if self.pool is not None:
            await self.pool.close()


class LeasedBareSystem(BareSystem):
    """The bare loop plus a lease and a finish time, each indexed (`LEASED`)."""

    name = "bare-leased"
    flavor = LEASED
    schema = LEASED.schema
