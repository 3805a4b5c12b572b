"""The benchmark database: created fresh per run, described, dropped at the end."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_DBNAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_connections",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "jit",
)


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointing at another database."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


@dataclass
class ServerInfo:
    version: str
    settings: dict[str, str]
    cores: int
    machine: str
    python: str

    @property
    def short(self) -> str:
        s = self.settings
        return (
            f"PostgreSQL {s['server_version']} (fsync={s['fsync']}, "
            f"synchronous_commit={s['synchronous_commit']}, shared_buffers="
            f"{s['shared_buffers']}), {self.cores} cores, Python {self.python}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def server_info(dsn: str) -> ServerInfo:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SELECT version()")
        settings = {name: await conn.fetchval(f"SHOW {name}") for name in SETTINGS}
    finally:
        await conn.close()
    return ServerInfo(
        version=version,
        settings=settings,
        cores=os.cpu_count() or 1,
        machine=f"{platform.system()} {platform.machine()} {platform.release()}",
        python=platform.python_version(),
    )


async def create_database(server_dsn: str, name: str) -> str:
    """Drop any leftover `name` and create it anew; returns its DSN."""
    if not _DBNAME.match(name):
        raise SystemExit(f"database name {name!r} must match {_DBNAME.pattern}")
    conn = await asyncpg.connect(server_dsn)
    try:
        current = await conn.fetchval("SELECT current_database()")
        if current == name:
            raise SystemExit(f"connect through another database than {name!r} (it is dropped)")
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(server_dsn, name)


async def drop_database(server_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(server_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def checkpoint(dsn: str) -> None:
    """Flush dirty buffers so a checkpoint does not land inside a measurement."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
