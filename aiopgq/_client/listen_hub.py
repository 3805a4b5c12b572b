"""The process's LISTEN connections for waiters: one per database and event loop.

Every Queue's Waiters subscribes to the hub for its LISTEN connection address (the same
DSN and connect arguments) on the running event loop, and the hub LISTENs on each
subscriber's done channel over that one connection. One task per hub owns the
connection: it opens it, LISTENs and UNLISTENs as subscribers come and go, pings it,
and reconnects when it is lost. A subscriber is told when its channel is listened to
and when that ends, so that it polls meanwhile and reads everything once LISTEN is
back. The hub closes its connection when its last subscriber leaves.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Protocol

import anyio
import asyncpg

from .._db.transient import Backoff, describe

logger = logging.getLogger("aiopgq.queue")


class Subscriber(Protocol):
    channel: str  # the done channel this subscriber listens on

    def poll_interval(self) -> float: ...

    def notified(self, payload: str) -> None: ...

    def listened_to(self, yes: bool) -> None: ...


class ListenHub:
    def __init__(self, dsn: str | None, kwargs: dict[str, Any]) -> None:
        self.dsn = dsn
        self.kwargs = kwargs
        self.loop = asyncio.get_running_loop()
        self._subscribers: dict[str, set[Subscriber]] = {}  # by channel
        self._changed = asyncio.Event()  # subscribers came or went, or the connection died
        self._task: asyncio.Task[None] | None = None
        self._told: set[Subscriber] = set()  # told they are listened to on this connection
        self.connects = 0  # LISTEN connections opened so far

    def serves(self, dsn: str | None, kwargs: dict[str, Any]) -> bool:
        """Whether this hub's connection is the one to use for `dsn` and `kwargs` here."""
        return self.loop is asyncio.get_running_loop() and self.dsn == dsn and self.kwargs == kwargs

    def subscribe(self, subscriber: Subscriber) -> None:
        """Listen on the subscriber's channel, too; it is told once it is listened to."""
        self._subscribers.setdefault(subscriber.channel, set()).add(subscriber)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._run(), name="aiopgq listen hub")

    async def unsubscribe(self, subscriber: Subscriber) -> None:
        """Stop telling the subscriber; the last one out closes the connection."""
        subscribers = self._subscribers.get(subscriber.channel, set())
        subscribers.discard(subscriber)
        if not subscribers:
            self._subscribers.pop(subscriber.channel, None)
        self._changed.set()
        if self._subscribers:
            return
        with _lock:
            if self in _hubs:
                _hubs.remove(self)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(task, return_exceptions=True)

    def _everyone(self) -> list[Subscriber]:
        return [s for subscribers in self._subscribers.values() for s in subscribers]

    def _on_notify(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        for subscriber in list(self._subscribers.get(channel, ())):
            subscriber.notified(str(payload))

    async def _run(self) -> None:
        backoff = Backoff(logger, "LISTEN connection of waiters", consequence="polling meanwhile")
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, **self.kwargs)
            except Exception as exc:
                await anyio.sleep(backoff.failed(exc, retry_any=True))
                continue
            self.connects += 1
            try:
                conn.add_termination_listener(lambda _conn: self._changed.set())
                await self._serve(conn, backoff)
            except Exception as exc:
                # One lost connection is replaced at once; a failing reconnect is what the
                # backoff reports (one WARNING for an outage).
                logger.info(
                    "LISTEN connection of waiters lost (%s); polling meanwhile", describe(exc)
                )
            finally:
                told, self._told = self._told, set()
                for subscriber in told:  # what is announced from now on is missed
                    subscriber.listened_to(False)
                with anyio.CancelScope(shield=True):
                    await _close_quietly(conn)

    async def _serve(self, conn: asyncpg.Connection, backoff: Backoff) -> None:
        """LISTEN on the subscribers' channels as they change; return when the connection
        is lost or does not answer a ping in time."""
        channels: set[str] = set()
        pinged = time.monotonic()
        while True:
            self._changed.clear()
            if conn.is_closed():
                raise ConnectionError("the connection was closed")
            wanted = set(self._subscribers)
            for channel in sorted(wanted - channels):
                await conn.add_listener(channel, self._on_notify)
                channels.add(channel)
            for channel in sorted(channels - wanted):
                await conn.remove_listener(channel, self._on_notify)
                channels.discard(channel)
            backoff.succeeded()
            everyone = self._everyone()
            for subscriber in everyone:
                if subscriber not in self._told and subscriber.channel in channels:
                    self._told.add(subscriber)
                    subscriber.listened_to(True)  # it reads everything once: what came before
            interval = min((s.poll_interval() for s in everyone), default=1.0)
            if self._changed.is_set():
                continue
            with anyio.move_on_after(max(pinged + interval - time.monotonic(), 0.0)):
                await self._changed.wait()
            if conn.is_closed():
                raise ConnectionError("the connection was closed")
            if time.monotonic() - pinged >= interval:
                with anyio.fail_after(interval):
                    await conn.execute("SELECT 1")
                pinged = time.monotonic()


_hubs: list[ListenHub] = []  # of every event loop (threads may run loops of their own)
_lock = threading.Lock()


def listen_hub(dsn: str | None, kwargs: dict[str, Any]) -> ListenHub:
    """The hub of the running event loop for this connection address (made if need be)."""
    with _lock:
        _hubs[:] = [hub for hub in _hubs if not hub.loop.is_closed()]
        for hub in _hubs:
            if hub.serves(dsn, kwargs):
                return hub
        hub = ListenHub(dsn, kwargs)
        _hubs.append(hub)
        return hub


async def _close_quietly(conn: asyncpg.Connection) -> None:
    try:
        with anyio.fail_after(2):
            await conn.close()
    except Exception:
        conn.terminate()
