"""Listener: one dedicated LISTEN connection per worker, outside the pool."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

import anyio
import asyncpg

from ._dsn import redact
from ._retry import reconnect_delay
from ._sql import quote_identifier

logger = logging.getLogger("aiopgq.listener")


class Listener:
    """Wakes the fetcher when a NOTIFY names one of our queues.

    On a lost connection (killed backend, server restart, network) it reconnects
    with backoff, LISTENs again and wakes the fetcher once for a catch-up fetch,
    since notifications sent while it was away are gone. A periodic ping finds
    connections that died silently.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        channel: str,
        queues: Collection[str],
        notified: Callable[[str], None],
        connected: Callable[[], None],
        *,
        ping_interval: float = 10.0,
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._queues = frozenset(queues)
        self._notified = notified
        self._on_connected = connected
        self._ping_interval = ping_interval
        self.connected = anyio.Event()
        self.reconnects = 0

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str) and payload in self._queues:
            self._notified(payload)

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                conn: asyncpg.Connection = await self._connect()
            except Exception as exc:  # any connect failure: retry, never die
                failures += 1
                delay = reconnect_delay(failures)
                logger.warning(
                    "LISTEN connection failed (%s); retrying in %.1f s; polling meanwhile",
                    redact(str(exc)),
                    delay,
                )
                await anyio.sleep(delay)
                continue
            try:
                failures = await self._serve(conn)
            finally:
                with anyio.CancelScope(shield=True):
                    await _close_quietly(conn)
            self.connected = anyio.Event()
            self.reconnects += 1

    async def _serve(self, conn: asyncpg.Connection) -> int:
        lost = anyio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        try:
            await conn.add_listener(self._channel, self._on_notify)
        except Exception as exc:
            logger.warning("LISTEN %s failed (%s); reconnecting", self._channel, exc)
            await anyio.sleep(reconnect_delay(1))
            return 1
        logger.debug("listening on channel %s", quote_identifier(self._channel))
        self.connected.set()
        self._on_connected()  # catch up on anything enqueued while we were not listening
        while not lost.is_set():
            with anyio.move_on_after(self._ping_interval):
                await lost.wait()
            if lost.is_set() or conn.is_closed():
                break
            try:
                with anyio.fail_after(self._ping_interval):
                    await conn.execute("SELECT 1")
            except Exception as exc:
                logger.warning("LISTEN connection unhealthy (%s); reconnecting", exc)
                break
        logger.warning("LISTEN connection lost; reconnecting")
        return 0


async def _close_quietly(conn: asyncpg.Connection) -> None:
    try:
        with anyio.fail_after(2):
            await conn.close()
    except Exception:
        conn.terminate()
