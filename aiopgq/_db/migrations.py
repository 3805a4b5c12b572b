"""Migrations: a baseline for fresh installs, numbered SQL files that upgrade installed
schemas, then the functions of sql/functions/; the version kept in the database."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import re
import zlib
from collections.abc import Iterator

import asyncpg

from .._errors import SchemaError
from .connection import Connection
from .statements import SQL_DIR, quote_identifier, render, validate_identifier

logger = logging.getLogger("aiopgq.schema")

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_BASELINE_NAME = re.compile(r"^baseline_(\d{4})\.sql$")


@functools.cache
def migrations() -> list[tuple[int, str]]:
    """(version, file name) of every numbered migration shipped with this aiopgq, in order:
    they upgrade an installed schema from the version before the first one.

    Read once per process: the version a running process needs does not change.
    """
    found = []
    for path in (SQL_DIR / "migrations").iterdir():
        match = _MIGRATION_NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path.name))
    return sorted(found)


@functools.cache
def baseline() -> tuple[int, str]:
    """(version, file name) of the baseline: the whole schema at that version, tables and
    data without the functions, for a fresh install."""
    found = []
    for path in (SQL_DIR / "migrations").iterdir():
        match = _BASELINE_NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path.name))
    return max(found)


@functools.cache
def function_files() -> list[str]:
    """The files of sql/functions/, in the order they are applied (by name)."""
    return sorted(path.name for path in (SQL_DIR / "functions").glob("*.sql"))


def code_version() -> int:
    """The schema version this aiopgq needs."""
    return max(baseline()[0], migrations()[-1][0])


def oldest_upgradable() -> int:
    """The oldest installed version the numbered migrations upgrade."""
    return migrations()[0][0] - 1


def _lock_key(schema: str) -> int:
    # A stable 32-bit key per schema for pg_advisory_xact_lock(int, int).
    return zlib.crc32(schema.encode()) & 0x7FFFFFFF


async def database_version(conn: Connection, schema: str) -> int | None:
    """The schema version recorded in the database, or None when not installed."""
    validate_identifier(schema)
    table = await conn.fetchval(
        "SELECT to_regclass($1)", f"{quote_identifier(schema)}.schema_version"
    )
    if table is None:
        return None
    version: int | None = await conn.fetchval(
        f"SELECT max(version) FROM {quote_identifier(schema)}.schema_version"
    )
    return version


async def migrate(conn: Connection, schema: str) -> list[int]:
    """Apply the missing migrations; safe to run concurrently and repeatedly.

    Returns the versions applied by this call (empty when already up to date).
    """
    quoted = quote_identifier(schema)
    applied: list[int] = []
    async with conn.transaction():
        # Two `migrate` runs at once: the second waits here, then finds nothing to do.
        await conn.execute("SELECT pg_advisory_xact_lock(1634758257, $1)", _lock_key(schema))
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quoted}.schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await database_version(conn, schema) or 0
        if current > code_version():
            raise SchemaError(_newer_message(schema, current))
        if current == 0:
            version, name = baseline()
            logger.info("installing schema %s at version %s (%s)", schema, version, name)
            await conn.execute(render(f"migrations/{name}", schema))
            await conn.execute(
                f"INSERT INTO {quoted}.schema_version (version) VALUES ($1)", version
            )
            applied.append(version)
            current = version
        elif current < oldest_upgradable():
            raise SchemaError(_older_message(schema, current))
        for version, name in migrations():
            if version <= current:
                continue
            logger.info("applying migration %s to schema %s", name, schema)
            await conn.execute(render(f"migrations/{name}", schema))
            await conn.execute(
                f"INSERT INTO {quoted}.schema_version (version) VALUES ($1)", version
            )
            applied.append(version)
        await _apply_functions(conn, schema, every=bool(applied))
    return applied


async def _apply_functions(conn: Connection, schema: str, *, every: bool) -> None:
    """(Re)create the functions of sql/functions/ whose file changed since they were last
    applied to this schema, or all of them (`every`) after a migration, which may have
    dropped one or what it depends on. Each file is idempotent (CREATE OR REPLACE)."""
    quoted = quote_identifier(schema)
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {quoted}.schema_functions ("
        "file text PRIMARY KEY, checksum text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    known = dict(await conn.fetch(f"SELECT file, checksum FROM {quoted}.schema_functions"))
    for name in function_files():
        text = render(f"functions/{name}", schema)
        checksum = hashlib.sha256(text.encode()).hexdigest()
        if not every and known.get(name) == checksum:
            continue
        logger.info("applying functions/%s to schema %s", name, schema)
        await conn.execute(text)
        await conn.execute(
            f"INSERT INTO {quoted}.schema_functions (file, checksum) VALUES ($1, $2) "
            "ON CONFLICT (file) DO UPDATE SET checksum = $2, applied_at = now()",
            name,
            checksum,
        )
    gone = [name for name in known if name not in function_files()]
    if gone:
        await conn.execute(f"DELETE FROM {quoted}.schema_functions WHERE file = ANY($1)", gone)


async def check_version(conn: Connection, schema: str) -> None:
    """Raise SchemaError unless the database schema is exactly what this code needs.

    `conn` is outside a transaction: the version is read in one statement (every worker
    start and CLI command asks), and a schema not there shows as the error it raises.
    """
    try:
        current: int | None = await conn.fetchval(
            f"SELECT max(version) FROM {quote_identifier(schema)}.schema_version"
        )
    except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
        current = None
    refused = version_refused(schema, current)
    if refused is not None:
        raise refused


def version_refused(schema: str, current: int | None) -> SchemaError | None:
    """The error for a schema at version `current` (None: not there), or None when it is
    exactly what this code needs."""
    needed = code_version()
    if current is None:
        return SchemaError(
            f"schema {schema} has no aiopgq tables: run `aiopgq migrate` "
            f"(or `await queue.migrate()`) first"
        )
    if current < needed:
        return SchemaError(
            f"schema {schema} is at version {current}, this aiopgq needs {needed}: "
            "run `aiopgq migrate`"
        )
    if current > needed:
        return SchemaError(_newer_message(schema, current))
    return None


def _older_message(schema: str, current: int) -> str:
    oldest = oldest_upgradable()
    return (
        f"schema {schema} is at version {current}, older than this aiopgq upgrades (from "
        f"version {oldest} on): run `aiopgq migrate` with an aiopgq that upgrades it to "
        f"version {oldest} or later first (one whose schema version is {oldest} to 20), "
        "then with this one"
    )


def _newer_message(schema: str, current: int) -> str:
    return (
        f"schema {schema} is at version {current}, newer than this aiopgq "
        f"(which knows up to {code_version()}): upgrade aiopgq"
    )


_MISSING_SCHEMA_ERRORS = (
    asyncpg.UndefinedTableError,
    asyncpg.UndefinedColumnError,  # a column a later version adds
    asyncpg.UndefinedFunctionError,
    asyncpg.InvalidSchemaNameError,
    asyncpg.UndefinedObjectError,
)


@contextlib.contextmanager
def missing_schema_as_error(schema: str) -> Iterator[None]:
    """Turn PostgreSQL's "no such table/function" into a SchemaError that says what to do."""
    try:
        yield
    except _MISSING_SCHEMA_ERRORS as exc:
        raise SchemaError(
            f"schema {schema} is missing or outdated ({exc}): run `aiopgq migrate`"
        ) from exc
