"""Offline upstream replay: the recording index and the matching key.

The addon (option ``proxai_replay`` = a .mitm file or a folder of them) loads a
:class:`RecordingIndex`; the loopback server (replay_server.py) answers the *upstream* request (after
translation) by its canonical key, so a recording made against one upstream protocol serves clients
of every protocol through the normal translation path. docs/recording.md ("Replay offline") is the
user's reference: the matching rule, pacing, misses.

Matching (:func:`canonical_key`): ``METHOD + " " + path + " " + sha256(canonical body)[:24]``; the path
without query and fragment; a JSON object body without the top-level :data:`VOLATILE_FIELDS`,
serialized with sorted keys and no whitespace (everything else counts: model, max_tokens, tools...);
other bodies hashed as raw bytes. Bodies are compared decoded (no content-encoding). Several
recordings with one key are served in recorded order, cycling (a 429 then a 200 replays as such);
those of the requested kind (stream or not) first.

A recording is the key of ``flow.request`` (the request as sent upstream) and, from the flow's
:class:`~.record.FlowRecord`, the upstream's status, headers, body, chunk timing (``upstream_chunks``;
without it the SSE events are spread evenly over the recorded duration) and whether it was cut
(replayed cut: the recorded chunks, then the connection closed without the chunked terminator).
Misses: ``404`` with ``x-proxai-replay: miss`` and an error body naming the key (:func:`miss_body`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from proxai_core.codecs import all_codecs

from ..flow.record import FlowRecord, read_body
from ..wire.protocols import request_stream

logger = logging.getLogger(__name__)

__all__ = [
    "MISS_HEADER",
    "VOLATILE_FIELDS",
    "Recording",
    "RecordingIndex",
    "canonical_body",
    "canonical_key",
    "miss_body",
    "split_sse_events",
    "wants_stream",
]

#: top-level request fields that do not change the answer (removed before hashing), in any protocol:
#: every codec's stream flag, stream options and volatile fields
VOLATILE_FIELDS = frozenset(
    f for c in all_codecs()
    for f in (c.wire.fields.stream, c.wire.fields.stream_options, *c.wire.fields.volatile) if f)

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


def wants_stream(body: bytes) -> bool | None:
    try:
        obj = orjson.loads(body) if body and body.strip() else None
    except orjson.JSONDecodeError:
        return None
    if isinstance(obj, dict):
        return request_stream(obj)
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


def _pacing(body: bytes, sse: bool, recorded: list[tuple[float, int]] | None, resp: Any
            ) -> list[tuple[float, bytes]]:
    """Chunks with the gap (ms) to wait before each."""
    if not sse:
        return [(0.0, body)]
    if recorded:
        pairs = [(float(o), int(nb)) for o, nb in recorded]
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
    rec = FlowRecord.of(flow)
    req_body = read_body(req) or b""
    body = rec.upstream_body(flow) if rec is not None else read_body(resp)
    if body is None:
        logger.info("replay: flow %s has no stored response body (streamed without "
                    "store_streamed_bodies and without proxai metadata); skipped", getattr(flow, "id", "?"))
        return None
    status = rec.upstream_status if rec is not None and rec.upstream_status is not None else resp.status_code
    headers = (rec.upstream_headers if rec is not None else None) or _header_pairs(resp.headers)
    headers = [(k, v) for k, v in headers if k.lower() not in _DROP_HEADERS and not k.startswith(":")]
    ctype = next((v for k, v in headers if k.lower() == "content-type"), None)
    sse = _is_sse(body, ctype)
    if sse and (not ctype or "event-stream" not in ctype.lower()):
        headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        headers.append(("content-type", "text/event-stream; charset=utf-8"))
    elif not ctype and body.lstrip()[:1] in (b"{", b"["):
        headers.append(("content-type", "application/json"))
    err = getattr(flow, "error", None)
    if rec is not None and rec.upstream_cut is not None:
        cut = rec.upstream_cut
    else:
        cut = err is not None and "client" not in str(getattr(err, "msg", "")).lower()
    return Recording(
        key=canonical_key(req.method, req.path, req_body),
        method=req.method.upper(),
        path=_path_only(req.path),
        status=int(status),
        headers=headers,
        body=body,
        sse=sse,
        chunks=_pacing(body, sse, rec.upstream_chunks if rec is not None else None, resp),
        cut=cut,
        flow_id=getattr(flow, "id", None),
        source=source,
        request_stream=wants_stream(req_body),
    )


class RecordingIndex:
    """Recordings by canonical key, served in recorded order, cycling (see the module docstring)."""

    def __init__(self) -> None:
        self._by_key: dict[str, list[Recording]] = {}
        self._next: dict[tuple[str, bool | None], int] = {}
        self.sources: list[str] = []
        self.skipped = 0
        self.damaged: list[str] = []

    # -- building
    @classmethod
    def load(cls, path: str | Path) -> RecordingIndex:
        """Read a .mitm file, or every ``*.mitm`` file under a folder (sorted by path)."""
        from ..redaction.flowfile import read_file

        idx = cls()
        p = Path(path).expanduser()
        # regular files only: a FIFO would block start-up until a writer comes, a device never ends
        if p.is_dir():
            files = sorted(f for f in p.rglob("*.mitm") if f.is_file())
        elif p.is_file():
            files = [p]
        elif p.exists():
            raise FileNotFoundError(f"proxai replay: {p} is not a regular file or a folder")
        else:
            raise FileNotFoundError(f"proxai replay: {p} does not exist")
        for fp in files:
            got = read_file(fp)  # a damaged file: its intact flows, and the damage named
            for f in got.flows:
                idx.add_flow(f, str(fp))
            if got.damage is not None:
                idx.damaged.append(str(got.damage))
                logger.warning("proxai replay: %s", got.damage)
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


# ----------------------------------------------------------------------------- serving
def miss_body(method: str, path: str, key: str) -> dict[str, Any]:
    """A native 404 of the path's protocol (the default's for other paths) naming the key."""
    from proxai_core.codecs import get
    from proxai_core.neutral import Error, ErrorKind

    from ..wire.protocols import miss_protocol

    msg = f"proxai replay: no recording matches {method.upper()} {_path_only(path)} (key {key})"
    body = get(miss_protocol(path)).errors.body(Error(kind=ErrorKind.NOT_FOUND, message=msg, status=404,
                                                       code="proxai_replay_miss"))
    err = body.get("error")
    if isinstance(err, dict):
        err["key"] = key
    return body
