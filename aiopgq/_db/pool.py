"""The connections a Queue makes: its pool (retried at start, no reset per release, no
floor) and single connections (migrate), failing with CannotConnect naming the server;
both with asyncpg's statement cache fitted to a pooler in between (pooler.py)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from .._errors import CannotConnect, cut
from .dsn import DSN_CHARACTERS, redact
from .pooler import PoolerAwareConnect
from .transient import Backoff, describe, is_transient

logger = logging.getLogger("aiopgq.queue")

# asyncpg 0.32 made `min_size` a floor that a background task restores after connections
# are lost; while the server is down that task logs a WARNING with a traceback every few
# seconds ("Failed to restore the pool connection floor"), next to the one account of the
# outage that aiopgq's own loops give (see outage.py). Our pools have no floor: they open
# `min_size` connections at start (asyncpg's `init_size`), then connect as they are used,
# which every aiopgq loop does on its next try after an outage.
_FLOOR_SEPARATE = "init_size" in inspect.signature(asyncpg.create_pool).parameters


async def create_pool(
    dsn: str,
    sizes: tuple[int, int],
    connect_kwargs: Mapping[str, Any],
    *,
    retry_for: float = 0.0,
) -> asyncpg.Pool:
    """An asyncpg pool on `dsn`; an unreachable server is retried with backoff (logging
    each try) for `retry_for` seconds, then CannotConnect names it (no password)."""
    deadline = time.monotonic() + retry_for
    backoff = Backoff(logger, f"connecting to {redact(dsn)}")
    while True:
        try:
            pool = await _open(dsn, sizes, connect_kwargs)
        except (OSError, asyncio.TimeoutError, asyncpg.PostgresError) as exc:
            left = deadline - time.monotonic()
            if not is_transient(exc) or left <= 0:
                tries = backoff.failures + 1
                raise connect_error(dsn, exc, tries if retry_for else None) from None
            await asyncio.sleep(min(backoff.failed(exc), left))
        else:
            backoff.succeeded()
            return pool


async def connect(dsn: str, connect_kwargs: Mapping[str, Any]) -> asyncpg.Connection:
    """One connection outside any pool; CannotConnect (no password) when it fails."""
    try:
        return await PoolerAwareConnect()(dsn, **connect_kwargs)
    except (OSError, asyncio.TimeoutError, asyncpg.PostgresError) as exc:
        raise connect_error(dsn, exc) from None


def connect_error(dsn: str, exc: BaseException, tries: int | None = None) -> CannotConnect:
    """What failed to connect where, and what to check."""
    return CannotConnect(
        f"cannot connect to {cut(redact(dsn), DSN_CHARACTERS)}: {describe(exc)}"
        + (f" (gave up after {tries} tries)" if tries is not None else "")
        + "; check the DSN and that the server is running"
    )


async def _open(
    dsn: str, sizes: tuple[int, int], connect_kwargs: Mapping[str, Any]
) -> asyncpg.Pool:
    min_size, max_size = sizes
    # One per pool: what it learns of the address serves its later connections.
    connect = functools.partial(_connect_to_the_end, PoolerAwareConnect())
    if _FLOOR_SEPARATE:
        return await asyncpg.create_pool(
            dsn,
            min_size=0,
            init_size=min_size,
            max_size=max_size,
            connect=connect,
            reset=_keep_session,
            **connect_kwargs,
        )
    return await asyncpg.create_pool(  # before asyncpg 0.32 min_size was no floor
        dsn,
        min_size=min_size,
        max_size=max_size,
        connect=connect,
        reset=_keep_session,
        **connect_kwargs,
    )


async def _connect_to_the_end(
    connect: PoolerAwareConnect, *args: Any, **kwargs: Any
) -> asyncpg.Connection:
    """`connect` for the pool, never interrupted half-way.

    asyncpg cancelled while it negotiates SSL (sslmode prefer, the default) leaves a
    future whose exception nobody retrieves, which asyncio reports as an error
    ("Future exception was never retrieved ... unexpected connection_lost() call";
    MagicStack/asyncpg#1211). A worker stopping right after it started, while a part
    of it was connecting, did that. So the caller is cancelled at once as usual, and
    the connection attempt finishes on its own and is then closed.
    """
    connecting = asyncio.ensure_future(connect(*args, **kwargs))
    try:
        return await asyncio.shield(connecting)
    except asyncio.CancelledError:
        connecting.add_done_callback(_close_unwanted)
        raise


def _close_unwanted(connecting: asyncio.Future[asyncpg.Connection]) -> None:
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result().terminate()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook: nothing to undo, so skip asyncpg's reset query.

    By default asyncpg sends `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL` on every release: one more round trip for every enqueue and
    completion. aiopgq leaves no session state on pool connections (its advisory locks
    are transaction-scoped; LISTEN has its own connection), and asyncpg still rolls back
    an open transaction. Code that borrows `queue.pool` must not leave session state
    behind either (SET, session advisory locks, LISTEN), or should use its own pool.
    """
