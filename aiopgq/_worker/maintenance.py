"""Maintenance: rescue jobs of dead workers, expire their registry rows, prune or archive
finished rows. One leader at a time."""

from __future__ import annotations

import contextlib
import logging
import zlib
from collections.abc import AsyncIterator, Mapping

import anyio
import asyncpg

from .._db.connection import Connection
from .._db.outage import Outage
from .._db.retrying import run_pooled
from .._db.statements import Statements
from .._db.transient import Backoff
from .archive import archive_pass
from .presence import EXPIRE_AFTER_BEATS

logger = logging.getLogger("aiopgq.maintenance")

_BATCH = 1000
# How long an emitted event is kept for the jobs that wait for it later (events.sql).
EVENT_RETENTION = 30 * 86400.0
# Suspended jobs due within this many seconds are made pending at their wake time
# (sql/maintain/promote_timers.sql); a suspension nearer than that stays pending itself
# (sql/complete/sleep_job.sql: the same 60 seconds). A leader whose interval is longer
# looks twice its interval ahead, so no pass steps over a wake time.
TIMER_AHEAD = 60.0


def _leader_key(schema: str) -> int:
    return zlib.crc32(b"aiopgq-maintenance:" + schema.encode()) & 0x7FFFFFFF


async def run_maintenance(
    pool: asyncpg.Pool,
    sql: Statements,
    *,
    outage: Outage,
    interval: float,
    visibility_timeout: float,
    retention: Mapping[str, float],
) -> None:
    """Every `interval` seconds, if no other worker is doing it right now: rescue, prune.

    `retention` maps a finished status ('done', 'failed', 'cancelled') to the seconds its
    rows are kept; a status not in it is kept forever.
    """
    backoff = Backoff(logger, "maintenance pass", interval=interval, outage=outage)
    ahead = max(TIMER_AHEAD, 2 * interval)
    while True:
        try:
            await maintain_once(
                pool,
                sql,
                visibility_timeout=visibility_timeout,
                retention=retention,
                timers_ahead=ahead,
            )
        except Exception as exc:
            backoff.failed(exc)  # the interval is the delay
        else:
            backoff.succeeded()
        await anyio.sleep(interval)


async def maintain_once(
    pool: asyncpg.Pool,
    sql: Statements,
    *,
    visibility_timeout: float,
    retention: Mapping[str, float],
    timers_ahead: float = TIMER_AHEAD,
) -> tuple[int, int]:
    """One pass; returns (jobs rescued, rows pruned). Each batch is its own short
    transaction. `timers_ahead`: how far ahead suspended jobs are made pending."""

    async def one_pass(conn: Connection) -> tuple[int, int]:
        return await _pass(conn, sql, visibility_timeout, retention, timers_ahead)

    # A pass is safe to run again from its start (run_pooled may, on a dead connection).
    return await run_pooled(pool, one_pass)


async def _pass(
    conn: Connection,
    sql: Statements,
    visibility_timeout: float,
    retention: Mapping[str, float],
    timers_ahead: float,
) -> tuple[int, int]:
    pruned = 0
    rescued, leading, archive = await _housekeeping(conn, sql, visibility_timeout, timers_ahead)
    if not leading:
        return rescued, pruned  # another worker leads
    counts = await _prune(conn, sql, retention)
    for status, count in counts.items():
        if count:
            logger.info(
                "pruned %d %s jobs older than %s s",
                count,
                status,
                retention[status],
                extra={"status": status, "pruned": count},
            )
        pruned += count
    await archive_pass(conn, sql, retention, _leading, archive)
    return rescued, pruned


async def _prune(
    conn: Connection, sql: Statements, retention: Mapping[str, float]
) -> dict[str, int]:
    """Delete the expired rows of each status in `retention`, in batches: the first batch
    of every status in one transaction (a pass usually has no more), then one per batch
    for a status whose batch was full. How many, by status."""
    pruned = dict.fromkeys(retention, 0)
    todo = list(retention)
    while todo:
        async with _leading(conn, sql) as leader:
            if not leader:
                break  # another worker leads now
            deleted = {
                status: int(await conn.fetchval(sql.prune, status, retention[status], _BATCH))
                for status in todo
            }
        for status, count in deleted.items():
            pruned[status] += count
        todo = [status for status, count in deleted.items() if count >= _BATCH]
    return pruned


def _log_rescued(row: asyncpg.Record) -> None:
    extra = {"job_id": row["id"], "task": row["task"], "queue": row["queue"]}
    if row["status"] == "failed":
        logger.warning(
            "job %s (%s, queue %s) failed: its worker was lost on the last attempt (%s)",
            row["id"],
            row["task"],
            row["queue"],
            row["last_error"],
            extra=extra,
        )
    else:
        logger.warning(
            "job %s (%s) lease expired (worker lost); now pending",
            row["id"],
            row["task"],
            extra=extra,
        )


@contextlib.asynccontextmanager
async def _leading(conn: Connection, sql: Statements) -> AsyncIterator[bool]:
    """One maintenance batch's transaction; yields whether this worker leads (holds the
    leader lock until it commits). Shielded from cancellation: a worker stopping
    meanwhile waits for one bounded batch. Cancelled half-way, its rollback was
    cancelled too and the transaction stayed open on the pooled connection (asyncpg
    then reported "Resetting connection with an active transaction")."""
    with anyio.CancelScope(shield=True):
        async with conn.transaction():
            yield await _lead(conn, sql)


async def _rescue_batch(
    conn: Connection, sql: Statements, visibility_timeout: float
) -> list[asyncpg.Record] | None:
    """Rescue up to _BATCH expired leases; None if another worker leads maintenance."""
    async with _leading(conn, sql) as leader:
        if not leader:
            return None
        return await _rescue(conn, sql, visibility_timeout)


async def _rescue(
    conn: Connection, sql: Statements, visibility_timeout: float
) -> list[asyncpg.Record]:
    """Up to _BATCH expired leases made pending (or failed), their queues woken: inside
    the leader's transaction."""
    rows: list[asyncpg.Record] = await conn.fetch(sql.rescue, visibility_timeout, _BATCH)
    for queue in {row["queue"] for row in rows if row["status"] == "pending"}:
        await conn.execute("SELECT pg_notify($1, $2)", sql.channel, queue)
    return rows


async def _housekeeping(
    conn: Connection, sql: Statements, visibility_timeout: float, timers_ahead: float
) -> tuple[int, bool, asyncpg.Record | None]:
    """The pass's small tasks in one transaction (each commit of a pass counts, every
    interval): rescue a batch of expired leases, expire the registry rows of workers that
    stopped beating (presence.py), delete one batch of emitted events past their
    retention, make the suspended jobs due within `timers_ahead` seconds pending, read
    the archive's state (archive.py). Then, each alone, more batches of what filled its
    batch, and ANALYZE jobs when it outgrew its statistics (statistics_outgrown.sql).
    Returns the jobs rescued, whether this worker still leads, and the archive state."""
    async with _leading(conn, sql) as leader:
        if not leader:
            return 0, False, None
        rows = await _rescue(conn, sql, visibility_timeout)
        gone = await conn.fetch(sql.expire_workers, EXPIRE_AFTER_BEATS)
        await conn.fetchval(sql.prune_events, EVENT_RETENTION, _BATCH)
        promoted = await conn.fetchval(sql.promote_timers, timers_ahead, _BATCH, column=1)
        outgrown = await conn.fetchval(sql.statistics_outgrown)
        archive = await conn.fetchrow(sql.archive_state)
    for row in gone:
        logger.info(
            "worker %s expired from the registry: not seen for %d heartbeat intervals",
            row["id"],
            EXPIRE_AFTER_BEATS,
            extra={"worker": row["id"]},
        )
    rescued = _rescued(rows)
    while len(rows) >= _BATCH:  # every expired lease was not done with: there may be more
        more = await _rescue_batch(conn, sql, visibility_timeout)
        if more is None:
            return rescued, False, archive
        rows = more
        rescued += _rescued(rows)
    while promoted >= _BATCH:  # likewise the timers due
        async with _leading(conn, sql) as leader:
            if not leader:
                return rescued, False, archive
            promoted = await conn.fetchval(sql.promote_timers, timers_ahead, _BATCH, column=1)
    if outgrown:
        async with _leading(conn, sql) as leader:
            if not leader:
                return rescued, False, archive
            await conn.execute(sql.analyze_jobs)
        logger.info("analyzed %s.jobs: it had outgrown its statistics", sql.schema)
    return rescued, True, archive


def _rescued(rows: list[asyncpg.Record]) -> int:
    for row in rows:
        _log_rescued(row)
    return len(rows)


async def _lead(conn: Connection, sql: Statements) -> bool:
    # Transaction-scoped: released at commit, so a dead leader never blocks the others.
    return bool(
        await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _leader_key(sql.schema))
    )
