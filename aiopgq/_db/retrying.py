"""Statements on pool connections: dead connections replaced, and the bounded retry loop.

`run_pooled` runs an operation on a pool connection. A connection that the server
closed while it sat in the pool can still look open for a loop iteration (see
`never_sent`); a statement on it fails before anything is sent, so the connection is
thrown away and the operation runs on another. That costs nothing while nothing fails.

`run_pooled_retrying` also waits out a database that cannot be reached, up to a
deadline, retrying only what cannot run twice: an attempt whose connection could not
be made, a statement that never reached the server, or, for an idempotent operation,
any transient error. A statement that reached the server and lost its reply is not
sent again: it may have committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from .connection import Connection
from .outage import Outage
from .transient import describe, is_transient, never_sent, reconnect_delay

T = TypeVar("T")
Operation = Callable[[Connection], Awaitable[T]]

# A retrying caller tries again at least this often once the server is back.
_MAX_RETRY_DELAY = 1.0


async def run_pooled(pool: asyncpg.Pool, op: Operation[T]) -> T:
    """`await op(conn)` on a pool connection. If a statement of `op` fails because the
    connection had died before it was sent, `op` runs again from its start on another
    connection: `op` must be safe to run again after running partly (a single
    statement, or statements that are harmless to repeat)."""
    replacements = pool.get_max_size()
    while True:
        async with pool.acquire() as conn:
            try:
                return await op(conn)
            except Exception as exc:
                if replacements <= 0 or not never_sent(exc):
                    raise
                conn.terminate()  # the pool connects afresh; the release is a no-op
        replacements -= 1


async def run_pooled_retrying(
    pool: asyncpg.Pool,
    op: Operation[T],
    *,
    retry_for: float,
    idempotent: bool,
    outage: Outage,
    logger: logging.Logger,
    what: str,
) -> T:
    """Like `run_pooled`, retrying for up to `retry_for` seconds what certainly did not
    reach the server (or, with `idempotent`, any transient error); the last error once
    the time is up."""
    deadline = time.monotonic() + retry_for
    failures = 0
    while True:
        sent = False
        try:
            left = deadline - time.monotonic()
            conn = await pool.acquire(timeout=max(left, 0.001))
            try:
                sent = True
                result = await op(conn)
            except Exception as exc:
                if never_sent(exc):
                    sent = False
                    conn.terminate()
                raise
            finally:
                await _release(pool, conn)
        except Exception as exc:
            left = deadline - time.monotonic()
            if left <= 0 or pool.is_closing() or not is_transient(exc) or (sent and not idempotent):
                raise
            failures += 1
            delay = min(reconnect_delay(failures), _MAX_RETRY_DELAY, left)
            reason = describe(exc)
            outage.failing(logger, what, reason, delay, f"giving up after {retry_for:g} s")
            await asyncio.sleep(delay)
            continue
        if failures or outage.active:
            outage.working(logger, what)
        return result


async def _release(pool: asyncpg.Pool, conn: PoolConnectionProxy[Any]) -> None:
    """Give the connection back; a failure here comes after the operation's outcome is
    known (asyncpg terminates the connection) and must not make it look failed."""
    try:
        await pool.release(conn)
    except Exception as exc:
        logging.getLogger("aiopgq.queue").debug("releasing a connection failed (%s)", exc)
