"""The index of pending jobs by key that key limits need, built once by its owner."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from .connection import Connection
from .statements import Statements

logger = logging.getLogger("aiopgq.queue")

_PEER_BUILDING_POLL = 0.1  # seconds between looks at a peer's build


async def ensure_key_index(conn: Connection, sql: Statements) -> None:
    """Build jobs_pending_key_idx (sql/admin/key_index.sql) unless a usable one exists,
    one session at a time (workers start together). Only the owner of the jobs table
    may: asyncpg.InsufficientPrivilegeError otherwise, for the caller to explain
    (configure() raises, a worker warns)."""
    if await conn.fetchval(sql.key_index_state, sql.schema):
        return
    while True:
        if await conn.fetchval(sql.key_index_lock):
            break
        await asyncio.sleep(_PEER_BUILDING_POLL)  # a peer builds it
    try:
        valid = await conn.fetchval(sql.key_index_state, sql.schema)
        if valid:
            return
        logger.info("building index %s.jobs_pending_key_idx for key limits", sql.schema)
        if valid is False:  # a build that failed half-way left an unusable index
            await conn.execute(sql.drop_key_index)
        await conn.execute(sql.key_index)
    except asyncpg.DuplicateTableError:
        pass  # built meanwhile by a session that does not take the lock
    finally:
        await conn.fetchval(sql.key_index_unlock)
