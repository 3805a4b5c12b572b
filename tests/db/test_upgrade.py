"""Upgrading to schema version 13 (workers registry, trace context) keeps the roles that
an older version granted working: the migration extends their grants."""

from __future__ import annotations

import uuid

import asyncpg
from opentelemetry.sdk.trace import TracerProvider

from aiopgq import JobStatus, Queue
from aiopgq._db.migrations import migrations
from aiopgq._db.statements import render
from aiopgq.tracing import Tracing

from ..support.helpers import eventually


async def install_up_to(conn: asyncpg.Connection, schema: str, last: int) -> None:
    """The schema as the aiopgq of version `last` left it."""
    quoted = f'"{schema}"'
    await conn.execute(
        f"CREATE SCHEMA {quoted}; CREATE TABLE {quoted}.schema_version "
        "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for version, name in migrations():
        if version <= last:
            await conn.execute(render(f"migrations/{name}", schema))
            await conn.execute(f"INSERT INTO {quoted}.schema_version VALUES ($1)", version)


async def test_roles_granted_before_version_13_trace_and_register_after_it(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    await install_up_to(conn, schema, 8)
    suffix = uuid.uuid4().hex[:8]
    producer, worker = f"aiopgq_producer_{suffix}", f"aiopgq_worker_{suffix}"
    for role in (producer, worker):
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
    await conn.execute(f'SELECT "{schema}".grant_producer($1)', producer)  # version 2's
    await conn.execute(f'SELECT "{schema}".grant_worker($1)', worker)
    try:
        assert 13 in await Queue(dsn, schema=schema).migrate()
        tracing = Tracing(tracer_provider=TracerProvider())
        producing = Queue(
            dsn, schema=schema, connect_kwargs={"user": producer}, observers=[tracing]
        )
        working = Queue(dsn, schema=schema, connect_kwargs={"user": worker})

        @working.task(name="t")
        async def t() -> None:
            pass

        async with producing, working:
            with tracing._tracer.start_as_current_span("request"):
                job = await producing.enqueue("t", {})  # writes trace_context
            runner = working.worker(heartbeat_interval=0.1)
            async with runner:

                async def registered() -> bool:
                    return bool(
                        await conn.fetchval(
                            f'SELECT count(*) FROM "{schema}".workers WHERE id = $1', runner.id
                        )
                    )

                await eventually(registered)

                async def done() -> bool:
                    return (await working.get_job(job.id)).status is JobStatus.DONE

                await eventually(done)
        assert await conn.fetchval(
            f'SELECT trace_context IS NOT NULL FROM "{schema}".jobs WHERE id = $1', job.id
        )
    finally:
        for role in (producer, worker):
            await conn.execute(f'DROP OWNED BY "{role}"')
            await conn.execute(f'DROP ROLE "{role}"')
