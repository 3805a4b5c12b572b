"""SECURITY DEFINER functions run as the schema's owner: a producer or worker role must not
make them run its own code through a type it puts in its temporary schema."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from aiopgq import Queue
from aiopgq._db.migrations import code_version, migrations

from ..support.legacy_schema import install_up_to

# The attacker's payload: evil() notes whom it ran as and tries to make the session's
# role a superuser (which works only when it runs as a superuser, here the owner).
# Domains named like built-in types shadow them wherever pg_temp is searched first.
_TRAP = """
CREATE TEMP TABLE seen (who pg_catalog.text);
CREATE FUNCTION pg_temp.evil(v pg_catalog.text) RETURNS pg_catalog.bool
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pg_temp.seen VALUES (current_user::pg_catalog.text);
    BEGIN
        EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER', session_user);
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
    RETURN true;
END $$;
CREATE FUNCTION pg_temp.evil_j(v pg_catalog.jsonb) RETURNS pg_catalog.bool
LANGUAGE sql AS $$ SELECT pg_temp.evil(v::pg_catalog.text) $$;
CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (pg_temp.evil(VALUE));
CREATE DOMAIN pg_temp.jsonb AS pg_catalog.jsonb CHECK (pg_temp.evil_j(VALUE));
CREATE DOMAIN pg_temp."interval" AS pg_catalog."interval"
    CHECK (pg_temp.evil(VALUE::pg_catalog.text));
"""

# Each attack is one statement in the simple query protocol: asyncpg's own type
# introspection would meet the trap too (its queries name text unqualified).
_ATTACKS = {
    "job_status": "SELECT {s}.enqueue('t', '{{}}'::pg_catalog.jsonb); "
    "SELECT * FROM {s}.job_status((SELECT max(id) FROM {s}.jobs))",
    "enqueue_key": "SELECT {s}.enqueue('t', '{{\"a\": 1}}'::pg_catalog.jsonb, "
    "idempotency_key => 'key-1')",
    "enqueue_unique": "SELECT * FROM {s}.enqueue_unique('t', '[{{}}, {{}}]'::pg_catalog.jsonb, "
    "ARRAY['k-a', NULL])",
    "take_ticks": "INSERT INTO {s}.schedules (name, cron, timezone, missed, queue) "
    "VALUES ('tick', '* * * * *', 'UTC', 'latest', 'default'); "
    "SELECT * FROM {s}.take_ticks('tick', NULL, now(), 'w', 'default', 0, 5, "
    "ARRAY[now()], ARRAY['{{}}'])",
    "enqueue_workflow": "SELECT * FROM {s}.enqueue_workflow('w', ARRAY['t', 't'], "
    "'[[{{\"a\": 1}}], [{{}}, {{}}]]'::pg_catalog.jsonb, ARRAY['default', 'default'], "
    "ARRAY[0, 0], ARRAY[NULL, NULL]::pg_catalog.timestamptz[], ARRAY[5, 5], "
    "ARRAY[NULL, NULL]::pg_catalog.text[], ARRAY['cancel', 'run'], ARRAY[NULL, 'g'], "
    "ARRAY[1], ARRAY[0])",
    "archive_extend": "SELECT {s}.archive_extend()",
    "archive_drop": "SELECT {s}.archive_drop('done', 'infinity'::pg_catalog.timestamptz)",
}


async def _attack(conn: asyncpg.Connection, schema: str, name: str) -> None:
    await conn.execute(_ATTACKS[name].format(s=f'"{schema}"'))


@pytest.fixture
async def make_role(conn: asyncpg.Connection) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    made: list[str] = []

    async def make() -> str:
        role = f"aiopgq_attacker_{uuid.uuid4().hex[:8]}"
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
        made.append(role)
        return role

    yield make
    for role in made:
        await conn.execute(f'DROP OWNED BY "{role}"')
        await conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize(
    ("grant", "prepare", "attack"),
    [
        ("grant_producer", None, "job_status"),
        ("grant_producer", None, "enqueue_key"),
        ("grant_producer", None, "enqueue_unique"),
        ("grant_producer", None, "enqueue_workflow"),
        ("grant_worker", None, "take_ticks"),
        ("grant_worker", None, "archive_extend"),
        ("grant_worker", "archive_extend", "archive_drop"),
    ],
    ids=[
        "job_status",
        "enqueue_key",
        "enqueue_unique",
        "enqueue_workflow",
        "take_ticks",
        "archive_extend",
        "drop",
    ],
)
async def test_a_temporary_type_does_not_run_as_the_owner(
    dsn: str,
    queue: Queue,
    conn: asyncpg.Connection,
    make_role: Callable[[], Awaitable[str]],
    grant: str,
    prepare: str | None,
    attack: str,
) -> None:
    schema = queue.schema
    role = await make_role()
    await conn.execute(f'SELECT "{schema}".{grant}($1)', role)
    if prepare is not None:  # partitions for archive_drop to drop, made by the owner
        await conn.execute(f'SELECT "{schema}".{prepare}()')
    attacker = await asyncpg.connect(dsn, user=role)
    try:
        await attacker.execute(_TRAP)
        await _attack(attacker, schema, attack)
        ran_as = {r["who"] for r in await attacker.fetch("SELECT who FROM pg_temp.seen")}
    finally:
        await attacker.close()
    assert not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = $1", role)
    assert ran_as <= {role}, f"evil() ran as {ran_as - {role}}"


async def test_every_definer_function_searches_pg_temp_last(queue: Queue) -> None:
    rows = await queue.pool.fetch(
        "SELECT p.oid::regprocedure::text AS fn, p.proconfig FROM pg_proc p "
        "WHERE p.pronamespace = $1::regnamespace AND p.prosecdef",
        queue.schema,
    )
    assert len(rows) >= 5  # job_status, enqueue_unique, take_ticks, archive_extend/_drop
    for row in rows:
        paths = [c for c in row["proconfig"] or [] if c.startswith("search_path=")]
        assert paths, f"{row['fn']} is SECURITY DEFINER without SET search_path"
        last = paths[0].removeprefix("search_path=").split(",")[-1].strip()
        assert last == "pg_temp", f"{row['fn']}: {paths[0]} must end in pg_temp"


async def test_upgrade_from_19_closes_the_hole_for_roles_granted_before(
    dsn: str, schema: str, conn: asyncpg.Connection, make_role: Callable[[], Awaitable[str]]
) -> None:
    await install_up_to(conn, schema, 19)
    producer = await make_role()
    await conn.execute(f'SELECT "{schema}".grant_producer($1)', producer)
    assert await Queue(dsn, schema=schema).migrate() == [v for v, _ in migrations() if v >= 20]
    assert code_version() >= 20
    attacker = await asyncpg.connect(dsn, user=producer)
    try:
        await attacker.execute(_TRAP)
        await _attack(attacker, schema, "job_status")
        await _attack(attacker, schema, "enqueue_key")
        # enqueue() runs as its caller: evil() may run, as the attacker itself
        ran_as = {r["who"] for r in await attacker.fetch("SELECT who FROM pg_temp.seen")}
        assert ran_as <= {producer}
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await attacker.execute(f'SELECT idempotency_key FROM "{schema}".jobs')
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await attacker.execute(f'SELECT status FROM "{schema}".jobs')
    finally:
        await attacker.close()
    assert not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = $1", producer)


async def test_the_trigger_compiled_by_the_attacker_does_not_run_its_types_as_the_owner(
    dsn: str, queue: Queue, conn: asyncpg.Connection, make_role: Callable[[], Awaitable[str]]
) -> None:
    # A plain enqueue first compiles the wake-up trigger in the attacker's session (with
    # its search_path); a keyed enqueue then fires the same trigger inside enqueue_unique.
    role = await make_role()
    await conn.execute(f'SELECT "{queue.schema}".grant_producer($1)', role)
    attacker = await asyncpg.connect(dsn, user=role)
    try:
        await attacker.execute(_TRAP)
        await attacker.execute(
            f"SELECT \"{queue.schema}\".enqueue('t', '{{}}'::pg_catalog.jsonb, queue => 'q1')"
        )
        await attacker.execute(
            f"SELECT \"{queue.schema}\".enqueue('t', '{{}}'::pg_catalog.jsonb, queue => 'q2', "
            "idempotency_key => 'key-2')"
        )
        ran_as = {r["who"] for r in await attacker.fetch("SELECT who FROM pg_temp.seen")}
    finally:
        await attacker.close()
    assert not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = $1", role)
    assert ran_as <= {role}, f"evil() ran as {ran_as - {role}}"
