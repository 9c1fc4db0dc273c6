"""The loopback HTTP/1.1 server that answers from a :class:`~.replay.RecordingIndex`, on h11.

h11 (installed with mitmproxy) does the HTTP/1.1 framing: request parsing, ``Expect: 100-continue``,
keep-alive, chunked or length-framed answers. Streams are written event by event with the recorded
pacing; a recording of a cut stream ends the same way (no chunked terminator, connection dropped).

Any local process can connect to it, so it holds nothing open for long: a connection that sends
nothing (between requests) or reads nothing for IDLE_TIMEOUT seconds is closed, and so is one whose
request is not complete IDLE_TIMEOUT seconds after its first byte. At MAX_CONNECTIONS open at once, a new connection closes the one that has waited longest
for a request (mitmproxy opens a new one when it needs it); when none is waiting, the new
connection gets a 503 and is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import h11
import orjson

from ..wire.bodies import BodyError, decode
from ..wire.protocols import protocol_from_path
from .index import (
    MISS_HEADER,
    Recording,
    RecordingIndex,
    canonical_key,
    miss_body,
    split_sse_events,
    wants_stream,
)

logger = logging.getLogger(__name__)

__all__ = ["IDLE_TIMEOUT", "MAX_CONNECTIONS", "MAX_REQUEST_BODY", "ReplayServer"]

#: a request body beyond this is answered 413 (replayed requests are LLM requests, not uploads)
MAX_REQUEST_BODY = 64 * 1024 * 1024
#: seconds a connection may send nothing (idle keep-alive, a stalled request) or read nothing
#: (a stalled response) before it is closed; mitmproxy opens a new one for its next request
IDLE_TIMEOUT = 30.0
#: connections open at once (mitmproxy needs one per client connection waiting for an answer)
MAX_CONNECTIONS = 256
_READ = 65536
_BUSY_BODY = orjson.dumps({"error": {"message": "proxai replay: too many connections, try again"}})
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
         b"content-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class _TooLarge(Exception):
    pass


class ReplayServer:
    """Loopback HTTP/1.1 server answering from a :class:`RecordingIndex`.

    ``await start()`` binds 127.0.0.1 on an ephemeral port (``.port``, ``.url``); ``await stop()``
    closes it and every connection (``close()``: the same without waiting). ``fast=True`` drops the
    recorded pacing. ``adapt_stream=False`` serves recordings as recorded even when the request's
    ``stream`` flag asks for the other kind. Counters: ``hits``, ``misses``; ``log`` holds
    ``(key, hit, flow_id)`` per request. ``idle_timeout`` and ``max_connections``: see the module.
    """

    def __init__(self, index: RecordingIndex, *, fast: bool = False, host: str = "127.0.0.1", port: int = 0,
                 adapt_stream: bool = True, idle_timeout: float = IDLE_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS):
        self.index = index
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.fast = fast
        self.host = host
        self.port = port
        self.adapt_stream = adapt_stream
        self.hits = 0
        self.misses = 0
        self.log: list[tuple[str, bool, str | None]] = []
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        # connections waiting for the first byte of a request, and since when (monotonic)
        self._waiting: dict[asyncio.StreamWriter, float] = {}
        self._warned = float("-inf")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._on_connect, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("proxai replay server on %s (%d recordings, %s)", self.url, len(self.index),
                    "fast" if self.fast else "recorded pacing")

    def close(self) -> None:
        """Stop listening and drop every connection now, without waiting (for synchronous callers such
        as mitmproxy's ``done`` hook, which a script reload calls synchronously)."""
        srv, self._server = self._server, None
        if srv is None:
            return
        srv.close()
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        for t in list(self._tasks):
            t.cancel()

    async def stop(self) -> None:
        srv = self._server
        self.close()
        if srv is None:
            return
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(srv.wait_closed(), 2)

    # ------------------------------------------------------------------------- connections
    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= self.max_connections and not self._evict_one():
            if time.monotonic() - self._warned > 10:  # one line per 10 s, not one per connection of a flood
                self._warned = time.monotonic()
                logger.warning("proxai replay server: %d connections busy; refusing more", len(self._writers))
            writer.write(_BUSY)
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                try:
                    req = await self._read_request(conn, reader, writer)
                except _TooLarge:
                    await self._send(conn, writer, 413, [("content-type", "application/json")],
                                     orjson.dumps({"error": {"message": "proxai replay: request body too large"}}))
                    break
                if req is None:
                    break
                if not await self._answer(conn, writer, *req):
                    break
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except TimeoutError:
            logger.debug("proxai replay server: connection idle for %ss; closed", self.idle_timeout)
            writer.transport.abort()  # a client that reads nothing would keep a graceful close pending
        except (ConnectionError, h11.ProtocolError, asyncio.CancelledError) as e:
            logger.debug("proxai replay server: connection ended: %r", e)
        except Exception:
            logger.exception("proxai replay server: connection failed")
        finally:
            self._writers.discard(writer)
            self._waiting.pop(writer, None)
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                            ) -> tuple[str, str, dict[str, str], bytes] | None:
        request: h11.Request | None = None
        body: list[bytes] = []
        size = 0
        self._waiting[writer] = time.monotonic()
        started: float | None = None  # the first byte: the whole request must follow within idle_timeout
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
                left = self.idle_timeout if started is None else started + self.idle_timeout - time.monotonic()
                data = await asyncio.wait_for(reader.read(_READ), max(left, 0.0))
                if started is None:
                    started = time.monotonic()
                    self._waiting.pop(writer, None)
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_REQUEST_BODY:
                    raise _TooLarge
                body.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # ConnectionClosed, PAUSED
                return None
        assert request is not None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        data = _decoded(b"".join(body), headers.get("content-encoding", ""))
        return request.method.decode("ascii"), request.target.decode("latin-1"), headers, data

    async def _answer(self, conn: h11.Connection, writer: asyncio.StreamWriter, method: str, target: str,
                      headers: dict[str, str], body: bytes) -> bool:
        wants = wants_stream(body)
        rec = self.index.take(method, target, body, stream=wants)
        if rec is None:
            key = canonical_key(method, target, body)
            self.misses += 1
            self.log.append((key, False, None))
            logger.warning("proxai replay miss: %s", key)
            await self._send(conn, writer, 404, [("content-type", "application/json"), (MISS_HEADER, "miss")],
                             orjson.dumps(miss_body(method, target, key)))
            return True
        self.hits += 1
        self.log.append((rec.key, True, rec.flow_id))
        hdrs, rbody, sse, chunks = adapt(rec, wants) if self.adapt_stream else (
            rec.headers, rec.body, rec.sse, rec.chunks)
        hdrs = [*hdrs, (MISS_HEADER, "hit")]
        if rec.flow_id:
            hdrs.append(("x-proxai-replay-flow", rec.flow_id))
        if not sse and not rec.cut:
            await self._send(conn, writer, rec.status, hdrs, rbody)
            return True
        writer.write(_head(conn, rec.status, hdrs, None))
        await self._drain(writer)
        for delay_ms, chunk in chunks:
            if delay_ms > 0 and not self.fast:
                await asyncio.sleep(delay_ms / 1000.0)
            if chunk:
                writer.write(conn.send(h11.Data(data=chunk)))
                await self._drain(writer)
        if rec.cut:
            # the upstream died mid-stream: so does the replay (no chunked terminator)
            await asyncio.sleep(0)
            writer.transport.abort()
            return False
        writer.write(conn.send(h11.EndOfMessage()))
        await self._drain(writer)
        return True

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, status: int,
                    headers: list[tuple[str, str]], body: bytes) -> None:
        writer.write(_head(conn, status, headers, len(body)))
        writer.write(conn.send(h11.Data(data=body)) or b"")
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await self._drain(writer)

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a request; False if none is waiting."""
        if not self._waiting:
            return False
        victim = min(self._waiting, key=self._waiting.__getitem__)
        del self._waiting[victim]
        victim.transport.abort()
        return True

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        """Wait for the client to take what was written, at most idle_timeout seconds."""
        await asyncio.wait_for(writer.drain(), self.idle_timeout)


def _head(conn: h11.Connection, status: int, headers: list[tuple[str, str]], length: int | None) -> bytes:
    """The response head; recorded headers h11 refuses (odd names or values) are left out."""
    out: list[tuple[bytes, bytes]] = []
    for k, v in headers:
        try:
            out.append((k.encode("ascii"), v.encode("latin-1")))
        except UnicodeEncodeError:
            continue
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    try:
        response = h11.Response(status_code=status, headers=out)
    except h11.LocalProtocolError:
        keep = [(k, v) for k, v in out if k.lower() in (b"content-type", b"content-length", MISS_HEADER.encode())]
        response = h11.Response(status_code=status, headers=keep)
    return conn.send(response) or b""


def _decoded(body: bytes, encoding: str) -> bytes:
    """The request body without its content-encoding, never inflated past MAX_REQUEST_BODY."""
    try:
        return decode(body, encoding, MAX_REQUEST_BODY)
    except BodyError as e:  # hash what arrived
        logger.debug("proxai replay server: cannot decode %s request body: %s", encoding, e)
        return body


def adapt(rec: Recording, wants_stream: bool | None) -> tuple[list[tuple[str, str]], bytes, bool, list]:
    """Serve the kind the request asked for (stream or JSON), converting a 200 recording of the
    other kind with proxai_core; anything else is served as recorded."""
    headers, body, sse, chunks = rec.headers, rec.body, rec.sse, rec.chunks
    if wants_stream is None or wants_stream == sse or rec.status != 200:
        return headers, body, sse, chunks
    proto = protocol_from_path(rec.path)
    if proto is None:
        return headers, body, sse, chunks
    try:
        from proxai_core import Exchange

        ex = Exchange(proto, None, stream=wants_stream)
        ex.respond(proto, 200, "text/event-stream" if sse else "application/json", reframe=True)
        new = ex.complete(body).body
        if new is None:
            return headers, body, sse, chunks
        if sse and not wants_stream:
            hdrs = [(k, v) for k, v in headers if k.lower() != "content-type"]
            hdrs.append(("content-type", "application/json"))
            return hdrs, new, False, [(0.0, new)]
        hdrs = [(k, v) for k, v in headers if k.lower() != "content-type"]
        hdrs.append(("content-type", "text/event-stream; charset=utf-8"))
        return hdrs, new, True, [(0.0, ev) for ev in split_sse_events(new)]
    except Exception as e:  # noqa: BLE001 - serve as recorded
        logger.warning("replay: could not convert the recording to %s: %s",
                       "a stream" if wants_stream else "JSON", e)
        return headers, body, sse, chunks
