"""Anthropic Messages codec (``anthropic_messages``): requests, complete responses, SSE streams.

See :mod:`proxai_core.codecs.base` for the contract. Choices documented here:

* ``max_tokens`` is required upstream: ``Request.max_output_tokens`` or 8192 (with a warning).
* Reasoning effort -> thinking ``budget_tokens``: minimal 1024, low 2048, medium 8192,
  high 16384, xhigh/max 32768; effort ``none`` -> thinking disabled; adaptive kept (its effort goes
  to ``output_config.effort``). ``max_tokens`` is raised above the budget when needed (warning).
* Toward an Anthropic client the stop maps as: REFUSAL -> ``refusal`` + ``stop_details``
  (category only when it is one of Anthropic's), MAX_OUTPUT -> ``max_tokens``, CONTEXT_FULL ->
  ``model_context_window_exceeded``, PAUSED -> ``pause_turn``, TOOL_USE -> ``tool_use``, END_TURN ->
  ``end_turn`` / ``stop_sequence``, INTERRUPTED -> ``end_turn`` + warning, OTHER -> null + warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from orjson import JSONDecodeError, loads

from .. import reasoning as rz
from ..errors import parse_error
from ..jsonscan import JsonObjectScanner
from ..jsonutil import dumps
from ..neutral import (
    BlockEnd,
    BlockStart,
    Delta,
    Document,
    End,
    Error,
    ErrorEvent,
    ErrorKind,
    Event,
    Image,
    Opaque,
    Reasoning,
    Refusal,
    Response,
    Start,
    Stop,
    Text,
    ToolCall,
    ToolResult,
    Usage,
    UsageEvent,
)
from ..protocol import Protocol
from ..sse import frame
from ..stop import StopInfo, StopReason, classify_stop
from . import _anthropic_common as _facts
from ._anthropic_common import (
    FALLBACK_REFUSAL_TEXT,
    PROTOCOL,
    citation_from_neutral,
    citation_to_neutral,
    msg_id,
    stop_from_wire,
    stop_to_wire,
    usage_from_wire,
    usage_to_wire,
    warn_once,
)
from ._anthropic_request import decode_request, encode_request
from .base import Codec, Wire

__all__ = [
    "StreamDecoder",
    "StreamEncoder",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_frame",
]

#: Opaque block types whose ``input`` streams as ``input_json_delta``.
_INPUT_STREAMED = frozenset({"server_tool_use", "mcp_tool_use"})


# ============================================================================= responses
def _dec_block(b: Any, warnings: list[str]) -> Any:
    if not isinstance(b, dict):
        warnings.append("a non-object content block in the upstream response was skipped")
        return None
    t = b.get("type")
    if t == "text":
        text = b.get("text")
        cits = b.get("citations")
        citations = [citation_to_neutral(c) for c in cits if isinstance(c, dict)] if isinstance(cits, list) else None
        return Text(text if isinstance(text, str) else "", citations or None)
    if t == "thinking":
        text = b.get("thinking")
        sig = b.get("signature")
        opaque: dict[str, Any] = {"protocol": PROTOCOL}
        if isinstance(sig, str):
            opaque["signature"] = sig
        return Reasoning(text=text if isinstance(text, str) else "", opaque=opaque)
    if t == "redacted_thinking":
        return Reasoning(text="", redacted=True, opaque={"protocol": PROTOCOL, "data": b.get("data")})
    if t == "tool_use":
        inp = b.get("input")
        return ToolCall(str(b.get("id") or ""), str(b.get("name") or ""),
                        dumps(inp if inp is not None else {}).decode())
    if not isinstance(t, str):
        warnings.append("a content block without a type in the upstream response was skipped")
        return None
    return Opaque(PROTOCOL, b, t)


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    resp = Response()
    if not isinstance(body, dict):
        err = parse_error(None, body)  # type: ignore[arg-type]
        resp.extra["error"] = err
        resp.stop = classify_stop("error", category=err.kind, message=err.message)
        return resp
    if body.get("type") == "error" or (isinstance(body.get("error"), dict) and "content" not in body):
        err = parse_error(None, body)
        resp.extra["error"] = err
        resp.stop = classify_stop("error", category=err.kind, message=err.message)
        return resp
    rid = body.get("id")
    resp.id = rid if isinstance(rid, str) else None
    model = body.get("model")
    resp.model = model if isinstance(model, str) else None
    content = body.get("content")
    if not isinstance(content, list):
        if content is not None:
            warnings.append("upstream response content is not an array; read as empty")
        content = []
    parts = []
    for b in content:
        p = _dec_block(b, warnings)
        if p is not None:
            parts.append(p)
    resp.parts = parts
    has_tools = any(isinstance(p, ToolCall) for p in parts)
    resp.stop = stop_from_wire(body.get("stop_reason"), body.get("stop_details"), has_tools)
    seq = body.get("stop_sequence")
    resp.stop_sequence = seq if isinstance(seq, str) else None
    u = body.get("usage")
    if isinstance(u, dict):
        resp.usage = usage_from_wire(u)
    for k in ("container", "context_management"):
        if body.get(k) is not None:
            resp.extra[k] = body[k]
    return resp


def _packed_signature(p: Reasoning, text: str) -> str:
    payload = dict(p.opaque or {})
    payload["text"] = text
    payload["summary"] = p.summary
    payload["redacted"] = p.redacted
    return rz.pack(payload)


def _enc_reasoning_block(p: Reasoning) -> dict[str, Any]:
    op = p.opaque
    if op and op.get("protocol") == PROTOCOL:
        if p.redacted and isinstance(op.get("data"), str):
            return {"type": "redacted_thinking", "data": op["data"]}
        sig = op.get("signature")
        return {"type": "thinking", "thinking": p.text, "signature": sig if isinstance(sig, str) else ""}
    return {"type": "thinking", "thinking": p.text, "signature": _packed_signature(p, p.text)}


def _tool_input(p: ToolCall, warnings: list[str]) -> dict[str, Any]:
    if p.kind == "custom":
        return {"input": p.arguments}
    if not p.arguments.strip():
        return {}
    try:
        v = orjson.loads(p.arguments)
    except orjson.JSONDecodeError:
        warnings.append(f"tool call {p.id} had invalid JSON arguments; sent with an empty input")
        return {}
    if not isinstance(v, dict):
        warnings.append(f"tool call {p.id} arguments are not a JSON object; wrapped as {{\"value\": ...}}")
        return {"value": v}
    return v


def _enc_citations(cits: list[dict[str, Any]] | None, warnings: list[str]) -> list[dict[str, Any]] | None:
    if not cits:
        return None
    out = [c for c in (citation_from_neutral(n, allow_synthetic=True) for n in cits) if c]
    if len(out) < len(cits):
        warn_once(warnings, "citations Anthropic cannot represent were dropped")
    return out or None


def _effective_stop(stop: StopInfo | None, has_tools: bool, refusal_text: str | None) -> StopInfo:
    stop = stop or classify_stop(None, has_tool_calls=has_tools)
    if refusal_text and stop.reason is StopReason.END_TURN:  # refusal outranks finish
        stop = classify_stop("refusal", category="output-refusal", message=refusal_text)
    return stop


def encode_response(resp: Response, ctx: Any, warnings: list[str]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    refusals: list[str] = []
    has_text = False
    has_tools = False
    for p in resp.parts:
        if isinstance(p, Text):
            b: dict[str, Any] = {"type": "text", "text": p.text}
            cits = _enc_citations(p.citations, warnings)
            if cits:
                b["citations"] = cits
            elif not p.text:
                continue  # an empty text block would be rejected when the client replays it
            content.append(b)
            has_text = has_text or bool(p.text)
        elif isinstance(p, Refusal):
            if p.text:
                content.append({"type": "text", "text": p.text})
                refusals.append(p.text)
                has_text = True
        elif isinstance(p, Reasoning):
            content.append(_enc_reasoning_block(p))
        elif isinstance(p, ToolCall):
            content.append({"type": "tool_use", "id": p.id, "name": p.name, "input": _tool_input(p, warnings)})
            has_tools = True
        elif isinstance(p, Opaque):
            if p.protocol == PROTOCOL:
                content.append(p.raw)
            else:
                warn_once(warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Anthropic "
                          "clients cannot represent it")
        elif isinstance(p, (Image, Document, ToolResult)):
            warn_once(warnings, f"{p.type} part in a response dropped")
    refusal_text = "".join(refusals) or None
    stop = _effective_stop(resp.stop, has_tools, refusal_text)
    if stop.reason is StopReason.REFUSAL and not has_text:
        content.append({"type": "text", "text": stop.message or FALLBACK_REFUSAL_TEXT})
    reason, seq, details = stop_to_wire(stop, resp.stop_sequence, refusal_text, warnings, has_tools)
    return {
        "id": msg_id(resp.id),
        "type": "message",
        "role": "assistant",
        "model": getattr(ctx, "model", None) or resp.model or "unknown",
        "content": content,
        "stop_reason": reason,
        "stop_sequence": seq,
        "stop_details": details,
        "usage": usage_to_wire(resp.usage),
    }


def error_frame(err: Error) -> bytes:
    return frame("error", _facts.error_body(err))


# ============================================================================= stream decode
_NEVER: Any = object()  # equal to no JSON value


class _Blk:
    """One open upstream block. Its class says which delta streams its content (``hot``: the delta
    type, ``field``: where its value is, ``nkind``: the neutral delta kind, ``keep``: also buffered
    for the block's end); every other delta goes through :data:`_DELTAS`."""

    __slots__ = ("buf", "extra", "n", "part", "sig")
    kind = "opaque"  # text | thinking | redacted | tool | opaque
    hot: str = _NEVER
    field = ""
    nkind = ""
    keep = False

    def __init__(self, n: int, part: Any = None):
        self.n = n
        self.buf: list[str] = []
        self.sig: str | None = None
        self.part = part
        self.extra: Any = None


class _TextBlk(_Blk):
    __slots__ = ()
    kind = "text"
    hot = "text_delta"
    field = "text"
    nkind = "text"


class _ThinkingBlk(_Blk):
    __slots__ = ()
    kind = "thinking"
    hot = "thinking_delta"
    field = "thinking"
    nkind = "reasoning"
    keep = True


class _ToolBlk(_Blk):
    __slots__ = ()
    kind = "tool"
    hot = "input_json_delta"
    field = "partial_json"
    nkind = "arguments"
    keep = True


class _RedactedBlk(_Blk):
    __slots__ = ()
    kind = "redacted"


_INTERRUPTED = "upstream stream ended before its terminal event"
#: a ping's payload as Anthropic sends it: nothing to parse, nothing to observe
_PINGS = ('{"type": "ping"}', '{"type":"ping"}')


class StreamDecoder:
    """Anthropic SSE events -> neutral events."""

    __slots__ = ("_blocks", "_has_tools", "_next", "_started", "_stop_seen", "_unknown", "done", "warnings")

    def __init__(self, warnings: list[str]):
        self.warnings = warnings
        self.done = False
        self._started = False
        self._blocks: dict[int, _Blk] = {}
        self._next = 0
        self._stop_seen = False
        self._has_tools = False
        self._unknown: set[str] | None = None

    # ---- entry points
    def feed(self, event: str | None, data: str) -> list[Event]:
        if self.done:
            return []
        if event == "ping" and data in _PINGS:
            return []
        try:
            obj = loads(data)
        except JSONDecodeError:
            self.warnings.append(f"invalid JSON in an Anthropic stream event ({event or 'no name'}) ignored")
            return []
        if type(obj) is not dict:
            self.warnings.append("non-object Anthropic stream event ignored")
            return []
        t = obj.get("type") or event
        if t == "content_block_delta":  # most events: decoded here, without a further call
            idx = obj.get("index")
            blk = self._blocks.get(idx) if type(idx) is int else None
            d = obj.get("delta")
            if blk is None or type(d) is not dict:
                self.warnings.append("content_block_delta for an unknown block ignored")
                return []
            dt = d.get("type")
            if dt == blk.hot:  # the delta that streams this block's content
                v = d.get(blk.field)
                if v and type(v) is str:
                    if blk.keep:
                        blk.buf.append(v)
                    return [Delta(blk.n, blk.nkind, v)]
                return []
            hd = _DELTAS.get(dt) if type(dt) is str else None
            if hd is None:
                self._warn_unknown(f"delta {dt!r}")
                return []
            return hd(self, blk, d)
        h = _EVENTS.get(t) if type(t) is str else None
        if h is None:
            if type(t) is str:
                self._warn_unknown(f"event {t!r}")
            else:
                self.warnings.append("Anthropic stream event without a type ignored")
            return []
        return h(self, obj)

    def finish(self) -> list[Event]:
        if self.done:
            return []
        self.done = True
        if self._stop_seen:
            return self._close_all() + [End()]
        return [ErrorEvent(Error(kind=ErrorKind.INTERRUPTED, message=_INTERRUPTED, status=502))]

    # ---- helpers
    def _warn_unknown(self, what: str) -> None:
        if self._unknown is None:
            self._unknown = set()
        if what not in self._unknown:
            self._unknown.add(what)
            self.warnings.append(f"unknown Anthropic stream {what} skipped")

    def _no_start(self) -> list[Event]:
        """Content before any message_start: the stream starts here."""
        self._started = True
        self.warnings.append("Anthropic stream had no message_start before its content")
        return [Start()]

    def _close_all(self) -> list[Event]:
        out: list[Event] = []
        for idx in list(self._blocks):
            out.extend(self._block_stop({"index": idx}))
        return out

    # ---- events
    def _ping(self, obj: dict[str, Any]) -> list[Event]:
        return []

    def _error(self, obj: dict[str, Any]) -> list[Event]:
        self.done = True
        return [ErrorEvent(parse_error(None, obj))]

    def _message_start(self, obj: dict[str, Any]) -> list[Event]:
        if self._started:
            self.warnings.append("repeated message_start ignored")
            return []
        self._started = True
        m = obj.get("message")
        if type(m) is not dict:
            return [Start()]
        u = m.get("usage")
        mid, model = m.get("id"), m.get("model")
        out: list[Event] = [Start(mid if type(mid) is str else None, model if type(model) is str else None,
                                  usage_from_wire(u) if type(u) is dict else None)]
        content = m.get("content")
        if content and type(content) is list:  # not sent by Anthropic; some proxies prefill
            for i, b in enumerate(content):
                out.extend(self._block_start({"index": -1 - i, "content_block": b}))
                out.extend(self._block_stop({"index": -1 - i}))
        return out

    def _block_start(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = [] if self._started else self._no_start()
        idx = obj.get("index")
        cb = obj.get("content_block")
        if not isinstance(idx, int) or type(cb) is not dict or type(t := cb.get("type")) is not str:
            self.warnings.append("malformed content_block_start ignored")
            return out
        blocks = self._blocks
        if idx in blocks:
            self.warnings.append(f"content block {idx} started twice; the first was closed")
            out.extend(self._block_stop({"index": idx}))
        n = self._next
        self._next = n + 1
        blk: _Blk
        if t == "text":
            blk = _TextBlk(n)
            cits = cb.get("citations")
            if cits and type(cits) is list:
                blk.extra = list(cits)
            out.append(BlockStart(n, Text("")))
            text = cb.get("text")
            if text and type(text) is str:
                out.append(Delta(n, "text", text))
        elif t == "tool_use":
            self._has_tools = True
            tid, name = cb.get("id"), cb.get("name")
            tid = tid if type(tid) is str else ""
            name = name if type(name) is str else ""
            blk = _ToolBlk(n, ToolCall(tid, name))
            inp = cb.get("input")
            if inp and type(inp) is dict:
                blk.extra = dumps(inp).decode()  # used only if no input_json_delta follows
            out.append(BlockStart(n, ToolCall(tid, name, "")))
        elif t == "thinking":
            blk = _ThinkingBlk(n)
            out.append(BlockStart(n, Reasoning()))
            text = cb.get("thinking")
            if text and type(text) is str:
                blk.buf.append(text)
                out.append(Delta(n, "reasoning", text))
            sig = cb.get("signature")
            if sig and type(sig) is str:
                blk.sig = sig
        elif t == "redacted_thinking":
            part = Reasoning(text="", redacted=True, opaque={"protocol": PROTOCOL, "data": cb.get("data")})
            blk = _RedactedBlk(n, part)
            out.append(BlockStart(n, part))
        else:
            blk = _Blk(n, dict(cb))
            out.append(BlockStart(n, Opaque(PROTOCOL, cb, t)))
        blocks[idx] = blk
        return out

    def _d_ignored(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        """A content delta of a type this block does not stream (its own is decoded in feed)."""
        return []

    def _d_signature(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        v = d.get("signature")
        if type(v) is str:
            blk.sig = v
        return []

    def _d_json(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        """input_json_delta of a block other than tool_use (server tool input, kept for its end)."""
        v = d.get("partial_json")
        if v and type(v) is str:
            blk.buf.append(v)
        return []

    def _d_citation(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        c = d.get("citation")
        if blk.kind == "text" and type(c) is dict:
            if blk.extra is None:
                blk.extra = []
            blk.extra.append(c)
        return []

    def _d_compaction(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        v = d.get("content")
        if blk.kind == "opaque" and type(v) is str:
            if blk.extra is None:
                blk.extra = []
            blk.extra.append(v)
        return []

    def _block_stop(self, obj: dict[str, Any]) -> list[Event]:
        idx = obj.get("index")
        blk = self._blocks.pop(idx, None) if isinstance(idx, int) else None
        if blk is None:
            self.warnings.append("content_block_stop for an unknown block ignored")
            return []
        k = blk.kind
        n = blk.n
        if k == "text":
            if blk.extra:
                return [BlockEnd(n, Text("", [citation_to_neutral(c) for c in blk.extra if type(c) is dict]))]
            return [BlockEnd(n)]
        if k == "tool":
            part: ToolCall = blk.part
            if blk.buf:
                part.arguments = "".join(blk.buf)
                return [BlockEnd(n, part)]
            part.arguments = blk.extra or "{}"
            return [Delta(n, "arguments", part.arguments), BlockEnd(n, part)]
        if k == "thinking":
            opaque: dict[str, Any] = {"protocol": PROTOCOL}
            if blk.sig is not None:
                opaque["signature"] = blk.sig
            return [BlockEnd(n, Reasoning(text="".join(blk.buf), opaque=opaque))]
        if k == "redacted":
            return [BlockEnd(n, blk.part)]
        raw: dict[str, Any] = blk.part
        if blk.buf:
            js = "".join(blk.buf)
            try:
                raw["input"] = loads(js)
            except JSONDecodeError:
                self.warnings.append(f"{raw.get('type')} block input was not valid JSON; kept as received")
        if blk.extra is not None and raw.get("type") == "compaction":
            raw["content"] = "".join(blk.extra)
        t = raw.get("type")
        return [BlockEnd(n, Opaque(PROTOCOL, raw, t if type(t) is str else "unknown"))]

    def _message_delta(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = [] if self._started else self._no_start()
        u = obj.get("usage")
        if type(u) is dict:
            out.append(UsageEvent(usage_from_wire(u)))
        d = obj.get("delta")
        if type(d) is dict:
            reason = d.get("stop_reason")
            if reason is not None:
                seq = d.get("stop_sequence")
                out.append(Stop(stop_from_wire(reason, d.get("stop_details"), self._has_tools),
                                seq if type(seq) is str else None))
                self._stop_seen = True
        return out

    def _message_stop(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = [] if self._started else self._no_start()
        if self._blocks:
            out.extend(self._close_all())
        if not self._stop_seen:
            self._stop_seen = True
            out.append(Stop(classify_stop(None, has_tool_calls=self._has_tools)))
        out.append(End())
        self.done = True
        return out


# per-class dispatch: no table of bound methods built per stream
_EVENTS = {
    "message_start": StreamDecoder._message_start,
    "content_block_start": StreamDecoder._block_start,
    "content_block_stop": StreamDecoder._block_stop,
    "message_delta": StreamDecoder._message_delta,
    "message_stop": StreamDecoder._message_stop,
    "ping": StreamDecoder._ping,
    "error": StreamDecoder._error,
}
#: deltas other than the one a block streams (decoded in StreamDecoder.feed)
_DELTAS = {
    "text_delta": StreamDecoder._d_ignored,
    "thinking_delta": StreamDecoder._d_ignored,
    "signature_delta": StreamDecoder._d_signature,
    "input_json_delta": StreamDecoder._d_json,
    "citations_delta": StreamDecoder._d_citation,
    "compaction_delta": StreamDecoder._d_compaction,
}


# ============================================================================= stream encode
class _Out:
    __slots__ = ("a", "buf", "head", "kind", "part", "scan", "sent", "sig")
    scan: JsonObjectScanner  # (set when a tool block's input starts)

    def __init__(self, a: int, kind: str, part: Any = None):
        self.a = a  # Anthropic block index (-1: not yet emitted)
        self.kind = kind  # text | refusal | thinking | redacted | tool | custom | opaque | drop
        self.sent = False
        self.buf: list[str] = []
        self.part = part
        self.sig: str | None = None
        self.head = b""  # the frame up to the delta's string value, once the index is known


# One builder per frame shape. content_block_delta frames are built by concatenation (hot path: the
# head is computed once per block); test_wire_builders checks each builder against frame() of the
# same dict (orjson is compact, keys in insertion order, a value encodes the same wherever it sits).
def _cb_start(a: int, block: dict[str, Any]) -> bytes:
    if a < 16 and block is _EMPTY_TEXT:
        return _TEXT_STARTS[a]
    return frame("content_block_start", {"type": "content_block_start", "index": a, "content_block": block})


def _delta_head(a: int, dtype: bytes, field: bytes) -> bytes:
    """content_block_delta up to its value: ``head + orjson.dumps(value) + _DELTA_TAIL``."""
    if a < 16:
        if dtype == b"text_delta":
            return _TEXT_HEADS[a]
        if dtype == b"input_json_delta":
            return _JSON_HEADS[a]
    return _head(a, dtype, field)


def _head(a: int, dtype: bytes, field: bytes) -> bytes:
    return (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":'
            % (a, dtype, field))


def _cb_delta(a: int, dtype: bytes, field: bytes, value: Any) -> bytes:
    return _delta_head(a, dtype, field) + orjson.dumps(value) + _DELTA_TAIL


_DELTA_TAIL = b"}}\n\n"
_TEXT_HEADS = [_head(a, b"text_delta", b"text") for a in range(16)]
_JSON_HEADS = [_head(a, b"input_json_delta", b"partial_json") for a in range(16)]
_STOP_FRAMES = [frame("content_block_stop", {"type": "content_block_stop", "index": a}) for a in range(16)]
_EMPTY_TEXT: dict[str, Any] = {"type": "text", "text": ""}
_TEXT_STARTS = [frame("content_block_start", {"type": "content_block_start", "index": a,
                                              "content_block": _EMPTY_TEXT}) for a in range(16)]


def _cb_stop(a: int) -> bytes:
    if 0 <= a < 16:
        return _STOP_FRAMES[a]
    return frame("content_block_stop", {"type": "content_block_stop", "index": a})


_MESSAGE_STOP = frame("message_stop", {"type": "message_stop"})
_MESSAGE_START = (b'event: message_start\ndata: {"type":"message_start","message":{"id":%s,"type":"message",'
                  b'"role":"assistant","model":%s,"content":[],"stop_reason":null,"stop_sequence":null,'
                  b'"usage":%s}}\n\n')
_NO_USAGE = orjson.dumps(usage_to_wire(None))
_MESSAGE_DELTA = (b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":%s,'
                  b'"stop_sequence":%s,"stop_details":%s},"usage":%s}\n\n')
_TRUNCATED = (StopReason.MAX_OUTPUT, StopReason.CONTEXT_FULL)


class StreamEncoder:
    """Neutral events -> Anthropic SSE for the client (``event:`` lines, Anthropic lifecycle)."""

    def __init__(self, ctx: Any, warnings: list[str]):
        self.ctx = ctx
        self.warnings = warnings
        self.done = False
        self._started = False
        self._n = 0
        self._open: dict[int, _Out] = {}
        self._usage: Usage | None = None
        self._stop: StopInfo | None = None
        self._stop_seq: str | None = None
        self._refusal: list[str] = []
        self._text_sent = False
        self._has_tools = False
        self._model = getattr(ctx, "model", None)
        self._cut: _Out | None = None  # a tool block whose arguments ended incomplete (left open)
        # Anthropic has one open block at a time; neutral blocks may overlap (Chat parallel tool calls
        # stay open until the finish). The block on the wire is _active; the events of the others wait
        # in _held (start order) until it ends. A tool block whose JSON is complete ends early (_early).
        self._active = -1
        self._held: dict[int, list[Event]] = {}
        self._early: dict[int, _Out] = {}

    def encode(self, ev: Event) -> bytes:
        if self.done:
            return b""
        if type(ev) is not Delta:
            h = _HANDLERS.get(type(ev))
            if h is None:
                return b""
            return h(self, ev)
        # a delta (the hot path: encoded here, without a further call)
        i, k, v = ev.index, ev.kind, ev.value  # type: ignore[union-attr]
        o = self._open.get(i)
        if o is None or not v:
            if self._held and self._hold(i, ev):
                return b""
            if self._early and i in self._early and k == "arguments":
                return self._late(i, v)
            return b""
        ok = o.kind
        if ok == "text" or ok == "refusal":
            if k == "text" or k == "refusal":
                if o.a < 0:
                    return self._text_delta(o, v)
                if ok == "refusal":  # the block is open: the hot path of _text_delta
                    self._refusal.append(v)
                return o.head + orjson.dumps(v) + _DELTA_TAIL
        elif ok == "tool" or ok == "custom":
            if k == "arguments":
                if self._held and i == self._active:
                    out = self._args(o, v)
                    if self._ends_early(o):  # the next block need not wait for this one's end
                        out += self._end_early(i, o) + self._promote()
                    return out
                return self._args(o, v)
        elif ok == "thinking":
            if k == "reasoning" or k == "summary":
                return self._thinking_delta(o, v)
            if k == "signature":
                o.sig = (o.sig or "") + v
        elif ok == "redacted" and o.a < 0 and (k == "reasoning" or k == "summary"):
            o.buf.append(v)
        return b""

    # ---- lifecycle
    def _message_start(self, sid: str | None, model: str | None) -> bytes:
        self._started = True
        mid = msg_id(sid)  # (the frame is frame() of the message_start dict)
        usage = _NO_USAGE if self._usage is None else orjson.dumps(usage_to_wire(self._usage))
        return _MESSAGE_START % (orjson.dumps(mid), orjson.dumps(self._model or model or "unknown"), usage)

    def _start(self, ev: Start) -> bytes:
        if self._started:
            if ev.usage is not None:
                self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
            return b""
        if ev.usage is not None:
            self._usage = ev.usage
        return self._message_start(ev.id, ev.model)

    def _alloc(self) -> int:
        a = self._n
        self._n += 1
        return a

    # ---- block order
    def _block_start(self, ev: BlockStart) -> bytes:
        a = self._active
        if a >= 0:
            o = self._open.get(a)
            if o is None:
                self._active = -1
            elif not self._ends_early(o):
                self._held[ev.index] = [ev]  # sent when the block on the wire ends
                return b""
            else:
                return self._end_early(a, o) + self._open_block(ev)
        return self._open_block(ev)

    @staticmethod
    def _ends_early(o: _Out) -> bool:
        """A function tool block whose arguments are one whole JSON object can take nothing more."""
        return o.kind == "tool" and o.sent and o.scan.complete()

    def _end_early(self, a: int, o: _Out) -> bytes:
        del self._open[a]
        self._early[a] = o
        self._active = -1
        return self._close(o, None)

    def _hold(self, i: int, ev: Event) -> bool:
        evs = self._held.get(i)
        if evs is None:
            return False
        evs.append(ev)
        return True

    def _promote(self) -> bytes:
        """The block on the wire ended: the held blocks follow, in start order."""
        out = []
        held = self._held
        while self._active < 0 and held and self._cut is None and not self.done:
            i = next(iter(held))
            for ev in held.pop(i):
                if type(ev) is BlockStart:
                    out.append(self._open_block(ev))
                elif type(ev) is BlockEnd:
                    out.append(self._end_block(ev))
                else:
                    out.append(self.encode(ev))
        return b"".join(out)

    def _late(self, i: int, v: str) -> bytes:
        """A fragment for a tool block that already ended with a whole JSON object."""
        if not v.strip():
            return b""
        return self._bad_args(self._early[i], v)

    # ---- blocks
    def _open_block(self, ev: BlockStart) -> bytes:
        pre = b"" if self._started else self._message_start(None, None)
        p = ev.part
        i = ev.index
        self._active = i
        if isinstance(p, (Text, Refusal)):
            # emitted on its first text: an empty text block would be rejected when replayed
            o = self._open[i] = _Out(-1, "text" if isinstance(p, Text) else "refusal")
            return pre + self._text_delta(o, p.text) if p.text else pre
        if isinstance(p, Reasoning):
            op = p.opaque
            if p.redacted:
                if op and op.get("protocol") == PROTOCOL and isinstance(op.get("data"), str):
                    a = self._alloc()
                    self._open[i] = _Out(a, "redacted")
                    return pre + _cb_start(a, {"type": "redacted_thinking", "data": op["data"]})
                self._open[i] = _Out(-1, "redacted", p)  # emitted at its end, once the payload is known
                return pre
            a = self._alloc()
            o = self._open[i] = _Out(a, "thinking", p)
            o.head = _delta_head(a, b"thinking_delta", b"thinking")
            out = _cb_start(a, {"type": "thinking", "thinking": "", "signature": ""})
            if p.text:
                out += self._thinking_delta(o, p.text)
            return pre + out
        if isinstance(p, ToolCall):
            self._has_tools = True
            a = self._n
            self._n = a + 1
            o = self._open[i] = _Out(a, "custom" if p.kind == "custom" else "tool", p)
            o.head = _delta_head(a, b"input_json_delta", b"partial_json")
            out = _cb_start(a, {"type": "tool_use", "id": p.id, "name": p.name, "input": {}})
            if p.arguments:
                out += self._args(o, p.arguments)
            return pre + out
        if isinstance(p, Opaque):
            if p.protocol != PROTOCOL:
                warn_once(self.warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Anthropic "
                          "clients cannot represent it")
                self._open[i] = _Out(-1, "drop")
                self._active = -1
                return pre
            raw = p.raw
            t = raw.get("type")
            t = t if isinstance(t, str) else ""
            start = raw
            if t in _INPUT_STREAMED and isinstance(raw.get("input"), dict):
                start = dict(raw, input={})
            elif t == "compaction":
                start = dict(raw, content=None)
            a = self._alloc()
            self._open[i] = _Out(a, "opaque", p)
            return pre + _cb_start(a, start)
        warn_once(self.warnings, f"{getattr(p, 'type', 'unknown')} part in a response dropped")
        self._open[i] = _Out(-1, "drop")
        self._active = -1
        return pre

    def _text_start(self, o: _Out) -> bytes:
        a = o.a = self._alloc()
        o.head = _delta_head(a, b"text_delta", b"text")
        return _cb_start(a, _EMPTY_TEXT)

    def _text_delta(self, o: _Out, v: str) -> bytes:
        if o.a < 0:
            pre = self._text_start(o)
            o.sent = True
            self._text_sent = True
        else:
            pre = b""  # sent and _text_sent were set with the block's first text
        if o.kind == "refusal":
            self._refusal.append(v)
        return pre + o.head + orjson.dumps(v) + _DELTA_TAIL

    def _thinking_delta(self, o: _Out, v: str) -> bytes:
        o.sent = True
        o.buf.append(v)
        return o.head + orjson.dumps(v) + _DELTA_TAIL

    def _args(self, o: _Out, v: str) -> bytes:
        """Every tool-argument fragment of a tool_use block passes here (streamed or late)."""
        if o.kind == "custom":
            o.sent = True
            o.buf.append(v)
            return b""
        # the SDK re-parses the whole buffer at every fragment: forward only valid object prefixes
        if o.sent:
            if o.scan.feed(v):
                return o.head + orjson.dumps(v) + _DELTA_TAIL
            return self._bad_args(o, v)
        return self._first_args(o, v)

    def _first_args(self, o: _Out, v: str) -> bytes:
        # whitespace before the '{' waits: the SDK cannot parse a buffer of only whitespace
        if not o.buf:
            o.scan = JsonObjectScanner()
        if not o.scan.feed(v):
            return self._bad_args(o, v)
        if not o.scan.opened:
            o.buf.append(v)
            return b""
        if o.buf:
            v = "".join(o.buf) + v
            o.buf.clear()
        o.sent = True
        return o.head + orjson.dumps(v) + _DELTA_TAIL

    def _bad_args(self, o: _Out, frag: str | None) -> bytes:
        """Tool arguments the client's SDK could not parse (invalid, or ended incomplete): never
        forwarded; the client's native error event ends the turn and the rest of the upstream
        stream is dropped (StopInfo still says what the upstream said)."""
        p = o.part
        name = p.name if isinstance(p, ToolCall) else ""
        if frag is None:
            what, why = "are not a complete JSON object", "ended before their JSON object was complete"
        else:
            what, why = "are not valid JSON", f"stopped being a valid JSON object at the fragment {frag[:60]!r}"
        self.warnings.append(f"tool call {getattr(p, 'id', '')} ({name}): the upstream's arguments {why}; "
                             "the Anthropic client's stream was ended with an error event and the rest "
                             "of the upstream stream was dropped")
        self.done = True
        return error_frame(Error(kind=ErrorKind.API_ERROR, status=502, message=(
            f"upstream sent tool-call arguments for tool {name!r} that {what}; the turn was ended")))

    def _block_end(self, ev: BlockEnd) -> bytes:
        if self._held:
            if self._hold(ev.index, ev):
                return b""
            return self._end_block(ev) + self._promote()
        return self._end_block(ev)

    def _end_block(self, ev: BlockEnd) -> bytes:
        i = ev.index
        o = self._open.pop(i, None)
        if i == self._active:
            self._active = -1
        if o is None:
            self._early.pop(i, None)
            return b""
        return self._close(o, ev.part)

    def _close(self, o: _Out, final: Any) -> bytes:
        k = o.kind
        if k == "drop":
            return b""
        out = b""
        if k == "text" or k == "refusal":
            if isinstance(final, (Text, Refusal)):
                if final.text and not o.sent:
                    out += self._text_delta(o, final.text)
                if isinstance(final, Text) and final.citations:
                    cits = _enc_citations(final.citations, self.warnings)
                    if cits and o.a < 0:
                        out += self._text_start(o)
                    for c in cits or ():
                        out += _cb_delta(o.a, b"citations_delta", b"citation", c)
            return out + _cb_stop(o.a) if o.a >= 0 else out
        if k == "thinking" or (k == "redacted" and o.a < 0):
            part: Reasoning = final if isinstance(final, Reasoning) else o.part
            op = part.opaque or o.part.opaque
            text = "".join(o.buf)
            if part.text and not text:
                text = part.text
            if k == "redacted":
                a = o.a = self._alloc()
                if op and op.get("protocol") == PROTOCOL and isinstance(op.get("data"), str):
                    return _cb_start(a, {"type": "redacted_thinking", "data": op["data"]}) + _cb_stop(a)
                out = _cb_start(a, {"type": "thinking", "thinking": "", "signature": ""})
                o.head = _delta_head(a, b"thinking_delta", b"thinking")
                if text:
                    out += self._thinking_delta(o, text)
            elif part.text and not o.sent:
                out += self._thinking_delta(o, part.text)
            if op and op.get("protocol") == PROTOCOL:
                sig = op.get("signature") if isinstance(op.get("signature"), str) else o.sig
            else:
                sig = _packed_signature(Reasoning(text, part.summary or o.part.summary, op,
                                                  part.redacted or o.part.redacted), text)
            if sig:
                out += _cb_delta(o.a, b"signature_delta", b"signature", sig)
            return out + _cb_stop(o.a)
        if k == "redacted":
            return _cb_stop(o.a)
        if k == "tool":
            if not o.sent and not o.buf and isinstance(final, ToolCall) and final.arguments:
                out += self._args(o, final.arguments)  # nothing streamed: the whole arguments now
                if self.done:
                    return out
            if o.sent and not o.scan.complete():
                # never a block stop after incomplete JSON: a max_tokens cut leaves the block open
                # (as Anthropic does); any other ending is an error (decided at the turn's end)
                self._cut = self._cut or o
                return out
            return out + _cb_stop(o.a)
        if k == "custom":
            text = "".join(o.buf)
            if not text and isinstance(final, ToolCall):
                text = final.arguments
            out += _cb_delta(o.a, b"input_json_delta", b"partial_json", orjson.dumps({"input": text}).decode())
            return out + _cb_stop(o.a)
        # opaque (Anthropic's own)
        part_o: Opaque = final if isinstance(final, Opaque) else o.part
        raw = part_o.raw
        t = raw.get("type")
        if not isinstance(t, str):
            t = ""
        if t in _INPUT_STREAMED and isinstance(raw.get("input"), dict) and raw["input"]:
            out += _cb_delta(o.a, b"input_json_delta", b"partial_json", dumps(raw["input"]).decode())
        elif t == "compaction" and isinstance(raw.get("content"), str):
            out += _cb_delta(o.a, b"compaction_delta", b"content", raw["content"])
        return out + _cb_stop(o.a)

    # ---- terminal
    def _usage_ev(self, ev: UsageEvent) -> bytes:
        self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
        return b""

    def _stop_ev(self, ev: Stop) -> bytes:
        self._stop = ev.stop
        self._stop_seq = ev.stop_sequence
        return b""

    def _end(self, ev: End) -> bytes:
        out = [b"" if self._started else self._message_start(None, None)]
        while self._held and self._cut is None and not self.done:
            a = self._active
            if a >= 0:
                out.append(self._end_block(BlockEnd(a)))
            out.append(self._promote())
        if self._held:
            self._held.clear()
            if self._cut is not None and not self.done:
                self.warnings.append("tool calls that started after a cut tool call were dropped")
        if self.done:
            return b"".join(out)
        if self._open:
            for i in list(self._open):
                out.append(self._close(self._open.pop(i), None))
        refusal_text = ("".join(self._refusal) or None) if self._refusal else None
        stop = self._stop
        if stop is None or refusal_text:
            stop = _effective_stop(stop, self._has_tools, refusal_text)
        if self._cut is not None and stop.reason not in _TRUNCATED:
            return b"".join(out) + self._bad_args(self._cut, None)
        if stop.reason is StopReason.REFUSAL and not self._text_sent:
            a = self._alloc()
            out.append(_cb_start(a, _EMPTY_TEXT))
            out.append(_cb_delta(a, b"text_delta", b"text", stop.message or FALLBACK_REFUSAL_TEXT))
            out.append(_cb_stop(a))
        reason, seq, details = stop_to_wire(stop, self._stop_seq, refusal_text, self.warnings, self._has_tools)
        out.append(_MESSAGE_DELTA % (orjson.dumps(reason), b"null" if seq is None else orjson.dumps(seq),
                                     b"null" if details is None else orjson.dumps(details),
                                     orjson.dumps(usage_to_wire(self._usage, delta=True))))
        out.append(_MESSAGE_STOP)
        self.done = True
        return b"".join(out)

    def _error(self, ev: ErrorEvent) -> bytes:
        self.done = True
        return error_frame(ev.error)


# per-class dispatch: no bound-method table built per stream
_HANDLERS: dict[type, Callable[[StreamEncoder, Any], bytes]] = {
    Start: StreamEncoder._start,
    BlockStart: StreamEncoder._block_start,
    BlockEnd: StreamEncoder._block_end,
    UsageEvent: StreamEncoder._usage_ev,
    Stop: StreamEncoder._stop_ev,
    End: StreamEncoder._end,
    ErrorEvent: StreamEncoder._error,
}


# ============================================================================= the codec
CODEC = Codec(
    protocol=Protocol(_facts.PROTOCOL),
    name="anthropic",
    label="Anthropic Messages",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    StreamDecoder=StreamDecoder,
    StreamEncoder=StreamEncoder,
    error_frame=error_frame,
    wire=Wire(
        endpoints=_facts.ENDPOINTS,
        fields=_facts.FIELDS,
        credentials=_facts.CREDENTIALS,
        model_entry=_facts.model_entry,
        model_list=_facts.model_list,
        count_tokens_body=lambda n: {"input_tokens": n},
    ),
    errors=_facts.ERRORS,
    capabilities=_facts.CAPABILITIES,
    client_tools=_facts.client_tools,
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.msg_id,
    sniff_request=_facts.sniff_request,
    sniff_response=_facts.sniff_response,
    sniff_stream=_facts.sniff_stream,
    is_error_body=_facts.is_error_body,
    stream_observes=_facts.stream_observes,
)
