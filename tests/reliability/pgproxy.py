"""A real TCP proxy in front of PostgreSQL that can lose connections on purpose.

It forwards bytes both ways and reads the server's messages (type byte + length), so
it can:

* ``lose_ack``: after the server has COMMITTED a write (a ``CommandComplete`` for
  ``INSERT``/``COMMIT`` followed by ``ReadyForQuery``), close the client connection
  without forwarding the answer: the write is durable, the client cannot know;
* ``down``: close every connection and refuse new ones (the server "goes away").

Clients must connect with ``sslmode=disable`` (the proxy reads the plain protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from urllib.parse import urlsplit, urlunsplit

from .harness import PG_DSN, with_query


class PgProxy:
    def __init__(self, upstream_dsn: str = PG_DSN) -> None:
        parts = urlsplit(upstream_dsn)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 5432
        self._upstream_dsn = upstream_dsn
        self.down = False
        self.lose_ack = 0
        self.acks_lost = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> PgProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def dsn(self, **params: str) -> str:
        """The upstream DSN with host:port replaced by the proxy's."""
        parts = urlsplit(self._upstream_dsn)
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        url = urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{self.port}"))
        return with_query(url, sslmode="disable", **params)

    def cut_all(self) -> None:
        """Close every proxied connection now (both directions)."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def go_down(self) -> None:
        self.down = True
        self.cut_all()

    def come_up(self) -> None:
        self.down = False

    async def close(self) -> None:
        self.cut_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        if self.down:
            cwriter.transport.abort()
            return
        try:
            sreader, swriter = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            cwriter.transport.abort()
            return
        self._writers.update((cwriter, swriter))
        up = asyncio.ensure_future(self._pump_up(creader, swriter))
        down = asyncio.ensure_future(self._pump_down(sreader, cwriter, swriter))
        self._tasks.update((up, down))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for writer in (cwriter, swriter):
                writer.transport.abort()
                self._writers.discard(writer)
            for task in (up, down):
                task.cancel()
                self._tasks.discard(task)

    async def _pump_up(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            writer.write(data)
            await writer.drain()

    async def _pump_down(
        self,
        reader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        swriter: asyncio.StreamWriter,
    ) -> None:
        held: list[bytes] = []  # messages withheld while a lost ack is being staged
        committed = False
        while True:
            head = await reader.readexactly(5)
            kind, length = head[:1], struct.unpack("!i", head[1:])[0]
            body = await reader.readexactly(length - 4)
            message = head + body
            if self.lose_ack and kind == b"C" and body.startswith((b"INSERT", b"COMMIT")):
                committed = True
            if committed:
                held.append(message)
                if kind == b"Z":  # ReadyForQuery: the server has committed
                    self.lose_ack -= 1
                    self.acks_lost += 1
                    cwriter.transport.abort()
                    swriter.transport.abort()
                    return
                continue
            cwriter.write(message)
            await cwriter.drain()
