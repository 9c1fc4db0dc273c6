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

from dataclasses import replace
from typing import Any

import orjson
from orjson import JSONDecodeError, loads

from .. import ratelimit
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
    Part,
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
    WebSearchCall,
    WebSearchResults,
)
from ..protocol import Protocol
from ..sse import frame
from ..stop import StopInfo, StopReason, classify_stop
from . import _anthropic_common as _facts
from ._anthropic_cache import add_cache_hints
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
    web_search_block,
    web_search_from_block,
)
from ._anthropic_request import decode_request, encode_request
from ._blocks import OneOpenBlockEncoder, bad_arguments
from ._request_common import tool_input
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
    return web_search_from_block(b) or Opaque(PROTOCOL, b, t)


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    resp = Response()
    if not isinstance(body, dict):
        err = parse_error(None, body)
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
        if isinstance(p, (WebSearchCall, WebSearchResults)):
            p = web_search_block(p)
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
            content.append({"type": "tool_use", "id": p.id, "name": p.name, "input": tool_input(p, warnings)})
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
        if not isinstance(obj, dict):
            self.warnings.append("non-object Anthropic stream event ignored")
            return []
        t = obj.get("type") or event
        if t == "content_block_delta":  # most events: decoded here, without a further call
            idx = obj.get("index")
            blk = self._blocks.get(idx) if isinstance(idx, int) and not isinstance(idx, bool) else None
            d = obj.get("delta")
            if blk is None or not isinstance(d, dict):
                self.warnings.append("content_block_delta for an unknown block ignored")
                return []
            dt = d.get("type")
            if dt == blk.hot:  # the delta that streams this block's content
                v = d.get(blk.field)
                if v and isinstance(v, str):
                    if blk.keep:
                        blk.buf.append(v)
                    return [Delta(blk.n, blk.nkind, v)]
                return []
            hd = _DELTAS.get(dt) if isinstance(dt, str) else None
            if hd is None:
                self._warn_unknown(f"delta {dt!r}")
                return []
            return hd(self, blk, d)
        h = _EVENTS.get(t) if isinstance(t, str) else None
        if h is None:
            if isinstance(t, str):
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
        if not isinstance(m, dict):
            return [Start()]
        u = m.get("usage")
        mid, model = m.get("id"), m.get("model")
        out: list[Event] = [Start(mid if isinstance(mid, str) else None, model if isinstance(model, str) else None,
                                  usage_from_wire(u) if isinstance(u, dict) else None)]
        content = m.get("content")
        if content and isinstance(content, list):  # not sent by Anthropic; some proxies prefill
            for i, b in enumerate(content):
                out.extend(self._block_start({"index": -1 - i, "content_block": b}))
                out.extend(self._block_stop({"index": -1 - i}))
        return out

    def _block_start(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = [] if self._started else self._no_start()
        idx = obj.get("index")
        cb = obj.get("content_block")
        if not isinstance(idx, int) or not isinstance(cb, dict) or not isinstance(t := cb.get("type"), str):
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
            if cits and isinstance(cits, list):
                blk.extra = list(cits)
            out.append(BlockStart(n, Text("")))
            text = cb.get("text")
            if text and isinstance(text, str):
                out.append(Delta(n, "text", text))
        elif t == "tool_use":
            self._has_tools = True
            tid, name = cb.get("id"), cb.get("name")
            tid = tid if isinstance(tid, str) else ""
            name = name if isinstance(name, str) else ""
            blk = _ToolBlk(n, ToolCall(tid, name))
            inp = cb.get("input")
            if inp and isinstance(inp, dict):
                blk.extra = dumps(inp).decode()  # used only if no input_json_delta follows
            out.append(BlockStart(n, ToolCall(tid, name, "")))
        elif t == "thinking":
            blk = _ThinkingBlk(n)
            out.append(BlockStart(n, Reasoning()))
            text = cb.get("thinking")
            if text and isinstance(text, str):
                blk.buf.append(text)
                out.append(Delta(n, "reasoning", text))
            sig = cb.get("signature")
            if sig and isinstance(sig, str):
                blk.sig = sig
        elif t == "redacted_thinking":
            part = Reasoning(text="", redacted=True, opaque={"protocol": PROTOCOL, "data": cb.get("data")})
            blk = _RedactedBlk(n, part)
            out.append(BlockStart(n, part))
        else:
            blk = _Blk(n, dict(cb))
            out.append(BlockStart(n, web_search_from_block(cb) or Opaque(PROTOCOL, cb, t)))
        blocks[idx] = blk
        return out

    def _d_ignored(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        """A content delta of a type this block does not stream (its own is decoded in feed)."""
        return []

    def _d_signature(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        v = d.get("signature")
        if isinstance(v, str):
            blk.sig = v
        return []

    def _d_json(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        """input_json_delta of a block other than tool_use (server tool input, kept for its end)."""
        v = d.get("partial_json")
        if v and isinstance(v, str):
            blk.buf.append(v)
        return []

    def _d_citation(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        c = d.get("citation")
        if blk.kind == "text" and isinstance(c, dict):
            if blk.extra is None:
                blk.extra = []
            blk.extra.append(c)
        return []

    def _d_compaction(self, blk: _Blk, d: dict[str, Any]) -> list[Event]:
        v = d.get("content")
        if blk.kind == "opaque" and isinstance(v, str):
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
                return [BlockEnd(n, Text("", [citation_to_neutral(c) for c in blk.extra if isinstance(c, dict)]))]
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
        return [BlockEnd(n, web_search_from_block(raw) or Opaque(PROTOCOL, raw, t if isinstance(t, str) else "unknown"))]

    def _message_delta(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = [] if self._started else self._no_start()
        u = obj.get("usage")
        if isinstance(u, dict):
            out.append(UsageEvent(usage_from_wire(u)))
        d = obj.get("delta")
        if isinstance(d, dict):
            reason = d.get("stop_reason")
            if reason is not None:
                seq = d.get("stop_sequence")
                out.append(Stop(stop_from_wire(reason, d.get("stop_details"), self._has_tools),
                                seq if isinstance(seq, str) else None))
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
class _WireBlock:
    """A neutral block as it goes to the client: one Anthropic content block (or none, dropped)."""

    __slots__ = ("buf", "delta_head", "index", "kind", "part", "scan", "sent", "signature")
    scan: JsonObjectScanner  # (set when a tool block's input starts)

    def __init__(self, index: int, kind: str, part: Any = None):
        self.index = index  # the Anthropic block index (-1: not yet sent)
        self.kind = kind  # text | refusal | thinking | redacted | tool | custom | opaque | drop
        self.sent = False
        self.buf: list[str] = []
        self.part = part
        self.signature: str | None = None
        #: the block's content_block_delta frame up to its value, once its index is known
        self.delta_head = b""


def _delta_head(index: int, delta_type: str, field: str) -> bytes:
    """content_block_delta up to its value: ``head + orjson.dumps(value) + _DELTA_TAIL`` is frame() of
    the event's dict (streamed deltas are most of the frames; the head is written once per block)."""
    return (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"%s","%s":'
            % (index, delta_type.encode(), field.encode()))


_DELTA_TAIL = b"}}\n\n"


def _block_start_frame(index: int, block: dict[str, Any]) -> bytes:
    return frame("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _block_delta_frame(index: int, delta_type: str, field: str, value: Any) -> bytes:
    return frame("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": {"type": delta_type, field: value}})


def _block_stop_frame(index: int) -> bytes:
    return frame("content_block_stop", {"type": "content_block_stop", "index": index})


def _empty_text() -> dict[str, Any]:
    return {"type": "text", "text": ""}


_MESSAGE_STOP = frame("message_stop", {"type": "message_stop"})
_TRUNCATED = (StopReason.MAX_OUTPUT, StopReason.CONTEXT_FULL)


class StreamEncoder(OneOpenBlockEncoder):
    """Neutral events -> Anthropic SSE for the client (``event:`` lines, Anthropic lifecycle). One
    content block is open at a time (:class:`OneOpenBlockEncoder` orders overlapping neutral blocks)."""

    __slots__ = ("_cut", "_has_tools", "_model", "_next_index", "_open", "_refusal", "_started", "_stop",
                 "_stop_seq", "_text_sent", "_usage", "ctx", "done")
    CLIENT = "Anthropic"

    def __init__(self, ctx: Any, warnings: list[str]):
        super().__init__(parses_streamed_arguments=CODEC.capabilities.parses_streamed_arguments)
        self.ctx = ctx
        self.warnings = warnings
        self.done = False
        self._started = False
        self._next_index = 0
        self._open: dict[int, _WireBlock] = {}
        self._usage: Usage | None = None
        self._stop: StopInfo | None = None
        self._stop_seq: str | None = None
        self._refusal: list[str] = []
        self._text_sent = False
        self._has_tools = False
        self._model = getattr(ctx, "model", None)
        self._cut: _WireBlock | None = None  # a tool block whose arguments ended incomplete (left open)

    def encode(self, ev: Event) -> bytes:
        if self.done:
            return b""
        if isinstance(ev, Delta):
            return self._delta(ev)
        if isinstance(ev, BlockStart):
            out = [b"" if self._started else self._message_start(None, None)]
            self._block_start(ev, out)
            return b"".join(out)
        if isinstance(ev, BlockEnd):
            out = []
            self._block_end(ev, out)
            return b"".join(out)
        if isinstance(ev, Start):
            return self._start(ev)
        if isinstance(ev, UsageEvent):
            self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
        elif isinstance(ev, Stop):
            self._stop = ev.stop
            self._stop_seq = ev.stop_sequence
        elif isinstance(ev, End):
            return self._end_turn()
        elif isinstance(ev, ErrorEvent):
            self.done = True
            return error_frame(ev.error)
        return b""

    def _delta(self, ev: Delta) -> bytes:
        """A delta: most events of a stream."""
        i, k, v = ev.index, ev.kind, ev.value
        o = self._open.get(i)
        out: list[bytes]
        if o is None or not v:
            out = []
            self._delta_elsewhere(ev, out)
            return b"".join(out)
        ok = o.kind
        if ok == "text" or ok == "refusal":
            if k == "text" or k == "refusal":
                return self._text_delta(o, v)
        elif ok == "tool" or ok == "custom":
            if k == "arguments":
                out = [self._args(o, v)]
                self._after_arguments(i, out)
                return b"".join(out)
        elif ok == "thinking":
            if k == "reasoning" or k == "summary":
                return self._thinking_delta(o, v)
            if k == "signature":
                o.signature = (o.signature or "") + v
        elif ok == "redacted" and o.index < 0 and (k == "reasoning" or k == "summary"):
            o.buf.append(v)
        return b""

    # ---- lifecycle
    def _message_start(self, sid: str | None, model: str | None) -> bytes:
        self._started = True
        return frame("message_start", {"type": "message_start", "message": {
            "id": msg_id(sid), "type": "message", "role": "assistant", "model": self._model or model or "unknown",
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage_to_wire(self._usage)}})

    def _start(self, ev: Start) -> bytes:
        if self._started:
            if ev.usage is not None:
                self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
            return b""
        if ev.usage is not None:
            self._usage = ev.usage
        return self._message_start(ev.id, ev.model)

    def _alloc(self) -> int:
        a = self._next_index
        self._next_index += 1
        return a

    # ---- the one-open-block order (OneOpenBlockEncoder's hooks)
    def _is_complete(self, index: int) -> bool:
        o = self._open.get(index)
        return o is None or (o.kind == "tool" and o.sent and o.scan.complete())

    def _tool_call(self, index: int) -> Part | None:
        o = self._open.get(index)
        return o.part if o is not None else None

    def _stalled(self) -> bool:
        return self._cut is not None or self.done

    def _fail(self, warning: str, error: Error, out: list[bytes]) -> None:
        self.warnings.append(warning)
        self.done = True
        out.append(error_frame(error))

    def _write_delta(self, ev: Delta, out: list[bytes]) -> None:
        out.append(self.encode(ev))

    def _close_block(self, index: int, final: Part | None, out: list[bytes]) -> None:
        o = self._open.pop(index, None)
        if o is not None:
            out.append(self._close(o, final))

    def _open_block(self, ev: BlockStart, out: list[bytes]) -> None:
        p = ev.part
        i = ev.index
        if isinstance(p, (WebSearchCall, WebSearchResults)):
            p = web_search_block(p)
        if isinstance(p, (Text, Refusal)):
            # emitted on its first text: an empty text block would be rejected when replayed
            o = self._open[i] = _WireBlock(-1, "text" if isinstance(p, Text) else "refusal")
            if p.text:
                out.append(self._text_delta(o, p.text))
            return
        if isinstance(p, Reasoning):
            op = p.opaque
            if p.redacted:
                if op and op.get("protocol") == PROTOCOL and isinstance(op.get("data"), str):
                    a = self._alloc()
                    self._open[i] = _WireBlock(a, "redacted")
                    out.append(_block_start_frame(a, {"type": "redacted_thinking", "data": op["data"]}))
                    return
                self._open[i] = _WireBlock(-1, "redacted", p)  # emitted at its end, once the payload is known
                return
            a = self._alloc()
            o = self._open[i] = _WireBlock(a, "thinking", p)
            o.delta_head = _delta_head(a, "thinking_delta", "thinking")
            out.append(_block_start_frame(a, {"type": "thinking", "thinking": "", "signature": ""}))
            if p.text:
                out.append(self._thinking_delta(o, p.text))
            return
        if isinstance(p, ToolCall):
            self._has_tools = True
            a = self._alloc()
            o = self._open[i] = _WireBlock(a, "custom" if p.kind == "custom" else "tool", p)
            o.delta_head = _delta_head(a, "input_json_delta", "partial_json")
            out.append(_block_start_frame(a, {"type": "tool_use", "id": p.id, "name": p.name, "input": {}}))
            if p.arguments:
                out.append(self._args(o, p.arguments))
            return
        if isinstance(p, Opaque):
            if p.protocol != PROTOCOL:
                warn_once(self.warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Anthropic "
                          "clients cannot represent it")
                self._open[i] = _WireBlock(-1, "drop")
                self._active = -1
                return
            raw = p.raw
            t = raw.get("type")
            t = t if isinstance(t, str) else ""
            start = raw
            if t in _INPUT_STREAMED and isinstance(raw.get("input"), dict):
                start = dict(raw, input={})
            elif t == "compaction":
                start = dict(raw, content=None)
            a = self._alloc()
            self._open[i] = _WireBlock(a, "opaque", p)
            out.append(_block_start_frame(a, start))
            return
        warn_once(self.warnings, f"{getattr(p, 'type', 'unknown')} part in a response dropped")
        self._open[i] = _WireBlock(-1, "drop")
        self._active = -1

    # ---- deltas
    def _text_start(self, o: _WireBlock) -> bytes:
        a = o.index = self._alloc()
        o.delta_head = _delta_head(a, "text_delta", "text")
        return _block_start_frame(a, _empty_text())

    def _text_delta(self, o: _WireBlock, v: str) -> bytes:
        pre = b""
        if o.index < 0:
            pre = self._text_start(o)
            o.sent = True
            self._text_sent = True
        if o.kind == "refusal":
            self._refusal.append(v)
        return pre + o.delta_head + orjson.dumps(v) + _DELTA_TAIL

    def _thinking_delta(self, o: _WireBlock, v: str) -> bytes:
        o.sent = True
        o.buf.append(v)
        return o.delta_head + orjson.dumps(v) + _DELTA_TAIL

    def _args(self, o: _WireBlock, v: str) -> bytes:
        """Every tool-argument fragment of a tool_use block passes here (streamed or late)."""
        if o.kind == "custom":
            o.sent = True
            o.buf.append(v)
            return b""
        # the SDK re-parses the whole buffer at every fragment: forward only valid object prefixes
        if o.sent:
            if o.scan.feed(v):
                return o.delta_head + orjson.dumps(v) + _DELTA_TAIL
            return self._bad_args(o, v)
        return self._first_args(o, v)

    def _first_args(self, o: _WireBlock, v: str) -> bytes:
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
        return o.delta_head + orjson.dumps(v) + _DELTA_TAIL

    def _bad_args(self, o: _WireBlock, frag: str | None) -> bytes:
        """Tool arguments the client's SDK could not parse (invalid, or ended incomplete): never
        forwarded; the client's native error event ends the turn and the rest of the upstream
        stream is dropped (StopInfo still says what the upstream said)."""
        out: list[bytes] = []
        warning, error = bad_arguments(o.part, frag, self.CLIENT)
        self._fail(warning, error, out)
        return out[0]

    # ---- block end
    def _close(self, o: _WireBlock, final: Any) -> bytes:
        k = o.kind
        if k == "drop":
            return b""
        if isinstance(final, (WebSearchCall, WebSearchResults)):
            final = web_search_block(final)
        out = b""
        if k == "text" or k == "refusal":
            if isinstance(final, (Text, Refusal)):
                if final.text and not o.sent:
                    out += self._text_delta(o, final.text)
                if isinstance(final, Text) and final.citations:
                    cits = _enc_citations(final.citations, self.warnings)
                    if cits and o.index < 0:
                        out += self._text_start(o)
                    for c in cits or ():
                        out += _block_delta_frame(o.index, "citations_delta", "citation", c)
            return out + _block_stop_frame(o.index) if o.index >= 0 else out
        if k == "thinking" or (k == "redacted" and o.index < 0):
            part: Reasoning = final if isinstance(final, Reasoning) else o.part
            op = part.opaque or o.part.opaque
            text = "".join(o.buf)
            if part.text and not text:
                text = part.text
            if k == "redacted":
                a = o.index = self._alloc()
                if op and op.get("protocol") == PROTOCOL and isinstance(op.get("data"), str):
                    return (_block_start_frame(a, {"type": "redacted_thinking", "data": op["data"]})
                            + _block_stop_frame(a))
                out = _block_start_frame(a, {"type": "thinking", "thinking": "", "signature": ""})
                o.delta_head = _delta_head(a, "thinking_delta", "thinking")
                if text:
                    out += self._thinking_delta(o, text)
            elif part.text and not o.sent:
                out += self._thinking_delta(o, part.text)
            if op and op.get("protocol") == PROTOCOL:
                sig = op.get("signature") if isinstance(op.get("signature"), str) else o.signature
            else:
                sig = _packed_signature(Reasoning(text, part.summary or o.part.summary, op,
                                                  part.redacted or o.part.redacted), text)
            if sig:
                out += _block_delta_frame(o.index, "signature_delta", "signature", sig)
            return out + _block_stop_frame(o.index)
        if k == "redacted":
            return _block_stop_frame(o.index)
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
            return out + _block_stop_frame(o.index)
        if k == "custom":
            text = "".join(o.buf)
            if not text and isinstance(final, ToolCall):
                text = final.arguments
            out += _block_delta_frame(o.index, "input_json_delta", "partial_json",
                                      orjson.dumps({"input": text}).decode())
            return out + _block_stop_frame(o.index)
        # opaque (Anthropic's own)
        part_o: Opaque = final if isinstance(final, Opaque) else o.part
        raw = part_o.raw
        t = raw.get("type")
        if not isinstance(t, str):
            t = ""
        if t in _INPUT_STREAMED and isinstance(raw.get("input"), dict) and raw["input"]:
            out += _block_delta_frame(o.index, "input_json_delta", "partial_json", dumps(raw["input"]).decode())
        elif t == "compaction" and isinstance(raw.get("content"), str):
            out += _block_delta_frame(o.index, "compaction_delta", "content", raw["content"])
        return out + _block_stop_frame(o.index)

    # ---- terminal
    def _end_turn(self) -> bytes:
        out = [b"" if self._started else self._message_start(None, None)]
        self._flush_held(out)
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
            out.append(_block_start_frame(a, _empty_text()))
            out.append(_block_delta_frame(a, "text_delta", "text", stop.message or FALLBACK_REFUSAL_TEXT))
            out.append(_block_stop_frame(a))
        reason, seq, details = stop_to_wire(stop, self._stop_seq, refusal_text, self.warnings, self._has_tools)
        out.append(frame("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": reason, "stop_sequence": seq, "stop_details": details},
            "usage": usage_to_wire(self._usage, delta=True)}))
        out.append(_MESSAGE_STOP)
        self.done = True
        return b"".join(out)


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
        counter=_facts.COUNTER,
        retry_after=ratelimit.reader("anthropic-ratelimit-{limit}-{what}",
                                     ("requests", "tokens", "input-tokens", "output-tokens"), ratelimit.instant),
    ),
    errors=_facts.ERRORS,
    capabilities=replace(_facts.CAPABILITIES, parses_streamed_arguments=True),
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.msg_id,
    sniff_request=_facts.sniff_request,
    sniff_response=_facts.sniff_response,
    sniff_stream=_facts.sniff_stream,
    is_error_body=_facts.is_error_body,
    stream_observes=_facts.stream_observes,
    cache_hints=add_cache_hints,
)
