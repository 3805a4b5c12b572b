"""Schemas as released versions left them, built by the migrations those versions
shipped (migrations_v20/, kept out of the package), to test upgrades from them."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

from aiopgq._db.statements import done_channel, quote_identifier

LEGACY = Path(__file__).resolve().parent / "migrations_v20"


def legacy_migrations() -> list[tuple[int, Path]]:
    found = []
    for path in LEGACY.glob("*.sql"):
        match = re.match(r"^(\d{4})_", path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


async def install_up_to(
    conn: asyncpg.Connection, schema: str, last: int, *, after: int = 0
) -> None:
    """The schema as the aiopgq of version `last` left it; with `after`, upgrade a schema
    at version `after` (made by this) to `last` the way that aiopgq did."""
    quoted = quote_identifier(schema)
    if after == 0:
        await conn.execute(
            f"CREATE SCHEMA {quoted}; CREATE TABLE {quoted}.schema_version "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    for version, path in legacy_migrations():
        if after < version <= last:
            text = path.read_text(encoding="utf-8")
            text = text.replace("{{schema_name}}", schema)
            text = text.replace("{{done_channel}}", f"'{done_channel(schema)}'")
            await conn.execute(text.replace("{{schema}}", quoted))
            await conn.execute(f"INSERT INTO {quoted}.schema_version VALUES ($1)", version)


async def catalog(conn: asyncpg.Connection, schema: str) -> dict[str, list[str]]:
    """What a schema is, as comparable text: tables and columns, constraints, indexes,
    functions (whole definitions, ACLs and settings), triggers, types, and grants on
    tables and columns. The schema's name is replaced by `S`. NOT NULL is compared as the
    columns' attnotnull: PostgreSQL 18's names of NOT NULL constraints depend on how a
    table was made (LIKE copies them), not on what it is."""
    queries = {
        "columns": """SELECT c.relname || '.' || a.attname || ' ' || format_type(a.atttypid,
                a.atttypmod) || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(d.adbin,
                d.adrelid), '') || ' ' || a.attidentity::text || ' ' || coalesce(a.attacl::text, '')
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped""",
        "relations": """SELECT relname || ' ' || relkind::text || ' '
                || coalesce(reloptions::text, '') || ' ' || coalesce(relacl::text, '')
                || ' ' || relispartition || ' '
                || coalesce(pg_get_expr(relpartbound, oid), '')
            FROM pg_class WHERE relnamespace = $1::regnamespace""",
        "constraints": """SELECT conrelid::regclass || ' ' || conname || ' '
                || pg_get_constraintdef(oid) || ' ' || convalidated
                || ' ' || coalesce(obj_description(oid, 'pg_constraint'), '')
            FROM pg_constraint WHERE connamespace = $1::regnamespace
              AND contype <> 'n'""",
        "indexes": "SELECT indexdef FROM pg_indexes WHERE schemaname = $1",
        "functions": """SELECT pg_get_functiondef(oid) || ' ' || coalesce(proacl::text, '')
            FROM pg_proc WHERE pronamespace = $1::regnamespace""",
        "triggers": """SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t
            JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal""",
        "types": """SELECT typname || ' ' || coalesce((SELECT string_agg(enumlabel, ','
                ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = t.oid), '')
            FROM pg_type t WHERE typnamespace = $1::regnamespace AND typtype = 'e'""",
    }
    found = {}
    for what, query in queries.items():
        rows = await conn.fetch(query, schema)
        found[what] = sorted(str(row[0]).replace(schema, "S") for row in rows)
    return found
