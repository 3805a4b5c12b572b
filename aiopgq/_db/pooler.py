"""A connection pooler between us and PostgreSQL (pgbouncer in transaction mode), noticed when
a connection is made, so that asyncpg caches prepared statements only where they survive.

asyncpg prepares every statement under a name and reuses it (`statement_cache_size`, 100 by
default). Behind a pooler in transaction mode each transaction may run on another server
connection, where that name does not exist, or exists with another text: pgbouncer before
1.21, or with `max_prepared_statements = 0`, fails there ("prepared statement
__asyncpg_stmt_1__ does not exist"). pgbouncer 1.21 and later with `max_prepared_statements`
> 0 tracks protocol-level prepared statements itself, and the cache can stay on.

So a new connection, unless the user chose `statement_cache_size`, asks two questions:

1. Is the server process serving it the one it reported at login? PostgreSQL reports its
   own pid (BackendKeyData); a pooler reports a cancel key of its own. One simple-protocol
   query, no prepared statement, answered by the status tag: the whole cost of a direct
   connection.
2. Only behind a pooler: does a statement we prepare under our name reach the server under
   that name? pgbouncer that tracks statements prepares it as PGBOUNCER_<n>; one that passes
   Parse through leaves our name, and we deallocate it. One short transaction, pinned to one
   server connection.

A pooler that loses prepared statements gets a connection with `statement_cache_size=0`
(asyncpg then uses the unnamed statement, re-parsed in each round trip, which works
everywhere). A pooler in session mode is found too and gets the same, which is safe but
needless: its users pass `statement_cache_size` to keep the cache.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import asyncpg

from .connection import close_quietly
from .dsn import redact

logger = logging.getLogger("aiopgq.queue")

CACHE_OPTION = "statement_cache_size"
_DEFAULT_TIMEOUT = 60.0  # asyncpg.connect's own default
_told: set[str] = set()  # addresses whose pooler was announced (once per process)
_direct: set[str] = set()  # addresses found to be PostgreSQL itself (no pooler)


async def behind_pooler(conn: asyncpg.Connection, *, timeout: float | None = None) -> bool:
    """True when another process than the one `conn` reported at login serves it: a pooler
    is in between. No prepared statement is made (one would stay behind on a server
    connection that the pooler shares)."""
    status = await conn.execute(same_process_query(conn.get_server_pid()), timeout=timeout)
    return status != "SELECT 1"


def same_process_query(pid: int) -> str:
    """A statement that returns one row when the process serving it is `pid`, the one the
    connection reported at login, and none behind a pooler. Without parameters, so that
    it runs unprepared (asyncpg: simple protocol; psycopg: its first run of a text)."""
    return f"SELECT 1 WHERE pg_backend_pid() = {int(pid)}"


async def keeps_prepared_statements(
    conn: asyncpg.Connection, *, timeout: float | None = None
) -> bool:
    """Behind a pooler: True when it tracks protocol-level prepared statements itself
    (pgbouncer 1.21+ with max_prepared_statements > 0), so they survive its transactions.
    Leaves no prepared statement on the server connection."""
    name = f"aiopgq_probe_{uuid.uuid4().hex}"
    async with conn.transaction():  # BEGIN pins one server connection for the probe
        await conn.prepare("SELECT 1", name=name, timeout=timeout)
        found = await conn.execute(
            f"SELECT 1 FROM pg_prepared_statements WHERE name = '{name}'", timeout=timeout
        )
        if found == "SELECT 1":  # passed through under our name: nobody tracks it
            await conn.execute(f'DEALLOCATE "{name}"', timeout=timeout)
            return False
    return True


class PoolerAwareConnect:
    """asyncpg.connect for one address (a pool's, the fetcher's, the listener's), with
    asyncpg's statement cache off where a pooler loses prepared statements.

    Once a connection to the address needed the cache off, the next ones are made so at
    once (no probe, no second connection). Once a connection to an address reached
    PostgreSQL directly, no later one to it in this process is probed (a worker makes
    several at its start: its pool's, the fetcher's, the listener's).
    """

    def __init__(self) -> None:
        self._uncached = False

    async def __call__(self, *args: Any, **kwargs: Any) -> asyncpg.Connection:
        if CACHE_OPTION in kwargs:  # the user's choice wins: nothing to ask
            return await _connect(args, kwargs)
        uncached = {**kwargs, CACHE_OPTION: 0}
        if self._uncached:
            return await _connect(args, uncached)
        address = _address(args, kwargs)
        if address in _direct:
            return await _connect(args, kwargs)
        conn = await _connect(args, kwargs)
        try:
            keep, direct = await _cache_survives(conn, kwargs.get("timeout", _DEFAULT_TIMEOUT))
        except (asyncpg.InterfaceError, asyncpg.InternalClientError) as exc:
            conn.terminate()  # lost right after login: a failed connect, to retry as such
            raise ConnectionResetError(f"connection lost at its first query ({exc})") from exc
        except BaseException:
            conn.terminate()
            raise
        if direct:
            _direct.add(address)
        if keep:
            return conn
        self._uncached = True
        _announce(str(args[0]) if args else str(kwargs.get("dsn") or "the database"))
        await close_quietly(conn)
        return await _connect(args, uncached)


def _address(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What a connection is made to: the DSN and the host and port given beside it."""
    dsn = args[0] if args else kwargs.get("dsn")
    return f"{dsn}|{kwargs.get('host')}|{kwargs.get('port')}"


async def _connect(args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncpg.Connection:
    conn: asyncpg.Connection = await asyncpg.connect(*args, **kwargs)
    return conn


async def _cache_survives(conn: asyncpg.Connection, timeout: float) -> tuple[bool, bool]:
    """Whether the statement cache survives on `conn`, and whether it reaches PostgreSQL
    directly (no pooler in between)."""
    try:
        if not await behind_pooler(conn, timeout=timeout):
            return True, True
    except asyncpg.PostgresError as exc:  # a server that cannot say: leave asyncpg's default
        logger.debug("cannot tell whether a pooler is in between (%s)", exc)
        return True, False
    try:
        keeps = await keeps_prepared_statements(conn, timeout=timeout)
    except asyncpg.PostgresError as exc:  # the safe side: no cache works through any pooler
        logger.debug("cannot tell whether the pooler keeps prepared statements (%s)", exc)
        return False, False
    logger.debug(
        "behind a pooler that %s prepared statements: statement cache %s",
        *(("keeps", "on") if keeps else ("loses", "off")),
    )
    return keeps, False


def _announce(dsn: str) -> None:
    where = redact(dsn)
    if where in _told:
        return
    _told.add(where)
    logger.info(
        "connections to %s go through a connection pooler that does not keep prepared "
        "statements (pgbouncer before 1.21, or max_prepared_statements = 0): asyncpg's "
        "statement cache is off for them; statement_cache_size=N in connect_kwargs "
        "(CLI --statement-cache-size N) chooses yourself",
        where,
        extra={"address": where},
    )
