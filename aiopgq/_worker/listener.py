"""Listener: one dedicated LISTEN connection per worker, outside the pool."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import anyio
import asyncpg

from .._db.connection import close_quietly
from .._db.outage import Outage
from .._db.pooler import behind_pooler
from .._db.statements import Statements, quote_identifier
from .._db.transient import Backoff, describe, reconnect_delay
from .control import Controls, is_control
from .wakeups import Wakeups

logger = logging.getLogger("aiopgq.listener")


class Listener:
    """Wakes the fetcher when a NOTIFY names one of our queues, and hands control
    messages (pause, resume, cancel: control.py) to `controls`.

    On a lost connection (killed backend, server restart, network) it reconnects
    with backoff, LISTENs again and wakes the fetcher once for a catch-up fetch,
    since notifications sent while it was away are gone. A periodic ping finds
    connections that died silently.

    The same connection carries the worker's "awake" advisory locks (session
    locks must live on a connection that is not shared): while they are held,
    producers skip their NOTIFY (see sql/functions/wake.sql).

    A connection that does not reach PostgreSQL directly (pgbouncer or another
    pooler: the backend pid it reports is not the one serving its queries) takes
    no awake locks, since in transaction pooling they would stay behind on a server
    connection that other clients share; it warns once, naming the fix (a direct
    `listen_dsn`, or `listen=False`).
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        sql: Statements,
        queues: Collection[str],
        wakeups: Wakeups,
        *,
        controls: Controls | None = None,
        outage: Outage | None = None,
        ping_interval: float = 10.0,
    ) -> None:
        self._connect = connect
        self._channel = sql.channel
        self._queues = frozenset(queues)
        self._wakeups = wakeups
        self._controls = controls
        self._ping_interval = ping_interval
        self._sql = sql
        self._outage = outage
        self.connected = anyio.Event()
        self.reconnects = 0
        self._conn: asyncpg.Connection | None = None
        self._conn_lock = anyio.Lock()  # one query at a time on the connection
        self._awake: list[str] = []  # queues whose awake lock this session holds
        self.pooled = False  # the connection goes through a pooler: no session locks

    @property
    def awake(self) -> bool:
        return bool(self._awake)

    async def hold_awake(self) -> None:
        """Advertise that the worker is fetching, so producers may skip NOTIFY."""
        if self._awake or self._conn is None or self.pooled:
            return
        held = await self._query(self._sql.hold_awake, list(self._queues))
        self._awake = list(held or [])

    async def release_awake(self) -> bool:
        """Stop advertising; True if something was held (the caller must drain)."""
        if not self._awake:
            return False
        queues, self._awake = self._awake, []
        await self._query(self._sql.release_awake, queues)
        return True

    async def _query(self, sql: str, queues: list[str]) -> Any:
        conn = self._conn
        if conn is None or conn.is_closed():
            return None
        try:
            async with self._conn_lock:
                return await conn.fetchval(sql, self._sql.schema, queues)
        except Exception as exc:  # the connection is going: its session locks go with it
            logger.debug("awake-lock query failed (%s)", exc)
            # When a query meets a connection the server is closing, asyncpg can abort
            # the protocol without calling the termination listeners: end it ourselves
            # so that we reconnect now, not at the next ping.
            conn.terminate()
            return None

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str):
            if payload in self._queues:
                self._wakeups.notified(payload)
            elif self._controls is not None and is_control(payload):
                self._controls.received(payload)

    async def run(self) -> None:
        backoff = Backoff(
            logger, "LISTEN connection", consequence="polling meanwhile", outage=self._outage
        )
        while True:
            try:
                conn = await self._connect()
            except Exception as exc:  # the worker polls meanwhile: retry whatever it is
                await anyio.sleep(backoff.failed(exc, retry_any=True))
                continue
            backoff.succeeded()
            try:
                await self._serve(conn)
            finally:
                self._conn, self._awake = None, []
                await close_quietly(conn)
            self.connected = anyio.Event()
            self.reconnects += 1

    async def _serve(self, conn: asyncpg.Connection) -> None:
        lost = anyio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        try:
            await conn.add_listener(self._channel, self._on_notify)
            await self._check_direct(conn)
        except Exception as exc:
            logger.warning("LISTEN %s failed (%s); reconnecting", self._channel, describe(exc))
            await anyio.sleep(reconnect_delay(1))
            return
        logger.debug("listening on channel %s", quote_identifier(self._channel))
        self._conn = conn
        self.connected.set()
        self._wakeups.caught_up()  # catch up on anything enqueued while we were not listening
        if self._controls is not None:
            self._controls.reconnected()
        while not lost.is_set():
            with anyio.move_on_after(self._ping_interval):
                await lost.wait()
            if lost.is_set() or conn.is_closed():
                break
            try:
                with anyio.fail_after(self._ping_interval):
                    async with self._conn_lock:
                        await conn.execute("SELECT 1")
            except Exception as exc:
                logger.warning("LISTEN connection unhealthy (%s); reconnecting", describe(exc))
                break
        self._conn, self._awake = None, []  # session locks die with the connection
        # A failing reconnect is what the outage account reports; one lost connection is not.
        logger.info("LISTEN connection lost; reconnecting")

    async def _check_direct(self, conn: asyncpg.Connection) -> None:
        """Notice a pooler between us and PostgreSQL: pgbouncer reports a backend pid
        (the cancel key) of its own, not the pid of the server process. (The question
        is asked without a prepared statement, which could stay behind on a server
        connection the pooler shares.)"""
        pooled = await behind_pooler(conn)
        if pooled and not self.pooled:
            logger.warning(
                "the LISTEN connection goes through a connection pooler (pgbouncer?): in "
                "transaction pooling LISTEN does not work, and the worker polls every "
                "poll_interval. Give the worker a direct address for it: listen_dsn=... "
                "(CLI --listen-dsn), or listen=False (--no-listen) to poll on purpose. "
                "Producers NOTIFY on every enqueue meanwhile (no awake locks taken).",
                extra={"channel": self._channel},
            )
        self.pooled = pooled
