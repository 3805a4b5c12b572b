"""A TCP proxy in front of the test server, to break connections on cue.

`FaultyProxy(upstream_host, upstream_port)` forwards bytes both ways, and on request:
- `refuse()` closes every connection and refuses new ones until `accept()` (the server
  seems down, though the real one serves the other tests undisturbed);
- `lose_next_reply()`: the next bytes the server sends on any connection are dropped
  and that connection is closed (the statement ran; its reply never arrives);
- `linger_close(seconds)`: when the server closes a connection, its last bytes are
  passed on at once but the close only `seconds` later (as when the client's loop
  reads the server's goodbye before the end of the stream).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit


class FaultyProxy:
    def __init__(self, upstream_dsn: str) -> None:
        parts = urlsplit(upstream_dsn)
        self._dsn_parts = parts
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 5432
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._refusing = False
        self._lose_reply = False
        self._linger = 0.0
        self.port = 0

    @property
    def dsn(self) -> str:
        """The upstream DSN with the proxy's address in place of the server's."""
        parts = self._dsn_parts
        user = f"{parts.username}@" if parts.username else ""
        netloc = f"{user}127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    async def __aenter__(self) -> FaultyProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        self._cut_all()
        await self._server.wait_closed()

    def refuse(self) -> None:
        self._refusing = True
        self._cut_all()

    def accept(self) -> None:
        self._refusing = False

    def lose_next_reply(self) -> None:
        self._lose_reply = True

    def linger_close(self, seconds: float) -> None:
        self._linger = seconds

    def _cut_all(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self._refusing:
            client_w.transport.abort()
            return
        try:
            server_r, server_w = await asyncio.open_connection(self._host, self._port)
        except OSError:
            client_w.transport.abort()
            return
        self._writers |= {client_w, server_w}
        upstream = asyncio.create_task(self._pipe(client_r, server_w, to_client=False))
        downstream = asyncio.create_task(self._pipe(server_r, client_w, to_client=True))
        try:
            await asyncio.wait([upstream, downstream], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (upstream, downstream):
                task.cancel()
            for writer in (client_w, server_w):
                self._writers.discard(writer)
                writer.transport.abort()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, to_client: bool
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if to_client and self._lose_reply:
                    self._lose_reply = False
                    return  # drop the reply, and the connection with it
                writer.write(data)
                await writer.drain()
            if to_client and self._linger:
                await asyncio.sleep(self._linger)  # the goodbye is through; the close waits
