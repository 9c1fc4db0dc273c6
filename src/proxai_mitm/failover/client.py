"""A small HTTP/1.1 client for upstream attempts, on h11 and asyncio streams, with keep-alive.

The attempt server sends each attempt itself (mitmproxy's own connection can carry only one), so
it needs a client that never blocks the event loop, verifies TLS as mitmproxy does, reuses
connections (a failover route's steady traffic must not pay a handshake per request), and bounds
what it reads: a response head within the attempt's timeout, an error body up to ERROR_BODY bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import h11
from h11 import Response

__all__ = ["ERROR_BODY", "Connection", "Pool", "UpstreamError", "tls_context"]

#: bytes of a failed attempt's body kept (the reason and reset hints are in its first bytes)
ERROR_BODY = 256 * 1024
#: idle keep-alive connections kept per upstream, and for how long
IDLE_PER_HOST = 8
IDLE_SECONDS = 30.0
_READ = 65536


class UpstreamError(Exception):
    """An attempt that got no response head: ``kind`` is connect | tls | timeout | protocol."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def tls_context(insecure: bool = False, cafile: str | None = None, capath: str | None = None) -> ssl.SSLContext:
    """Verification as mitmproxy's upstream side does it: certifi's roots (or the user's CA file or
    directory), none at all with ``ssl_insecure``; HTTP/1.1 offered by ALPN."""
    import certifi

    if insecure:
        sc = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        sc.check_hostname = False
        sc.verify_mode = ssl.CERT_NONE
    elif cafile or capath:
        sc = ssl.create_default_context(cafile=cafile, capath=capath)
    else:
        sc = ssl.create_default_context(cafile=certifi.where())
    sc.set_alpn_protocols(["http/1.1"])
    return sc


@dataclass(eq=False)
class Connection:
    """One upstream connection and its h11 state."""

    key: tuple[str, str, int]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    h11: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))
    idle_since: float = 0.0
    #: taken from the pool (it may have been closed by the upstream meanwhile)
    reused: bool = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.transport.abort()

    async def _event(self, timeout: float | None) -> object:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await asyncio.wait_for(self.reader.read(_READ), timeout)
            self.h11.receive_data(data)

    async def send(self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes,
                   timeout: float) -> Response:  # (in this class ``h11`` names the field)
        """Send a request and wait (``timeout`` seconds at most) for its response head."""
        if body or method not in ("GET", "HEAD"):
            headers = [*headers, (b"content-length", str(len(body)).encode())]
        try:
            self.writer.write(self.h11.send(h11.Request(method=method, target=target, headers=headers)) or b"")
            if body:
                self.writer.write(self.h11.send(h11.Data(data=body)) or b"")
            self.writer.write(self.h11.send(h11.EndOfMessage()) or b"")
            deadline = time.monotonic() + timeout
            await asyncio.wait_for(self.writer.drain(), timeout)
            while True:
                event = await self._event(max(deadline - time.monotonic(), 0.0))
                if isinstance(event, h11.Response):
                    return event
                if isinstance(event, h11.ConnectionClosed):
                    raise UpstreamError("protocol", "the upstream closed the connection before answering")
                # an informational (1xx) response: wait on for the real one
        except TimeoutError:
            raise UpstreamError("timeout", f"no response headers within {timeout:g} s") from None
        except (ConnectionError, OSError) as e:
            raise UpstreamError("protocol", f"the connection broke before the answer: {e}") from None
        except h11.ProtocolError as e:
            raise UpstreamError("protocol", f"the upstream's answer is not HTTP/1.1: {e}") from None

    async def body(self, idle_timeout: float | None) -> AsyncIterator[bytes]:
        """The response body as it arrives (each read within ``idle_timeout``); raises on a cut."""
        while True:
            event = await self._event(idle_timeout)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the upstream closed the connection inside the body")

    async def read_body(self, limit: int, timeout: float) -> bytes:
        """The whole body up to ``limit`` bytes (the rest is dropped with the connection)."""
        out = bytearray()
        deadline = time.monotonic() + timeout
        async for chunk in self.body(max(deadline - time.monotonic(), 0.01)):
            out += chunk
            if len(out) >= limit:
                self.h11 = h11.Connection(h11.CLIENT)  # unusable now: not reused
                self.writer.transport.abort()
                return bytes(out[:limit])
        return bytes(out)

    @property
    def reusable(self) -> bool:
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE


class Pool:
    """Keep-alive connections by (scheme, host, port), at most IDLE_PER_HOST idle each."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}

    async def open(self, scheme: str, host: str, port: int, timeout: float) -> Connection:
        key = (scheme, host, port)
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < IDLE_SECONDS and not conn.reader.at_eof() \
                    and not conn.writer.transport.is_closing():
                conn.reused = True
                return conn
            conn.close()
        tls = None
        if scheme == "https":
            tls = self.tls if self.tls is not None else tls_context()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls, server_hostname=host if tls else None,
                                        limit=_READ * 4), timeout)
        except TimeoutError:
            raise UpstreamError("timeout", f"connecting to {host}:{port} took more than {timeout:g} s") from None
        except ssl.SSLError as e:
            raise UpstreamError("tls", f"TLS with {host}:{port} failed: {e.reason or e}") from None
        except OSError as e:
            raise UpstreamError("connect", f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        return Connection(key, reader, writer)

    async def request(self, scheme: str, host: str, port: int, method: str, target: str,
                      headers: list[tuple[bytes, bytes]], body: bytes, timeout: float
                      ) -> tuple[Connection, h11.Response]:
        """Send a request on a pooled or new connection; a kept-alive connection the upstream closed
        meanwhile is replaced once (that is no failure of the upstream)."""
        conn = await self.open(scheme, host, port, timeout)
        try:
            return conn, await conn.send(method, target, headers, body, timeout)
        except UpstreamError as e:
            conn.close()
            if not conn.reused or e.kind != "protocol":
                raise
        conn = await self.open(scheme, host, port, timeout)
        try:
            return conn, await conn.send(method, target, headers, body, timeout)
        except BaseException:
            conn.close()
            raise

    def release(self, conn: Connection) -> None:
        """Back to the pool if the exchange ended cleanly, else closed."""
        if not conn.reusable:
            conn.close()
            return
        conn.h11.start_next_cycle()
        conn.reused = False
        conn.idle_since = time.monotonic()
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= IDLE_PER_HOST:
            idle.pop(0).close()
        idle.append(conn)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
