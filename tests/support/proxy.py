"""A TCP proxy for tests (asyncio streams on 127.0.0.1) that breaks connections on cue,
while the server behind it serves the other tests undisturbed.

`Proxy(dsn)` forwards bytes both ways; `proxy.dsn` is `dsn` with the proxy's address.
- `partition()` / `heal()`: nothing passes either way, connections stay open (a network
  partition), then everything flows again;
- `cut()`: close every connection (the server or the network reset them);
- `refuse()` / `accept()` (or the `refusing` flag): close every connection and refuse
  new ones (the server seems down), then accept again;
- `lose_next_reply()`: the next bytes the server sends on any connection are dropped and
  that connection is closed (the statement ran; its reply never arrives);
- `linger_close(seconds)`: when the server closes a connection, its last bytes are passed
  on at once but the close only `seconds` later (as when the client's loop reads the
  server's goodbye before the end of the stream);
- `slow_accept(seconds)`: each new connection reaches the server `seconds` late (a
  server far away, or busy forking backends).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


class Proxy:
    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        # The embedded server's DSN names a Unix socket folder as ?host=...&port=...
        query = dict(parse_qsl(parts.query))
        host = query.pop("host", None) or parts.hostname or "127.0.0.1"
        port = int(query.pop("port", None) or parts.port or 5432)
        self._upstream = (host, port)
        self._dsn = parts._replace(query=urlencode(query))
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.refusing = False  # new connections are closed at once
        self._lose_reply = False
        self._linger = 0.0
        self._accept_delay = 0.0
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

    def refuse(self) -> None:
        """Close every connection and refuse new ones until accept()."""
        self.refusing = True
        self.cut()

    def accept(self) -> None:
        self.refusing = False

    def lose_next_reply(self) -> None:
        self._lose_reply = True

    def linger_close(self, seconds: float) -> None:
        self._linger = seconds

    def slow_accept(self, seconds: float) -> None:
        self._accept_delay = seconds

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._accept_delay:
            await asyncio.sleep(self._accept_delay)
        if self.refusing:
            writer.transport.abort()
            return
        try:
            host, port = self._upstream
            if host.startswith("/"):
                path = os.path.join(host, f".s.PGSQL.{port}")
                up_reader, up_writer = await asyncio.open_unix_connection(path)
            else:
                up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._writers.update((writer, up_writer))
        for source, target, to_client in ((reader, up_writer, False), (up_reader, writer, True)):
            pump = asyncio.ensure_future(self._pump(source, target, to_client=to_client))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self, source: asyncio.StreamReader, target: asyncio.StreamWriter, *, to_client: bool
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ConnectionError):
            while data := await source.read(65536):
                await self._flowing.wait()
                if target.transport.is_closing():
                    break
                if to_client and self._lose_reply:
                    self._lose_reply = False
                    break  # drop the reply, and the connection with it
                target.write(data)
                await target.drain()
            else:
                if to_client and self._linger:
                    await asyncio.sleep(self._linger)  # the goodbye is through; the close waits
        target.transport.abort()
        self._writers.discard(target)
