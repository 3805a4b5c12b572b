"""Archive: the partitioned layout's share of a maintenance pass (move, extend, drop).

In the plain layout a pass stops at its state row (one small read, in the pass's first
transaction). See sql/functions/archive.sql for the layout and why it exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager

import asyncpg

from .._db.connection import Connection
from .._db.statements import Statements

logger = logging.getLogger("aiopgq.maintenance")

_BATCH = 1000
# Batches moved per status and pass: converting a large table goes on over several
# passes rather than holding up the rescue of expired leases.
_MAX_BATCHES = 100
FINISHED = ("done", "failed", "cancelled")

# maintenance._leading: one batch's transaction, yielding whether this worker leads.
Leading = Callable[[Connection, Statements], AbstractAsyncContextManager[bool]]


async def archive_pass(
    conn: Connection,
    sql: Statements,
    retention: Mapping[str, float],
    leading: Leading,
    state: asyncpg.Record | None,
) -> tuple[int, int]:
    """Move the finished rows due for the archive, make partitions ahead, drop the expired
    ones (those of statuses in `retention`); returns (rows moved, partitions dropped).
    `state` is sql/maintain/archive_state.sql's row, read in the pass's first transaction
    (maintenance.py: no commit of its own)."""
    if state is None or (not state["enabled"] and not state["statuses"]):
        return 0, 0  # the plain layout
    moved = 0
    if state["enabled"]:
        async with leading(conn, sql) as leader:
            if not leader:
                return 0, 0
            made = await conn.fetchval(sql.archive_extend)
        if made:
            logger.info("made %d archive partitions", made, extra={"partitions": made})
            state = await conn.fetchrow(sql.archive_state)
            assert state is not None
        oldest = dict(zip(state["statuses"], state["oldest"], strict=True))
        for status in FINISHED:
            count = await _move(conn, sql, leading, status, state["archive_after"], oldest)
            if count is None:
                return moved, 0  # another worker leads now
            moved += count
        if moved:
            logger.info("moved %d finished jobs to the archive", moved, extra={"moved": moved})
    dropped = 0
    for status, seconds in retention.items():
        if status in state["statuses"]:
            names = await _drop(conn, sql, leading, status, seconds)
            if names is None:
                break
            dropped += len(names)
    return moved, dropped


async def _move(
    conn: Connection,
    sql: Statements,
    leading: Leading,
    status: str,
    archive_after: float,
    oldest: Mapping[str, str],
) -> int | None:
    """Move one status's due rows, a batch per transaction; None if another worker leads."""
    floor = oldest.get(status)  # text: see archive_state.sql
    if floor is None:
        return 0  # no partition yet (made at the next pass)
    moved = 0
    for _ in range(_MAX_BATCHES):
        async with leading(conn, sql) as leader:
            if not leader:
                return None
            moved_now = await conn.fetchval(sql.archive_move, status, archive_after, _BATCH, floor)
        count = int(moved_now)
        moved += count
        if count < _BATCH:
            break
    return moved


async def _drop(
    conn: Connection, sql: Statements, leading: Leading, status: str, seconds: float
) -> list[str] | None:
    """Drop the status's partitions older than its retention; None if another worker leads."""
    try:
        async with leading(conn, sql) as leader:
            if not leader:
                return None
            names: list[str] = list(await conn.fetchval(sql.archive_drop, status, seconds))
    except asyncpg.LockNotAvailableError:
        logger.info(
            "dropping expired %s archive partitions waited too long for readers: next pass",
            status,
            extra={"status": status},
        )
        return []
    for name in names:
        logger.info(
            "dropped archive partition %s (%s jobs older than %s s)",
            name,
            status,
            seconds,
            extra={"status": status, "partition": name},
        )
    return names
