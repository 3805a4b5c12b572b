"""A TCP proxy for tests (asyncio streams on 127.0.0.1): partitions a client from the
server (nothing passes, nothing is closed), heals, or cuts every connection."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit


class Proxy:
    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._dsn = parts
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.refusing = False  # new connections are closed at once
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()
        self.connections = 0

    async def __aenter__(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    @property
    def dsn(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        netloc = self._dsn.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{port}"
        return urlunsplit(
            self._dsn._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host)
        )

    def partition(self) -> None:
        """Nothing passes either way; connections stay open (a network partition)."""
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Close every connection (the server or the network reset them)."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._writers.update((writer, up_writer))
        for source, target in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.ensure_future(self._pump(source, target))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(self, source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while data := await source.read(65536):
                await self._flowing.wait()
                if target.transport.is_closing():
                    break
                target.write(data)
                await target.drain()
        target.transport.abort()
        self._writers.discard(target)
