"""OpenAI Chat Completions codec (``openai_chat_completions``).

Requests live in :mod:`._chat_request`; complete responses and SSE streams here. See
:mod:`proxai_core.codecs.base` for the contract and ``docs/dev/codec-brief.md`` for the rules.

Response/stream encoder rules owned here (docs/mapping.md states them):

* Refusal parts -> ``message.refusal`` (content null when there is no ordinary text); never the
  same text in both fields, unless the client's context asks for ``refusal_in_content`` (a route
  option for clients that show only ``content``): then the refusal text is in ``content`` too,
  complete (after any ordinary text) and streamed (each ``delta.refusal`` with a ``delta.content``).
* A REFUSAL stop without a Refusal part (Anthropic ``stop_reason: refusal``): non-streaming, the
  flattened visible text becomes ``message.refusal`` and content is null; with no visible text,
  ``StopInfo.message`` (explanation) is the refusal. Streaming: the explanation goes out as one
  ``delta.refusal`` only if neither content nor refusal was streamed yet.
* finish_reason: END_TURN stop, TOOL_USE tool_calls, MAX_OUTPUT/CONTEXT_FULL length, stated
  refusal stop, filter refusal (raw content_filter & co.) content_filter,
  PAUSED/OTHER/INTERRUPTED/REJECTED stop with a warning.
"""

from __future__ import annotations

from typing import Any

import orjson

from .. import reasoning as rz
from ..context import ClientContext
from ..errors import parse_error
from ..jsonutil import dumps
from ..neutral import (
    BlockEnd,
    BlockStart,
    Delta,
    End,
    Error,
    ErrorEvent,
    ErrorKind,
    Event,
    Opaque,
    Reasoning,
    Refusal,
    Response,
    Start,
    Stop,
    Text,
    ToolCall,
    ToolKind,
    Usage,
    UsageEvent,
)
from ..protocol import Protocol
from ..sse import DONE_FRAME, frame
from ..stop import GENERIC_REFUSAL, StopInfo, StopReason, classify_stop, is_filter_refusal
from . import _chat_common as _facts
from . import _openai_common as _models
from ._chat_common import (
    PROTOCOL,
    build_stop,
    chat_id,
    decode_usage,
    details_text,
    encode_usage,
    envelope_payload,
    finish_reason,
    merge_details,
    reasoning_parts,
    thinking_text,
    unpacked,
)
from ._chat_request import decode_request, encode_request
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


def error_frame(err: Error) -> bytes:
    """Chat's native mid-stream error: a bare ``data: {"error": {...}}`` line (no ``[DONE]``)."""
    return frame(None, _models.error_body(err))


# ============================================================================= response decode
def _citations(annotations: Any) -> list[dict[str, Any]] | None:
    if not isinstance(annotations, list) or not annotations:
        return None
    out = []
    for a in annotations:
        if not isinstance(a, dict):
            continue
        t = a.get("type")
        if t == "url_citation":
            uc = a.get("url_citation")
            if not isinstance(uc, dict):
                uc = a
            c: dict[str, Any] = {"type": "url", "raw": a}
            for src, dst in (("url", "url"), ("title", "title"), ("start_index", "start"),
                             ("end_index", "end"), ("content", "cited_text")):
                v = uc.get(src)
                if v is not None:
                    c[dst] = v
            out.append(c)
        elif t == "file":
            f = a.get("file")
            if not isinstance(f, dict):
                f = {}
            out.append({"type": "file", "filename": f.get("name"), "raw": a})
        else:
            out.append({"type": str(t), "raw": a})
    return out or None


def _content_parts(content: Any, parts: list[Any], warnings: list[str]) -> str:
    """message.content (string, or a list of parts for Mistral & co.) -> parts; returns the text."""
    if isinstance(content, str):
        if content:
            parts.append(Text(content))
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for p in content:
        if not isinstance(p, dict):
            continue
        t = p.get("type")
        if t == "text" and isinstance(p.get("text"), str):
            parts.append(Text(p["text"]))
            texts.append(p["text"])
        elif t == "thinking":
            parts.append(Reasoning(text=thinking_text(p.get("thinking")),
                                   opaque={"protocol": PROTOCOL, "field": "content_thinking"}))
        elif t == "refusal" and isinstance(p.get("refusal"), str):
            parts.append(Refusal(p["refusal"]))
        else:
            warnings.append(f"message content part type {t!r} ignored")
    return "".join(texts)


def _response_tool_calls(tcs: Any, parts: list[Any], resp_id: str | None) -> int:
    n = 0
    if not isinstance(tcs, list):
        return 0
    for j, tc in enumerate(tcs):
        if not isinstance(tc, dict):
            continue
        tid = tc.get("id")
        if not isinstance(tid, str) or not tid:
            tid = f"call_{resp_id or 'x'}_{j}"
        if tc.get("type") == "custom":
            c = tc.get("custom") or {}
            if isinstance(c.get("name"), str) and c["name"]:
                inp = c.get("input")
                parts.append(ToolCall(tid, c["name"], inp if isinstance(inp, str) else "", kind="custom"))
                n += 1
            continue
        fn = tc.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            continue
        args = fn.get("arguments")
        if isinstance(args, (dict, list)):
            args = dumps(args).decode()
        elif not isinstance(args, str):
            args = ""
        parts.append(ToolCall(tid, fn["name"], args))
        n += 1
    return n


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    resp = Response()
    if not isinstance(body, dict):
        resp.stop = StopInfo(StopReason.OTHER, message="response body is not a JSON object")
        return resp
    rid = body.get("id")
    resp.id = rid if isinstance(rid, str) and rid else None
    model = body.get("model")
    resp.model = model if isinstance(model, str) and model else None
    created = body.get("created")
    resp.created = created if isinstance(created, int) and not isinstance(created, bool) and created else None
    resp.usage = decode_usage(body.get("usage"))
    err = body.get("error")
    if err:
        e = parse_error(None, body)
        resp.extra["error"] = e
        resp.stop = classify_stop("error", category=e.kind, message=e.message,
                                  detail={"error": {"kind": e.kind, "code": e.code}})
        return resp
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        resp.stop = StopInfo(StopReason.OTHER, message="response has no choices")
        warnings.append("Chat response without choices")
        return resp
    if len(choices) > 1:
        warnings.append(f"response has {len(choices)} choices; only the first is translated")
    ch = choices[0]
    msg = ch.get("message")
    if not isinstance(msg, dict):
        msg = {}
    parts: list[Any] = []
    rfield = "reasoning_content" if isinstance(msg.get("reasoning_content"), str) else "reasoning"
    parts.extend(reasoning_parts(msg.get(rfield), rfield, msg.get("reasoning_details")))
    n_before = len(parts)
    text = _content_parts(msg.get("content"), parts, warnings)
    cites = _citations(msg.get("annotations"))
    if cites:
        for p in parts[n_before:]:
            if isinstance(p, Text):
                p.citations = cites
                break
        else:
            parts.append(Text("", citations=cites))
    refusal = msg.get("refusal")
    refusal = refusal if isinstance(refusal, str) and refusal else None
    if refusal:
        parts.append(Refusal(refusal))
    n_tools = _response_tool_calls(msg.get("tool_calls"), parts, resp.id)
    fc = msg.get("function_call")
    if isinstance(fc, dict) and isinstance(fc.get("name"), str) and fc["name"]:
        args = fc.get("arguments")
        parts.append(ToolCall(f"call_{resp.id or 'legacy'}", fc["name"], args if isinstance(args, str) else ""))
        n_tools += 1
    aud = msg.get("audio")
    if isinstance(aud, dict) and aud.get("data"):
        warnings.append("audio output dropped (it cannot be translated)")
    resp.parts = parts
    raw = ch.get("finish_reason")
    raw = raw if isinstance(raw, str) and raw else None
    detail: dict[str, Any] = {}
    nfr = ch.get("native_finish_reason")
    if nfr is not None:
        detail["native_finish_reason"] = nfr
    if raw == "content_filter" and isinstance(ch.get("content_filter_results"), dict):
        detail["content_filter_results"] = ch["content_filter_results"]
    resp.stop = build_stop(raw, refusal=refusal, produced=bool(text) or n_tools > 0,
                           has_tools=n_tools > 0, detail=detail)
    return resp


# ============================================================================= response encode
def _annotations(parts: list[Any], warnings: list[str] | None = None) -> list[dict[str, Any]]:
    out = []
    dropped: set[str] = set()
    for p in parts:
        if isinstance(p, Text) and p.citations:
            for c in p.citations:
                raw = c.get("raw")
                if isinstance(raw, dict) and raw.get("type") == "url_citation" and \
                        isinstance(raw.get("url_citation"), dict):
                    uc = raw["url_citation"]
                    if all(isinstance(uc.get(k), t) for k, t in (("url", str), ("title", str),
                                                                  ("start_index", int), ("end_index", int))):
                        out.append(raw)
                        continue
                url = c.get("url")
                if isinstance(url, str) and url:
                    title = c.get("title")
                    start = c.get("start")
                    end = c.get("end")
                    out.append({"type": "url_citation", "url_citation": {
                        "url": url, "title": title if isinstance(title, str) else "",
                        "start_index": start if isinstance(start, int) else 0,
                        "end_index": end if isinstance(end, int) else 0}})
                else:
                    dropped.add(str(c.get("type") or "citation"))
    if dropped and warnings is not None:
        warnings.append(f"citations without a URL ({', '.join(sorted(dropped))}) dropped: Chat Completions "
                        "has only url_citation annotations")
    return out


def _reasoning_out(parts: list[Any]) -> dict[str, Any]:
    """Reasoning parts -> message fields (native when chat-issued; else text + envelope)."""
    fields: dict[str, list[str]] = {}
    details: list[Any] = []
    for p in parts:
        if not isinstance(p, Reasoning):
            continue
        op = p.opaque
        if op is None:
            if p.text:
                fields.setdefault("reasoning_content", []).append(p.text)
            continue
        if op.get("protocol") == PROTOCOL:
            f = "reasoning" if op.get("field") == "reasoning" else "reasoning_content"
            fields.setdefault(f, []).append(p.text)
            if isinstance(op.get("details"), list):
                details.extend(op["details"])
            continue
        fields.setdefault("reasoning_content", []).append(
            p.text + rz.chat_envelope(envelope_payload(p, p.text)))
    out: dict[str, Any] = {f: t for f, v in fields.items() if (t := "".join(v))}
    if details:
        out["reasoning_details"] = details
    return out


def _tool_call_out(p: ToolCall) -> dict[str, Any]:
    if p.kind == "custom":
        return {"id": p.id, "type": "custom", "custom": {"name": p.name, "input": p.arguments}}
    return {"id": p.id, "type": "function", "function": {"name": p.name, "arguments": p.arguments or "{}"}}


def encode_response(resp: Response, ctx: ClientContext, warnings: list[str]) -> dict[str, Any]:
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    for p in resp.parts:
        if isinstance(p, Text):
            texts.append(p.text)
        elif isinstance(p, Refusal):
            refusals.append(p.text)
        elif isinstance(p, ToolCall):
            calls.append(_tool_call_out(p))
        elif isinstance(p, Reasoning):
            pass
        elif isinstance(p, Opaque):
            warnings.append(f"{p.label or p.raw.get('type') or 'provider'} part from {p.protocol} dropped "
                            "(Chat Completions cannot carry it)")
        else:
            warnings.append(f"{p.type} part in a response dropped (Chat Completions cannot carry it)")
    stop = resp.stop or classify_stop(None, has_tool_calls=bool(calls))
    text: str | None = "".join(texts) or None
    refusal: str | None = "".join(refusals) or None
    if stop.reason is StopReason.REFUSAL and refusal is None:
        if text and not is_filter_refusal(stop):
            # a stated refusal whose visible text came as ordinary text (Anthropic): it stays a refusal
            refusal, text = text, None
        elif not text:
            refusal = stop.message or GENERIC_REFUSAL  # never an empty success
    fr = finish_reason(stop, bool(calls), warnings)
    content = text
    if refusal and ctx.refusal_in_content:  # for clients that show only content
        content = (text or "") + refusal
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    if text is not None:
        ann = _annotations(resp.parts, warnings)
        if ann:
            message["annotations"] = ann
    message.update(_reasoning_out(resp.parts))
    if calls:
        message["tool_calls"] = calls
    out: dict[str, Any] = {
        "id": chat_id(resp.id),
        "object": "chat.completion",
        "created": resp.created or NO_TIMESTAMP,
        "model": (getattr(ctx, "model", None) or resp.model or ""),
        "choices": [{"index": 0, "message": message, "finish_reason": fr, "logprobs": None}],
    }
    if resp.usage is not None:
        out["usage"] = encode_usage(resp.usage)
    return out


# ============================================================================= stream decode
_INTERRUPTED = "upstream stream ended before its terminal event"

#: created when the source has no timestamp (an Anthropic upstream): a fixed value, never the clock,
#: so one input always gives the same bytes (docs/mapping.md)
NO_TIMESTAMP = 0

# block kinds
_TEXT, _REFUSAL, _REASONING = 1, 2, 3


_NO_KEY: Any = object()


class _Call:
    __slots__ = ("args", "id", "idx", "key", "kind", "name", "pending", "started")

    def __init__(self, cid: str, name: str, kind: str):
        self.key = _NO_KEY  # the index this call is found by (_calls_by_index), while it is
        self.idx = -1
        self.id = cid
        self.name = name
        self.kind: ToolKind = "custom" if kind == "custom" else "function"
        self.args: list[str] = []
        self.started = False
        self.pending: list[str] = []


class StreamDecoder:
    """Chat chunks -> neutral events. Stop is held until ``[DONE]`` (or EOF after a finish) so a
    usage-only chunk after the finish chunk and an in-band error after it are both seen first."""

    __slots__ = ("_calls", "_calls_by_index", "_choice_warned", "_cites", "_created", "_detail", "_details",
                 "_dup_warned", "_finish", "_finish_seen", "_had_tools", "_id", "_last_call", "_late_warned",
                 "_model", "_next", "_out", "_produced", "_reasoning_field", "_reasoning_text", "_refusal",
                 "_seq_idx", "_seq_kind", "_started", "done", "warnings")

    def __init__(self, warnings: list[str]):
        self.warnings = warnings
        self.done = False
        self._started = False
        self._next = 0
        # sequential blocks: kind -> neutral index (at most one open per kind)
        self._seq_kind = 0
        self._seq_idx = -1
        self._reasoning_field = "reasoning_content"
        self._reasoning_text: list[str] = []
        self._details: list[dict[str, Any]] = []
        self._refusal: list[str] = []
        self._produced = False
        self._calls_by_index: dict[Any, _Call] = {}
        self._calls: list[_Call] = []
        self._last_call: _Call | None = None
        self._finish: str | None = None
        self._finish_seen = False
        self._dup_warned = False
        self._late_warned = False
        self._choice_warned = False
        self._detail: dict[str, Any] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._created: int | None = None
        self._out: list[Event] = []
        self._cites: list[dict[str, Any]] = []
        self._had_tools = False

    # ------------------------------------------------------------------ helpers
    def _start(self, obj: dict[str, Any] | None) -> None:
        if obj is not None:
            v = obj.get("id")
            if isinstance(v, str) and v:
                self._id = v
            v = obj.get("model")
            if isinstance(v, str) and v:
                self._model = v
            v = obj.get("created")
            if isinstance(v, int) and v:
                self._created = v
        self._started = True
        self._out.append(Start(self._id, self._model, None, self._created))

    def _close_seq(self) -> None:
        k = self._seq_kind
        if not k:
            return
        idx = self._seq_idx
        if k == _REASONING:
            op: dict[str, Any] = {"protocol": PROTOCOL, "field": self._reasoning_field}
            if self._details:
                op["details"] = self._details
                self._details = []
            self._out.append(BlockEnd(idx, Reasoning("".join(self._reasoning_text), opaque=op)))
            self._reasoning_text = []
        elif k == _REFUSAL:
            self._out.append(BlockEnd(idx, Refusal("".join(self._refusal))))
        elif self._cites:
            self._out.append(BlockEnd(idx, Text("", citations=self._cites)))
            self._cites = []
        else:
            self._out.append(BlockEnd(idx))
        self._seq_kind = 0

    def _open_seq(self, kind: int) -> int:
        if self._seq_kind == kind:
            return self._seq_idx
        self._close_seq()
        idx = self._next
        self._next += 1
        self._seq_kind = kind
        self._seq_idx = idx
        if kind == _TEXT:
            part: Any = Text("")
        elif kind == _REFUSAL:
            part = Refusal("")
        else:
            part = Reasoning(opaque={"protocol": PROTOCOL, "field": self._reasoning_field})
        self._out.append(BlockStart(idx, part))
        return idx

    # ------------------------------------------------------------------ delta fields
    def _on_refusal(self, v: Any, delta: dict[str, Any]) -> None:
        if v and isinstance(v, str):
            self._refusal.append(v)
            self._out.append(Delta(self._seq_idx if self._seq_kind == _REFUSAL else self._open_seq(_REFUSAL),
                                   "refusal", v))

    def _reasoning_delta(self, v: str) -> None:
        if rz._CHAT_OPEN in v:  # an envelope of ours (upstream is a ProxAI-translated Chat stream)
            self._envelope(v)
            return
        self._reasoning_text.append(v)
        self._out.append(Delta(self._open_seq(_REASONING), "reasoning", v))

    def _envelope(self, v: str) -> None:
        for piece, payload in rz.split_chat_reasoning(v):
            if payload is None:
                if piece:
                    self._reasoning_text.append(piece)
                    self._out.append(Delta(self._open_seq(_REASONING), "reasoning", piece))
                continue
            idx = self._open_seq(_REASONING)
            already = "".join(self._reasoning_text)
            visible = payload.get("text")
            if not isinstance(visible, str):
                visible = ""
            if visible.startswith(already) and len(visible) > len(already):
                self._out.append(Delta(idx, "reasoning", visible[len(already):]))
            self._out.append(BlockEnd(idx, unpacked(payload)))
            self._reasoning_text = []
            self._seq_kind = 0

    def _on_reasoning_content(self, v: Any, delta: dict[str, Any]) -> None:
        if isinstance(v, str) and v:
            if self._seq_kind != _REASONING:
                self._reasoning_field = "reasoning_content"
            self._reasoning_delta(v)

    def _on_reasoning(self, v: Any, delta: dict[str, Any]) -> None:
        if isinstance(v, str) and v:
            if self._seq_kind != _REASONING:
                self._reasoning_field = "reasoning"
            self._reasoning_delta(v)

    def _on_details(self, v: Any, delta: dict[str, Any]) -> None:
        if not isinstance(v, list) or not v:
            return
        if self._seq_kind != _REASONING:
            if not isinstance(delta.get("reasoning_content"), str):
                self._reasoning_field = "reasoning"
            self._open_seq(_REASONING)
        merge_details(self._details, v)
        r = delta.get("reasoning")
        rc = delta.get("reasoning_content")
        if not (isinstance(r, str) and r) and not (isinstance(rc, str) and rc):
            t = details_text(v)
            if t:
                self._reasoning_text.append(t)
                self._out.append(Delta(self._seq_idx, "reasoning", t))

    def _on_annotations(self, v: Any, delta: dict[str, Any]) -> None:
        c = _citations(v)
        if c:
            self._cites.extend(c)

    def _on_function_call(self, v: Any, delta: dict[str, Any]) -> None:
        if isinstance(v, dict):
            self._tool_fragment({"index": "legacy", "function": v})

    def _on_tool_calls(self, v: Any, delta: dict[str, Any]) -> None:
        if not isinstance(v, list):
            return
        for tc in v:
            if not isinstance(tc, dict):
                continue
            # most fragments continue the last call: its index and its next arguments, nothing else
            # (call.key == index means _calls_by_index[index] is that call: what _tool_fragment finds)
            call = self._last_call
            if call is not None and call.started and len(tc) == 2 and tc.get("index") == call.key:
                fn = tc.get("function")
                if isinstance(fn, dict) and len(fn) == 1:
                    frag = fn.get("arguments")
                    if isinstance(frag, str):
                        if frag:
                            call.args.append(frag)
                            self._out.append(Delta(call.idx, "arguments", frag))
                        continue
            self._tool_fragment(tc)

    def _tool_fragment(self, tc: dict[str, Any]) -> None:
        key = tc.get("index")
        if not isinstance(key, (int, str)):
            key = None
        tid = tc.get("id")
        tid = tid if tid and isinstance(tid, str) else None
        inner = tc.get("function")
        ttype = tc.get("type")
        if isinstance(inner, dict) and ttype != "custom":  # (the usual fragment)
            kind = "function"
        else:
            custom = tc.get("custom")
            kind = "custom" if ttype == "custom" or (isinstance(custom, dict) and not isinstance(inner, dict)) \
                else "function"
            if kind == "custom":
                inner = custom
            if not isinstance(inner, dict):
                inner = {}
        name = inner.get("name")
        name = name if name and isinstance(name, str) else None
        frag = inner.get("input" if kind == "custom" else "arguments")
        if not isinstance(frag, str):
            frag = dumps(frag).decode() if isinstance(frag, (dict, list)) else None
        frag = frag or None
        call = None
        if key is not None:
            call = self._calls_by_index.get(key)
            if call is not None and tid is not None and tid != call.id:
                call = None  # a parallel call reusing the index: new call
        elif tid is not None:
            for c in self._calls:
                if c.id == tid:
                    call = c
                    break
        else:
            call = self._last_call
            if call is not None and name and call.name:
                call = None  # no index, no id: a fragment carrying a name starts a new call
        if call is None:
            if self._seq_kind:
                self._close_seq()  # text/refusal/reasoning end when a tool call starts
            call = _Call(tid or f"call_{self._id or 'x'}_{len(self._calls)}", name or "", kind)
            self._calls.append(call)
            if key is not None:
                prev = self._calls_by_index.get(key)
                if prev is not None:
                    prev.key = _NO_KEY
                self._calls_by_index[key] = call
                call.key = key
        self._last_call = call
        if not call.started:
            if name and not call.name:
                call.name = name
            if not call.name:
                if frag:
                    call.pending.append(frag)
                return
            if self._seq_kind:
                self._close_seq()
            call.idx = self._next
            self._next += 1
            call.started = True
            self._produced = True
            self._out.append(BlockStart(call.idx, ToolCall(call.id, call.name, "", call.kind)))
            if call.pending:
                p = "".join(call.pending)
                call.pending = []
                call.args.append(p)
                self._out.append(Delta(call.idx, "arguments", p))
        if frag:
            call.args.append(frag)
            self._out.append(Delta(call.idx, "arguments", frag))

    # ------------------------------------------------------------------ lifecycle
    def _close_all(self) -> None:
        self._close_seq()
        if self._cites:  # annotations that never met a text block
            idx = self._next
            self._next += 1
            self._out.append(BlockStart(idx, Text("")))
            self._out.append(BlockEnd(idx, Text("", citations=self._cites)))
            self._cites = []
        for c in self._calls:
            if not c.started:
                self.warnings.append(f"tool call {c.id} arrived without a name")
                c.idx = self._next
                self._next += 1
                c.started = True
                self._out.append(BlockStart(c.idx, ToolCall(c.id, "", "", c.kind)))
                if c.pending:
                    c.args.extend(c.pending)
            self._out.append(BlockEnd(c.idx, ToolCall(c.id, c.name, "".join(c.args), c.kind)))
        self._calls = []
        self._calls_by_index = {}
        self._last_call = None

    def _stop_info(self) -> StopInfo:
        return build_stop(self._finish, refusal="".join(self._refusal) or None,
                          produced=self._produced, has_tools=self._had_tools, detail=self._detail)

    def _terminal(self) -> list[Event]:
        if not self._started:
            self._start(None)
        if self._calls:
            self._had_tools = True
        if self._seq_kind or self._calls or self._cites:  # else _close_all has nothing to do
            self._close_all()
        self._out.append(Stop(self._stop_info()))
        self._out.append(End())
        self.done = True
        out, self._out = self._out, []
        return out

    def _error(self, obj: Any) -> list[Event]:
        err = parse_error(None, obj)
        if err.message == "upstream returned HTTP None":
            err.message = "upstream stream error"
        self._out.append(ErrorEvent(err))
        self.done = True
        out, self._out = self._out, []
        return out

    def feed(self, event: str | None, data: str) -> list[Event]:
        if self.done:
            return []
        if data[:1] != "{" and data.strip() == "[DONE]":  # no copy of ordinary JSON payloads
            return self._terminal()
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            if event == "error":
                return self._error(data)
            self.warnings.append("invalid JSON in a Chat stream event ignored")
            return []
        if not isinstance(obj, dict):
            self.warnings.append("non-object Chat stream event ignored")
            return []
        out = self._out
        if event == "error" or obj.get("error"):
            u = decode_usage(obj.get("usage"))
            if u is not None:
                out.append(UsageEvent(u))
            return self._error(obj)
        choices = obj.get("choices")
        if not self._started and (obj.get("id") or obj.get("model") or choices or obj.get("usage")):
            self._start(obj)  # Azure's prompt-filter chunk (no id, no model, no choices) waits
        if isinstance(choices, list):
            for ch in choices:
                if not isinstance(ch, dict):
                    continue
                if ch.get("index", 0) != 0:
                    if not self._choice_warned:
                        self._choice_warned = True
                        self.warnings.append("stream has more than one choice; only the first is translated")
                    continue
                delta = ch.get("delta")
                if isinstance(delta, dict) and delta:
                    if self._finish_seen:
                        if not self._late_warned and any(delta.get(k) for k in _DELTA_FIELDS):
                            self._late_warned = True
                            self.warnings.append("content after finish_reason ignored")
                    else:
                        for k, v in delta.items():
                            if v is None:
                                continue
                            if k == "content":  # (most deltas: no handler call)
                                if v and isinstance(v, str):
                                    self._produced = True
                                    out.append(Delta(self._seq_idx if self._seq_kind == _TEXT
                                                     else self._open_seq(_TEXT), "text", v))
                            else:
                                h = _DELTA_HANDLERS.get(k)
                                if h is not None:
                                    h(self, v, delta)
                fr = ch.get("finish_reason")
                if fr:
                    self._on_finish(fr, ch)
        elif choices:
            self.warnings.append("Chat stream chunk whose choices is not a list: its choices ignored")
        u = obj.get("usage")
        if u is not None:
            usage = decode_usage(u)
            if usage is not None:
                out.append(UsageEvent(usage))
        self._out = []
        return out

    def _on_finish(self, fr: Any, ch: dict[str, Any]) -> None:
        if self._finish_seen:
            if not self._dup_warned:
                self._dup_warned = True
                self.warnings.append(f"finish_reason sent twice ({self._finish!r}, then {fr!r}); the first is kept")
            return
        self._finish_seen = True
        self._finish = fr if isinstance(fr, str) else str(fr)
        nfr = ch.get("native_finish_reason")
        if nfr is not None:
            self._detail["native_finish_reason"] = nfr
        if fr == "content_filter" and isinstance(ch.get("content_filter_results"), dict):
            self._detail["content_filter_results"] = ch["content_filter_results"]
        self._had_tools = bool(self._calls)
        self._close_all()

    def finish(self) -> list[Event]:
        if self.done:
            return []
        if self._finish_seen:
            return self._terminal()
        self.done = True
        out, self._out = self._out, []
        out.append(ErrorEvent(Error(kind=ErrorKind.INTERRUPTED, message=_INTERRUPTED, status=502)))
        return out


# delta field -> handler (per class: no bound-method table built per stream)
_DELTA_HANDLERS = {  # ("content" is read in feed itself)
    "refusal": StreamDecoder._on_refusal,
    "reasoning_content": StreamDecoder._on_reasoning_content,
    "reasoning": StreamDecoder._on_reasoning,
    "reasoning_details": StreamDecoder._on_details,
    "tool_calls": StreamDecoder._on_tool_calls,
    "function_call": StreamDecoder._on_function_call,
    "annotations": StreamDecoder._on_annotations,
}
_DELTA_FIELDS = ("content", *_DELTA_HANDLERS)


# ============================================================================= stream encode
#: a chunk's constant prefix (id, created, model), up to its choice's delta
_PREFIX = b'data: {"id":%b,"object":"chat.completion.chunk","created":%d,"model":%b,"choices":[{"index":0,"delta":'
#: the value slot of a delta template: _chunk builds the chunk with it, the template is split there
_SLOT = "\x00slot\x00"
_SLOT_JSON = orjson.dumps(_SLOT)


def _body(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """A chunk after its stream's constant prefix: its delta and finish_reason (see StreamEncoder._chunk)."""
    return orjson.dumps(delta) + b',"finish_reason":' + orjson.dumps(finish) + b'}]}\n\n'


#: the first chunk of every stream, after its prefix
_ROLE_BODY = _body({"role": "assistant", "content": ""})


class _Out:
    __slots__ = ("args_sent", "chat_index", "field", "kind", "post", "pre", "text", "tool_kind")

    def __init__(self, kind: str):
        self.kind = kind
        self.chat_index = -1
        self.args_sent = False
        self.text: list[str] | None = None
        self.field = "reasoning_content"
        self.tool_kind = "function"
        #: this block's delta chunk before and after its value, once it has a delta
        self.pre = b""
        self.post = b""


class StreamEncoder:
    """Neutral events -> Chat SSE for the client (bare ``data:`` lines, ``[DONE]`` at the end)."""

    def __init__(self, ctx: ClientContext, warnings: list[str]):
        self.ctx = ctx
        self.warnings = warnings
        self.done = False
        self._prefix = b""  # (empty until the stream began)
        self._head: tuple[str, int, str] | None = None
        self._blocks: dict[int, _Out] = {}
        self._next_tool = 0
        self._content_sent = False
        self._refusal_sent = False
        self._had_tools = False
        self._usages: list[Usage] = []  # (merged only if the client asked for a usage chunk)
        self._finished = False
        self._annotations: list[dict[str, Any]] = []
        #: a refusal's text also goes out as delta.content (clients that show only content)
        self._refusal_in_content = ctx.refusal_in_content

    # ------------------------------------------------------------------ framing
    def _begin(self, ev: Start | None) -> bytes:
        cid = chat_id(ev.id if ev is not None else None)
        model = getattr(self.ctx, "model", None) or (ev.model if ev is not None else None) or ""
        created = int((ev.created if ev is not None else None) or NO_TIMESTAMP)
        self._head = (cid, created, model)
        # constant chunk prefix, so each chunk costs one small orjson.dumps
        self._prefix = _PREFIX % (orjson.dumps(cid), created, orjson.dumps(model))
        return self._prefix + _ROLE_BODY

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        """The one builder of a choice chunk (test_wire_builders checks it against frame())."""
        return self._prefix + _body(delta, finish)

    def _template(self, b: _Out) -> None:
        """Block b's delta chunk split around its value: the chunk of its delta shape holding _SLOT (the
        last string in it), so each delta is ``pre + dumped value + post`` from the one chunk builder."""
        before, _, after = _body(self._delta_of(b, _SLOT)).rpartition(_SLOT_JSON)
        b.pre = self._prefix + before
        b.post = after

    @staticmethod
    def _delta_of(b: _Out, value: str) -> dict[str, Any]:
        """The delta of a chunk carrying one value of block b (its template's shape, with _SLOT)."""
        k = b.kind
        if k == "text":
            return {"content": value}
        if k == "refusal":
            return {"refusal": value}
        if k == "reasoning":
            return {b.field: value}
        if b.tool_kind == "custom":
            return {"tool_calls": [{"index": b.chat_index, "custom": {"input": value}}]}
        return {"tool_calls": [{"index": b.chat_index, "function": {"arguments": value}}]}

    def _refusal_delta(self, text: str) -> dict[str, Any]:
        return {"content": text, "refusal": text} if self._refusal_in_content else {"refusal": text}

    # ------------------------------------------------------------------ events
    def encode(self, ev: Event) -> bytes:
        if self.done:
            return b""
        if isinstance(ev, Delta):  # the usual event
            return self._delta(ev)
        if isinstance(ev, ErrorEvent):
            self.done = True
            return error_frame(ev.error)
        pre = b""
        if not self._prefix:
            if isinstance(ev, Start):
                self._on_start(ev)
                return self._begin(ev)
            pre = self._begin(None)
        if isinstance(ev, BlockStart):
            return pre + self._block_start(ev)
        if isinstance(ev, BlockEnd):
            return pre + self._block_end(ev)
        if isinstance(ev, Start):
            return pre + self._on_start(ev)
        if isinstance(ev, UsageEvent):
            self._usages.append(ev.usage)
        elif isinstance(ev, Stop):
            return pre + self._stop(ev.stop)
        elif isinstance(ev, End):
            return pre + self._end(ev)
        return pre

    def _delta(self, ev: Delta) -> bytes:
        b = self._blocks.get(ev.index)
        if b is None:  # (a block's deltas follow its start, which began the stream)
            return b"" if self._prefix else self._begin(None)
        v = ev.value
        if not v:
            return b""
        k = ev.kind
        kind = b.kind
        if kind == "text":
            if k != "text":
                return b""
            self._content_sent = True
        elif kind == "tool":
            if k != "arguments":
                return b""
        elif kind == "refusal":
            if k != "refusal":
                return b""
            self._refusal_sent = True
            if self._refusal_in_content:
                b.args_sent = True
                return self._chunk(self._refusal_delta(v))
        elif (k == "reasoning" or k == "summary") and b.text is not None:
            b.text.append(v)
        else:
            return b""
        b.args_sent = True
        if not b.pre:
            self._template(b)
        return b.pre + orjson.dumps(v) + b.post

    def _on_start(self, ev: Start) -> bytes:
        if ev.usage is not None:
            self._usages.append(ev.usage)
        return b""

    def _block_start(self, ev: BlockStart) -> bytes:
        p = ev.part
        if isinstance(p, Text):
            self._blocks[ev.index] = _Out("text")
            if p.text:
                self._content_sent = self._blocks[ev.index].args_sent = True
                return self._chunk({"content": p.text})
            return b""
        if isinstance(p, Refusal):
            self._blocks[ev.index] = _Out("refusal")
            if p.text:
                self._refusal_sent = self._blocks[ev.index].args_sent = True
                return self._chunk(self._refusal_delta(p.text))
            return b""
        if isinstance(p, Reasoning):
            b = _Out("reasoning")
            b.text = []
            op = p.opaque
            if op is not None and op.get("protocol") == PROTOCOL and op.get("field") == "reasoning":
                b.field = "reasoning"
            self._blocks[ev.index] = b
            if p.text:
                b.text.append(p.text)
                return self._chunk({b.field: p.text})
            return b""
        if isinstance(p, ToolCall):
            b = _Out("tool")
            b.chat_index = self._next_tool
            self._next_tool += 1
            b.tool_kind = p.kind
            self._blocks[ev.index] = b
            self._had_tools = True
            if p.kind == "custom":
                first: dict[str, Any] = {"index": b.chat_index, "id": p.id, "type": "custom",
                                         "custom": {"name": p.name, "input": p.arguments or ""}}
            else:
                first = {"index": b.chat_index, "id": p.id, "type": "function",
                         "function": {"name": p.name, "arguments": p.arguments or ""}}
            if p.arguments:
                b.args_sent = True
            return self._chunk({"tool_calls": [first]})
        if isinstance(p, Opaque):
            self.warnings.append(f"{p.label or p.raw.get('type') or 'provider'} part from {p.protocol} dropped "
                                 "(Chat Completions cannot carry it)")
        return b""

    def _block_end(self, ev: BlockEnd) -> bytes:
        b = self._blocks.pop(ev.index, None)
        if b is None:
            return b""
        final = ev.part
        if b.kind == "tool":
            args = final.arguments if isinstance(final, ToolCall) else ""
            if b.args_sent:
                return b""
            if not args and b.tool_kind == "function":
                args = "{}"  # a tool call with no arguments at all: valid JSON for the client
            if not args:
                return b""
            return self._chunk(self._delta_of(b, args))
        if b.kind == "reasoning":
            if not isinstance(final, Reasoning):
                return b""
            op = final.opaque
            text = "".join(b.text or ())
            out = b""
            if not text and final.text:
                text = final.text
                out = self._chunk({b.field: text})
            if op is None or op.get("protocol") == PROTOCOL:
                if op is not None and isinstance(op.get("details"), list) and op["details"]:
                    out += self._chunk({"reasoning_details": op["details"]})
                return out
            payload = envelope_payload(final, final.text or text)
            return out + self._chunk({"reasoning_content": rz.chat_envelope(payload)})
        if b.kind == "text" and isinstance(final, Text) and final.citations:
            self._annotations.extend(_annotations([final], self.warnings))
        if b.kind == "text" and isinstance(final, Text) and final.text and not b.args_sent:
            self._content_sent = True
            return self._chunk({"content": final.text})
        if b.kind == "refusal" and isinstance(final, Refusal) and final.text and not b.args_sent:
            self._refusal_sent = True
            return self._chunk(self._refusal_delta(final.text))
        return b""

    def _stop(self, stop: StopInfo) -> bytes:
        if self._finished:
            return b""
        self._finished = True
        out = b""
        if stop.reason is StopReason.REFUSAL and not self._content_sent and not self._refusal_sent:
            # streaming: the explanation as delta.refusal, only if nothing was said yet
            self._refusal_sent = True
            out = self._chunk(self._refusal_delta(stop.message or GENERIC_REFUSAL))
        if self._annotations:  # one chunk: the SDK accumulator cannot merge unindexed lists
            out += self._chunk({"annotations": self._annotations})
        fr = finish_reason(stop, self._had_tools, self.warnings)
        return out + self._chunk({}, fr)

    def _end(self, ev: End | None = None) -> bytes:
        out = b""
        if not self._finished:
            out = self._stop(classify_stop(None, has_tool_calls=self._had_tools))
        self.done = True
        if self._usages and getattr(self.ctx, "include_usage", False):
            usage = self._usages[0]
            for u in self._usages[1:]:
                usage = usage.merge(u)
            cid, created, model = self._head or ("", NO_TIMESTAMP, "")
            out += frame(None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [], "usage": encode_usage(usage)})
        return out + DONE_FRAME


# ============================================================================= the codec
CODEC = Codec(
    protocol=Protocol(_facts.PROTOCOL),
    name="chat",
    label="OpenAI Chat Completions",
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
        model_entry=_models.model_entry,
        model_list=_models.model_list,
    ),
    errors=_facts.ERRORS,
    capabilities=_facts.CAPABILITIES,
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.chat_id,
    sniff_request=_facts.sniff_request,
    sniff_response=_facts.sniff_response,
    sniff_stream=_facts.sniff_stream,
    stream_observes=_facts.stream_observes,
    is_error_body=_facts.is_error_body,
    cache_hints=_models.chat_prompt_cache_key,
)

