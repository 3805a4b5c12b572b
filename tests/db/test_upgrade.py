"""Upgrades: a schema that released versions left (19, 20) ends identical to a fresh
install, an older one is refused with what to do, and roles granted before keep working."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from opentelemetry.sdk.trace import TracerProvider

from aiopgq import JobStatus, Queue, SchemaError
from aiopgq._db.migrations import baseline, migrate, migrations, oldest_upgradable
from aiopgq.tracing import Tracing

from ..support.helpers import eventually
from ..support.legacy_schema import catalog, install_up_to


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
        await install_up_to(conn, schema, 19, after=8)
        assert await Queue(dsn, schema=schema).migrate() == [v for v, _ in migrations() if v >= 20]
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


@pytest.mark.parametrize("installed", [19, 20])
async def test_an_upgraded_schema_is_the_schema_a_fresh_install_makes(
    dsn: str, schema: str, conn: asyncpg.Connection, installed: int
) -> None:
    fresh = f"{schema}_fresh"
    await install_up_to(conn, schema, installed)
    await conn.execute(f"INSERT INTO \"{schema}\".jobs (task, payload) VALUES ('kept', '{{}}')")
    try:
        assert await migrate(conn, fresh) == [
            baseline()[0],
            *(v for v, _ in migrations() if v > baseline()[0]),
        ]
        applied = await migrate(conn, schema)
        assert applied == [v for v, _ in migrations() if v > installed]
        assert await catalog(conn, schema) == await catalog(conn, fresh)
        assert await conn.fetchval(f'SELECT task FROM "{schema}".jobs') == "kept"
        assert await migrate(conn, schema) == [] and await migrate(conn, fresh) == []
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{fresh}" CASCADE')


async def test_a_schema_older_than_the_upgrades_is_refused_with_what_to_do(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    await install_up_to(conn, schema, oldest_upgradable() - 1)
    with pytest.raises(
        SchemaError, match=rf"older than this aiopgq upgrades .*version {oldest_upgradable()}"
    ):
        await Queue(dsn, schema=schema).migrate()
    assert await conn.fetchval(f'SELECT max(version) FROM "{schema}".schema_version') == 18


async def test_changed_function_files_are_applied_again(
    schema: str, conn: asyncpg.Connection
) -> None:
    await migrate(conn, schema)
    await conn.execute(
        f'CREATE OR REPLACE FUNCTION "{schema}".snoozes(metadata jsonb) '
        "RETURNS integer LANGUAGE sql AS 'SELECT 42'"
    )
    assert await conn.fetchval(f"SELECT \"{schema}\".snoozes('{{}}')") == 42
    await migrate(conn, schema)  # its file did not change: left alone
    assert await conn.fetchval(f"SELECT \"{schema}\".snoozes('{{}}')") == 42
    await conn.execute(f"UPDATE \"{schema}\".schema_functions SET checksum = ''")
    assert await migrate(conn, schema) == []
    assert await conn.fetchval(f"SELECT \"{schema}\".snoozes('{{}}')") == 0


async def test_a_producer_enqueues_through_sql_with_a_concurrency_key(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    await migrate(conn, schema)
    producer = f"aiopgq_producer_{uuid.uuid4().hex[:8]}"
    await conn.execute(f'CREATE ROLE "{producer}" LOGIN')
    await conn.execute(f'SELECT "{schema}".grant_producer($1)', producer)
    as_producer = await asyncpg.connect(dsn, user=producer)
    try:
        plain = await as_producer.fetchval(f"SELECT \"{schema}\".enqueue('t', '{{}}')")
        keyed = await as_producer.fetchval(
            f"SELECT \"{schema}\".enqueue('t', '{{}}', concurrency_key => 'customer-1')"
        )
        rows = await conn.fetch(f'SELECT id, concurrency_key FROM "{schema}".jobs ORDER BY id')
        assert [(r["id"], r["concurrency_key"]) for r in rows] == [
            (plain, None),
            (keyed, "customer-1"),
        ]
    finally:
        await as_producer.close()
        await conn.execute(f'DROP OWNED BY "{producer}"')
        await conn.execute(f'DROP ROLE "{producer}"')


async def test_a_version_22_schema_loses_the_claim_signatures_without_declared_limits(
    dsn: str, schema: str, conn: asyncpg.Connection
) -> None:
    # Version 22 had claim_limited() without its last argument (the key limits a
    # worker's tasks declare) and lock_limited() likewise; left beside the new ones,
    # they would be overloads the catalog of a fresh install does not have.
    fresh = f"{schema}_fresh"
    await migrate(conn, schema)
    quoted = f'"{schema}"'
    await conn.execute(
        f"CREATE FUNCTION {quoted}.claim_limited(text[], integer, text, boolean, bigint[], "
        "integer[], text[]) RETURNS SETOF record LANGUAGE sql AS 'SELECT NULL::record'; "
        f"CREATE FUNCTION {quoted}.lock_limited(text, text, boolean) RETURNS text "
        "LANGUAGE sql AS 'SELECT NULL::text'; "
        f"DELETE FROM {quoted}.schema_version WHERE version > 22; "
        f"INSERT INTO {quoted}.schema_version (version) VALUES (22) ON CONFLICT DO NOTHING"
    )
    # What migrations 24 to 29 made goes, so that they run again (24's enum label stays:
    # ADD VALUE IF NOT EXISTS passes it).
    await conn.execute(
        f"DROP TABLE {quoted}.job_timers; "
        f"DROP TABLE {quoted}.job_steps, {quoted}.job_waits, {quoted}.events; "
        f"DROP FUNCTION {quoted}.emit_event(text, jsonb); "
        f"DROP FUNCTION {quoted}.wait_event(bigint, integer, text, integer, text, timestamptz, "
        "timestamptz); "
        f"DROP TABLE {quoted}.workflows, {quoted}.workflow_groups, {quoted}.workflow_jobs, "
        f"{quoted}.workflow_count_marks; "
        f"DROP FUNCTION {quoted}.create_workflow(text, bigint[], integer[], integer[], text[], "
        "text[], bigint[], bigint[]); "
        f"DROP FUNCTION {quoted}.enqueue_workflow(text, text[], jsonb, text[], integer[], "
        "timestamptz[], integer[], text[], text[], text[], integer[], integer[]); "
        f"DROP TABLE {quoted}.job_dependencies; DROP TABLE {quoted}.sequences; "
        f"DROP FUNCTION {quoted}.add_dependencies(bigint[], bigint[], text); "
        f"DROP FUNCTION {quoted}.add_to_sequence(bigint[], text); "
        f"DROP FUNCTION {quoted}.enqueue(text, jsonb, text, timestamptz, integer, integer, "
        "text, interval, text, text, bigint[], text, text)"
    )
    await conn.execute(f"INSERT INTO {quoted}.queues (queue, key_concurrency) VALUES ('q', 1)")
    try:
        assert await migrate(conn, schema) == [v for v, _ in migrations() if v > 22]
        await migrate(conn, fresh)
        assert await catalog(conn, schema) == await catalog(conn, fresh)
        queue = Queue(dsn, schema=schema)
        ran: list[str] = []

        @queue.task(name="t", queue="q", key_concurrency=2)
        async def t() -> None:
            ran.append("t")

        async with queue:
            await queue.enqueue_many("t", [{}] * 3, queue="q", concurrency_key="k")
            await queue.worker(poll_interval=0.1).run(burst=True)
        assert ran == ["t"] * 3
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{fresh}" CASCADE')
