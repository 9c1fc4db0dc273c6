"""Offline upstream replay: recorded upstream responses served by a loopback HTTP/1.1 server.

The addon (option ``proxai_replay`` = a .mitm file or a folder of them) loads a
:class:`RecordingIndex`, starts a :class:`ReplayServer` on 127.0.0.1 and points every upstream
request at it (rewriting scheme/host/port). The server answers by the canonical key of the request
it receives — the *upstream* request, after translation — so a recording made against one upstream
protocol serves clients of every protocol, through the normal (stream) translation path. Streams are
re-emitted as real chunked HTTP streams, event by event, with the recorded pacing.

Matching rule (:func:`canonical_key`)
-------------------------------------
``METHOD + " " + path + " " + sha256(canonical body)[:24]`` where

* ``path`` is the request path without query string and fragment (``api-version=...`` and any key in
  the query are ignored);
* the canonical body of a JSON *object* is the object without the top-level :data:`VOLATILE_FIELDS`
  (``stream``, ``stream_options``, ``metadata``, ``user``, ``safety_identifier``,
  ``prompt_cache_key``, ``prompt_cache_retention``, ``store``, ``include``, ``service_tier``),
  serialized with sorted keys (at every depth) and no whitespace. Everything else counts, including
  ``model``, ``max_tokens``, ``temperature``, ``tools``, ``tool_choice`` and ``parallel_tool_calls``
  (they change answers). Other JSON values are canonicalized the same way without removals;
* a body that is not JSON is hashed as raw bytes. Bodies are compared decoded (no
  content-encoding): pass ``flow.request.get_content()``, not ``raw_content``.

Because ``stream`` is volatile, one recording answers a streaming and a non-streaming request alike.
When several recordings share a key, those of the requested kind (stream or not) are preferred, and
if the kind differs the server converts (SSE collected into JSON, or JSON re-emitted as a stream)
with :mod:`proxai_core`, so the client still gets what it asked for.

Several recordings with the same key
------------------------------------
They are served **in recorded order, cycling**: the n-th matching request gets recording
``(n - 1) mod k``. A session that retried after a 429 replays as 429 then 200, and replaying the
session again reproduces it again. :meth:`RecordingIndex.reset` restarts every cycle.

What a recording is made of
---------------------------
For each recorded HTTP flow that has a response: the key of ``flow.request`` (the request as sent
upstream: ``-w`` saves the rewritten request), the status, the response headers, and the raw upstream
body — ``flow.metadata["proxai"]["upstream_response"]`` when present (for a translated flow the saved
response content is what the *client* got), else ``flow.response.content``. Optional metadata the
addon may add: ``upstream_status`` (int) and ``upstream_headers`` (list of [name, value]) when the
client saw a different status/headers, ``upstream_chunks`` (pacing, below), ``upstream_cut`` (bool).

Pacing: ``flow.metadata["proxai"]["upstream_chunks"]`` = ``[[offset_ms, n_bytes], ...]`` (offset from
the response headers; bytes of the raw upstream body in order) when present; otherwise the SSE body
is split into events spread evenly between ``response.timestamp_start`` and ``timestamp_end``. The
server sleeps the recorded gap before each chunk (so every gap is at least the recorded one); the
time before the response headers is not reproduced. ``fast=True`` sends everything without delays.
A flow that ended with an upstream error after its headers (a cut stream) is replayed cut: the
recorded chunks, then the connection is closed without the chunked terminator.

Misses: ``404`` with ``x-proxai-replay: miss`` and a JSON body
``{"type": "error", "error": {"type": "not_found_error", "code": "proxai_replay_miss", "message":
"proxai replay: no recording matches POST /v1/messages (key ...)"}}``; the addon turns it into the
client's native error (option ``proxai_replay_miss=error``), or checks :meth:`RecordingIndex.find`
before redirecting and forwards misses upstream (``proxai_replay_miss=forward``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

logger = logging.getLogger(__name__)

__all__ = [
    "MISS_HEADER",
    "VOLATILE_FIELDS",
    "Recording",
    "RecordingIndex",
    "ReplayServer",
    "canonical_body",
    "canonical_key",
    "split_sse_events",
]

#: Top-level request fields that do not change the answer (removed before hashing).
VOLATILE_FIELDS = frozenset({
    "stream",
    "stream_options",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "store",
    "include",
    "service_tier",
})

MISS_HEADER = "x-proxai-replay"

#: Response headers never replayed (framing and hop-by-hop; the server sets its own).
_DROP_HEADERS = frozenset({
    "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding",
    "proxy-connection", "upgrade", "te", "trailer", "date", "server", "set-cookie", "alt-svc",
})


# ----------------------------------------------------------------------------- matching
def canonical_body(body: bytes | None) -> bytes:
    """The canonical form the key hashes (see the module docstring)."""
    body = body or b""
    try:
        obj = orjson.loads(body) if body.strip() else None
    except orjson.JSONDecodeError:
        return b"raw:" + body
    if obj is None and not body.strip():
        return b""
    if isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k not in VOLATILE_FIELDS}
    from proxai_core import TranslationError, dumps

    try:
        return b"json:" + dumps(obj, sort_keys=True)
    except (TranslationError, TypeError):  # unwritable (too deep even for the stdlib): match byte for byte
        return b"raw:" + body


def _path_only(path: str) -> str:
    p = path or "/"
    if "://" in p:
        p = "/" + p.split("://", 1)[1].partition("/")[2]
    p = p.split("#", 1)[0].split("?", 1)[0]
    return p or "/"


def canonical_key(method: str | bytes, path: str | bytes, body_bytes: bytes | None) -> str:
    """``"POST /v1/messages 3f2a…"``: method, path without query, hash of the canonical body."""
    if isinstance(method, bytes):
        method = method.decode("ascii", "replace")
    if isinstance(path, bytes):
        path = path.decode("utf-8", "replace")
    digest = hashlib.sha256(canonical_body(body_bytes)).hexdigest()[:24]
    return f"{method.upper()} {_path_only(path)} {digest}"


_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def split_sse_events(body: bytes) -> list[bytes]:
    """An SSE body as its events, each with its terminating blank line (the bytes join back to the
    body exactly; a trailing partial event is the last element)."""
    out: list[bytes] = []
    pos = 0
    for m in _EVENT_END.finditer(body):
        out.append(body[pos:m.end()])
        pos = m.end()
    if pos < len(body):
        out.append(body[pos:])
    return out


def _is_sse(body: bytes, content_type: str | None) -> bool:
    head = body[:200].lstrip()
    if head.startswith((b"{", b"[")):
        return False
    if content_type and "event-stream" in content_type.lower():
        return True
    return head.startswith((b"event:", b"data:", b"id:", b":"))


def _wants_stream(body: bytes) -> bool | None:
    try:
        obj = orjson.loads(body) if body and body.strip() else None
    except orjson.JSONDecodeError:
        return None
    if isinstance(obj, dict):
        return bool(obj.get("stream", False))
    return None


# ----------------------------------------------------------------------------- recordings
@dataclass
class Recording:
    key: str
    method: str
    path: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    sse: bool
    #: (delay before this chunk in ms, chunk bytes), in order; the delays are gaps, not offsets
    chunks: list[tuple[float, bytes]]
    cut: bool = False
    flow_id: str | None = None
    source: str = ""
    request_stream: bool | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def content_type(self) -> str | None:
        for k, v in self.headers:
            if k.lower() == "content-type":
                return v
        return None

    @property
    def total_delay_ms(self) -> float:
        return sum(d for d, _ in self.chunks)


def _header_pairs(h: Any) -> list[tuple[str, str]]:
    if h is None:
        return []
    if hasattr(h, "fields"):
        return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in h.fields]
    if isinstance(h, dict):
        return [(str(k), str(v)) for k, v in h.items()]
    out = []
    for pair in h:
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            k, v = pair
            k = k.decode("latin-1") if isinstance(k, bytes) else str(k)
            v = v.decode("latin-1") if isinstance(v, bytes) else str(v)
            out.append((k, v))
    return out


def _pacing(body: bytes, sse: bool, meta: dict[str, Any], resp: Any) -> list[tuple[float, bytes]]:
    """Chunks with the gap (ms) to wait before each."""
    if not sse:
        return [(0.0, body)]
    recorded = meta.get("upstream_chunks")
    if isinstance(recorded, list) and recorded:
        try:
            pairs = [(float(o), int(nb)) for o, nb in recorded]
        except (TypeError, ValueError):
            pairs = []
        if pairs and sum(nb for _, nb in pairs) == len(body):
            out: list[tuple[float, bytes]] = []
            pos, prev = 0, 0.0
            for off, nb in pairs:
                out.append((max(0.0, off - prev), body[pos:pos + nb]))
                pos += nb
                prev = max(prev, off)
            return [c for c in out if c[1]] or [(0.0, body)]
        if pairs:
            logger.debug("upstream_chunks do not add up to the body (%d bytes); pacing derived", len(body))
    events = split_sse_events(body)
    if not events:
        return [(0.0, body)]
    duration_ms = 0.0
    ts0, ts1 = getattr(resp, "timestamp_start", None), getattr(resp, "timestamp_end", None)
    if ts0 and ts1 and ts1 > ts0:
        duration_ms = (ts1 - ts0) * 1000.0
    gap = duration_ms / (len(events) - 1) if len(events) > 1 else 0.0
    return [(0.0 if i == 0 else gap, ev) for i, ev in enumerate(events)]


def recording_from_flow(flow: Any, source: str = "") -> Recording | None:
    """A :class:`Recording` of one saved HTTP flow, or None when it has nothing to replay."""
    req = getattr(flow, "request", None)
    resp = getattr(flow, "response", None)
    if req is None or resp is None:
        return None
    md = getattr(flow, "metadata", None) or {}
    meta = md.get("proxai") if isinstance(md.get("proxai"), dict) else {}
    try:
        req_body = req.get_content(strict=False) if req.raw_content is not None else b""
    except Exception:  # noqa: BLE001
        req_body = req.raw_content or b""
    up = meta.get("upstream_response")
    if isinstance(up, str):
        body = up.encode("utf-8", "surrogatepass")
    elif isinstance(up, bytes):
        body = up
    elif resp.raw_content is not None:
        try:
            body = resp.get_content(strict=False) or b""
        except Exception:  # noqa: BLE001
            body = resp.raw_content
    else:
        logger.info("replay: flow %s has no stored response body (streamed without "
                    "store_streamed_bodies and without proxai metadata); skipped", getattr(flow, "id", "?"))
        return None
    status = meta.get("upstream_status") if isinstance(meta.get("upstream_status"), int) else resp.status_code
    headers = _header_pairs(meta.get("upstream_headers")) or _header_pairs(resp.headers)
    headers = [(k, v) for k, v in headers if k.lower() not in _DROP_HEADERS and not k.startswith(":")]
    ctype = next((v for k, v in headers if k.lower() == "content-type"), None)
    sse = _is_sse(body, ctype)
    if sse and (not ctype or "event-stream" not in ctype.lower()):
        headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        headers.append(("content-type", "text/event-stream; charset=utf-8"))
    elif not ctype and body.lstrip()[:1] in (b"{", b"["):
        headers.append(("content-type", "application/json"))
    err = getattr(flow, "error", None)
    cut = bool(meta.get("upstream_cut")) if "upstream_cut" in meta else (
        err is not None and "client" not in str(getattr(err, "msg", "")).lower())
    return Recording(
        key=canonical_key(req.method, req.path, req_body),
        method=req.method.upper(),
        path=_path_only(req.path),
        status=int(status),
        headers=headers,
        body=body,
        sse=sse,
        chunks=_pacing(body, sse, meta, resp),
        cut=cut,
        flow_id=getattr(flow, "id", None),
        source=source,
        request_stream=_wants_stream(req_body),
        metadata=dict(meta),
    )


class RecordingIndex:
    """Recordings by canonical key, served in recorded order, cycling (see the module docstring)."""

    def __init__(self) -> None:
        self._by_key: dict[str, list[Recording]] = {}
        self._next: dict[tuple[str, bool | None], int] = {}
        self.sources: list[str] = []
        self.skipped = 0

    # -- building
    @classmethod
    def load(cls, path: str | Path) -> RecordingIndex:
        """Read a .mitm file, or every ``*.mitm`` file under a folder (sorted by path)."""
        from mitmproxy import http, io
        from mitmproxy.exceptions import FlowReadException

        idx = cls()
        p = Path(path).expanduser()
        if p.is_dir():
            files = sorted(p.rglob("*.mitm"))
        elif p.exists():
            files = [p]
        else:
            raise FileNotFoundError(f"proxai replay: {p} does not exist")
        for fp in files:
            with open(fp, "rb") as fh:
                try:
                    for f in io.FlowReader(fh).stream():
                        if isinstance(f, http.HTTPFlow):
                            idx.add_flow(f, str(fp))
                except FlowReadException as e:
                    raise ValueError(f"proxai replay: cannot read {fp}: {e}") from e
            idx.sources.append(str(fp))
        return idx

    @classmethod
    def from_flows(cls, flows: Iterable[Any]) -> RecordingIndex:
        idx = cls()
        for f in flows:
            idx.add_flow(f)
        return idx

    def add_flow(self, flow: Any, source: str = "") -> Recording | None:
        rec = recording_from_flow(flow, source)
        if rec is None:
            self.skipped += 1
            return None
        self.add(rec)
        return rec

    def add(self, rec: Recording) -> None:
        self._by_key.setdefault(rec.key, []).append(rec)

    # -- lookup
    def __len__(self) -> int:
        return sum(len(v) for v in self._by_key.values())

    def keys(self) -> list[str]:
        return list(self._by_key)

    def recordings(self, key: str) -> list[Recording]:
        return list(self._by_key.get(key, ()))

    def _candidates(self, key: str, stream: bool | None) -> tuple[list[Recording], bool | None]:
        recs = self._by_key.get(key)
        if not recs:
            return [], None
        if stream is not None:
            same = [r for r in recs if r.sse == stream]
            if same and len(same) != len(recs):
                return same, stream
        return recs, None

    def find(self, method: str, path: str, body: bytes | None, stream: bool | None = None) -> Recording | None:
        """The recording the next matching request would get, without consuming it."""
        key = canonical_key(method, path, body)
        recs, kind = self._candidates(key, stream)
        if not recs:
            return None
        return recs[self._next.get((key, kind), 0) % len(recs)]

    def take(self, method: str, path: str, body: bytes | None, stream: bool | None = None) -> Recording | None:
        """The next recording for this request (advances the cycle), or None on a miss."""
        key = canonical_key(method, path, body)
        recs, kind = self._candidates(key, stream)
        if not recs:
            return None
        i = self._next.get((key, kind), 0)
        self._next[(key, kind)] = i + 1
        return recs[i % len(recs)]

    def reset(self) -> None:
        self._next.clear()


# ----------------------------------------------------------------------------- server
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout", 529: "Overloaded"}


def miss_body(method: str, path: str, key: str) -> dict[str, Any]:
    msg = f"proxai replay: no recording matches {method.upper()} {_path_only(path)} (key {key})"
    return {"type": "error",
            "error": {"type": "not_found_error", "code": "proxai_replay_miss", "message": msg, "key": key}}


def _adapt(rec: Recording, wants_stream: bool | None) -> tuple[list[tuple[str, str]], bytes, bool, list]:
    """Serve the kind the request asked for (stream or JSON), converting a 200 recording of the
    other kind with proxai_core; anything else is served as recorded."""
    headers, body, sse, chunks = rec.headers, rec.body, rec.sse, rec.chunks
    if wants_stream is None or wants_stream == sse or rec.status != 200:
        return headers, body, sse, chunks
    from .report import protocol_from_path

    proto = protocol_from_path(rec.path)
    if proto is None:
        return headers, body, sse, chunks
    try:
        from proxai_core import dumps, response_from_stream, stream_from_response

        if sse and not wants_stream:
            res = response_from_stream(body, proto, proto)
            new = dumps(res.body)
            hdrs = [(k, v) for k, v in headers if k.lower() != "content-type"]
            hdrs.append(("content-type", "application/json"))
            return hdrs, new, False, [(0.0, new)]
        obj = orjson.loads(body)
        new, _stop, _w = stream_from_response(obj, proto, proto)
        hdrs = [(k, v) for k, v in headers if k.lower() != "content-type"]
        hdrs.append(("content-type", "text/event-stream; charset=utf-8"))
        return hdrs, new, True, [(0.0, ev) for ev in split_sse_events(new)]
    except Exception as e:  # noqa: BLE001 - serve as recorded
        logger.warning("replay: could not convert the recording to %s: %s",
                       "a stream" if wants_stream else "JSON", e)
        return headers, body, sse, chunks


class ReplayServer:
    """Loopback HTTP/1.1 server answering from a :class:`RecordingIndex`.

    ``await start()`` binds 127.0.0.1 on an ephemeral port (``.port``, ``.url``); ``await stop()``
    closes it and every connection (``close()``: the same without waiting). ``fast=True`` drops the
    recorded pacing. ``adapt_stream=False`` serves recordings as recorded even when the request's ``stream`` flag asks for the other kind.
    Counters: ``hits``, ``misses``; ``log`` holds ``(key, hit, flow_id)`` per request.
    """

    def __init__(self, index: RecordingIndex, *, fast: bool = False, host: str = "127.0.0.1", port: int = 0,
                 adapt_stream: bool = True):
        self.index = index
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

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._on_connect, self.host, self.port, limit=1 << 20)
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

    # -- connection handling
    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                req = await self._read_request(reader, writer)
                if req is None:
                    break
                keep = await self._answer(writer, *req)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.CancelledError) as e:
            logger.debug("proxai replay server: connection ended: %r", e)
        except Exception:
            logger.exception("proxai replay server: connection failed")
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                            ) -> tuple[str, str, list[tuple[str, str]], bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) < 3:
            return None
        method, target = parts[0], parts[1]
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line:
                continue
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
        hmap = {k.lower(): v for k, v in headers}
        if hmap.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = b""
        if "chunked" in hmap.get("transfer-encoding", "").lower():
            pieces = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                pieces.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(pieces)
        elif hmap.get("content-length"):
            body = await reader.readexactly(int(hmap["content-length"]))
        enc = hmap.get("content-encoding", "").strip().lower()
        if enc and enc != "identity" and body:
            try:
                from mitmproxy.net import encoding

                body = encoding.decode(body, enc)  # type: ignore[assignment]
            except Exception as e:  # noqa: BLE001 - hash what arrived
                logger.debug("proxai replay server: cannot decode %s request body: %s", enc, e)
        return method, target, headers, body

    async def _answer(self, writer: asyncio.StreamWriter, method: str, target: str,
                      headers: list[tuple[str, str]], body: bytes) -> bool:
        hmap = {k.lower(): v for k, v in headers}
        keep_alive = hmap.get("connection", "").lower() != "close"
        wants = _wants_stream(body)
        key = canonical_key(method, target, body)
        rec = self.index.take(method, target, body, stream=wants)
        if rec is None:
            self.misses += 1
            self.log.append((key, False, None))
            logger.warning("proxai replay miss: %s", key)
            payload = orjson.dumps(miss_body(method, target, key))
            self._write_head(writer, 404, [("content-type", "application/json"), (MISS_HEADER, "miss")],
                             length=len(payload), keep_alive=keep_alive)
            writer.write(payload)
            await writer.drain()
            return keep_alive
        self.hits += 1
        self.log.append((key, True, rec.flow_id))
        hdrs, rbody, sse, chunks = (_adapt(rec, wants) if self.adapt_stream
                                    else (rec.headers, rec.body, rec.sse, rec.chunks))
        extra = [(MISS_HEADER, "hit")]
        if rec.flow_id:
            extra.append(("x-proxai-replay-flow", rec.flow_id))
        if not sse and not rec.cut:
            self._write_head(writer, rec.status, hdrs + extra, length=len(rbody), keep_alive=keep_alive)
            writer.write(rbody)
            await writer.drain()
            return keep_alive
        self._write_head(writer, rec.status, hdrs + extra, length=None, keep_alive=keep_alive)
        await writer.drain()
        for delay_ms, chunk in chunks:
            if delay_ms > 0 and not self.fast:
                await asyncio.sleep(delay_ms / 1000.0)
            if chunk:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        if rec.cut:
            # the upstream died mid-stream: so does the replay (no chunked terminator)
            await asyncio.sleep(0)
            writer.transport.abort()
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return keep_alive

    @staticmethod
    def _write_head(writer: asyncio.StreamWriter, status: int, headers: list[tuple[str, str]], *,
                    length: int | None, keep_alive: bool) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if length is None:
            lines.append("transfer-encoding: chunked")
        else:
            lines.append(f"content-length: {length}")
        lines.append("connection: keep-alive" if keep_alive else "connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace"))
