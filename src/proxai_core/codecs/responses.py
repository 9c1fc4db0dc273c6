"""OpenAI Responses codec (``openai_responses``): requests, complete responses and SSE streams.

Contract: :mod:`proxai_core.codecs.base`. Requests live in ``_responses_request``; shared helpers
(usage, citations, the status tables, ids) in ``_responses_common``.

Decisions worth knowing (see also the codec brief):

* Client-side status: END_TURN / TOOL_USE / PAUSED -> ``completed``; MAX_OUTPUT and
  CONTEXT_FULL -> ``incomplete`` {max_output_tokens}; a model refusal -> ``completed`` with a refusal
  part (never ``failed``); a provider filter refusal (Chat ``content_filter``, ...) -> ``incomplete``
  {content_filter} plus a refusal part; INTERRUPTED ``cancelled`` -> ``cancelled``, other
  INTERRUPTED -> ``failed`` with error ``server_error``; OTHER -> ``completed`` + a warning.
* Streams: ``response.completed`` for completed, ``response.incomplete`` for incomplete (and for
  cancelled: there is no ``response.cancelled`` event), ``response.failed`` for failed.
* Ids are derived from the source ids: ``resp_<base>``, message ``msg_<base>_<output_index>``,
  reasoning ``rs_<base>_<output_index>``, tool calls ``fc_``/``ctc_`` + the call id without its
  prefix. Consecutive text/refusal parts share one message item (streaming and non-streaming alike).
"""

from __future__ import annotations

import hashlib
from typing import Any, cast

import orjson

from .. import reasoning as rz
from ..context import ClientContext
from ..errors import TranslationError, parse_error
from ..jsonscan import JsonObjectScanner
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
    Part,
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
from ..sse import frame
from ..stop import StopInfo, StopReason, is_filter_refusal
from ..strict import MalformedEvent
from . import _openai_common as _models
from . import _responses_common as _facts
from ._blocks import OneOpenBlockEncoder
from ._responses_common import (
    PROTOCOL,
    annotations_to_citations,
    citations_to_annotations,
    decode_usage,
    encode_usage,
    error_event_payload,
    id_base,
    refusal_fallback,
    response_error,
    response_error_object,
    stop_from_status,
    terminal_status,
    tool_item_id,
)
from ._responses_request import decode_request, encode_request
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


# ============================================================================= response decode
def _reasoning_from_item(item: dict[str, Any]) -> Reasoning:
    summ = item.get("summary")
    texts = [s["text"] for s in summ if isinstance(s, dict) and isinstance(s.get("text"), str)] \
        if isinstance(summ, list) else []
    cont = item.get("content")
    ctexts = [s["text"] for s in cont if isinstance(s, dict) and isinstance(s.get("text"), str)] \
        if isinstance(cont, list) else []
    enc = item.get("encrypted_content")
    rid = item.get("id")
    return Reasoning(
        text="\n\n".join(texts) if texts else "\n\n".join(ctexts),
        summary=texts or None,
        opaque={"protocol": PROTOCOL, "id": rid if isinstance(rid, str) else None,
                "encrypted_content": enc if isinstance(enc, str) else None},
    )


def _tool_from_item(item: dict[str, Any]) -> ToolCall:
    custom = item.get("type") == "custom_tool_call"
    args = item.get("input" if custom else "arguments")
    call_id = item.get("call_id")
    name = item.get("name")
    iid = item.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) else "",
        name=name if isinstance(name, str) else "",
        arguments=args if isinstance(args, str) else ("" if args is None else dumps(args).decode()),
        kind="custom" if custom else "function",
        item_id=iid if isinstance(iid, str) else None,
    )


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    if not isinstance(body, dict):
        raise TranslationError("response body must be a JSON object", field="body")
    w = warnings
    resp = Response()
    if "output" not in body and isinstance(body.get("error"), (dict, str)):
        # an HTTP error body handed over as a response
        resp.extra["error"] = parse_error(None, body)
        resp.stop = StopInfo(StopReason.INTERRUPTED, raw="error", category=resp.extra["error"].kind,
                             message=resp.extra["error"].message)
        return resp
    rid = body.get("id")
    resp.id = rid if isinstance(rid, str) else None
    model = body.get("model")
    resp.model = model if isinstance(model, str) else None
    created = body.get("created_at")
    if isinstance(created, (int, float)) and not isinstance(created, bool):
        resp.created = int(created)
    has_tools = False
    refusal: list[str] = []
    produced = False
    output = body.get("output")
    if output is not None and not isinstance(output, list):
        raise TranslationError("output: expected a list", field="output")
    for i, item in enumerate(output or []):
        if not isinstance(item, dict):
            w.append(f"output[{i}]: not an object, ignored")
            continue
        t = item.get("type")
        if t == "message":
            content = item.get("content")
            for j, c in enumerate(content if isinstance(content, list) else []):
                ct = c.get("type") if isinstance(c, dict) else None
                if ct == "output_text":
                    text = c.get("text") if isinstance(c.get("text"), str) else ""
                    resp.parts.append(Text(text, citations=annotations_to_citations(c.get("annotations"))))
                    produced = produced or bool(text)
                elif ct == "refusal":
                    r = c.get("refusal") if isinstance(c.get("refusal"), str) else ""
                    resp.parts.append(Refusal(r))
                    if r:
                        refusal.append(r)
                        produced = True
                else:
                    w.append(f"output[{i}].content[{j}]: content type {ct!r} ignored")
        elif t == "function_call" or t == "custom_tool_call":
            resp.parts.append(_tool_from_item(item))
            has_tools = True
            produced = True
        elif t == "reasoning":
            resp.parts.append(_reasoning_from_item(item))
        elif isinstance(t, str):
            resp.parts.append(Opaque(PROTOCOL, item, t))
            produced = True
        else:
            w.append(f"output[{i}]: item without a type ignored")
    status = body.get("status")
    resp.stop = stop_from_status(status, body.get("incomplete_details"), body.get("error"),
                                 has_tools=has_tools, refusal="\n".join(refusal) if refusal else None,
                                 produced=produced, warnings=w)
    if status == "failed":
        resp.extra["error"] = response_error(body.get("error"))
    resp.usage = decode_usage(body.get("usage"))
    return resp


# ============================================================================= response encode
def _text_part(text: str, annotations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}


def _reasoning_out(p: Reasoning, rid: str, own_ok: bool) -> dict[str, Any]:
    """The client-facing reasoning item. ``own_ok``: the payload was issued by OpenAI Responses, so it
    goes out natively (never packed: a same-protocol request is passed through unchanged later)."""
    op = p.opaque
    d: dict[str, Any] = {"id": rid, "type": "reasoning"}
    if own_ok and op is not None:
        if p.summary is not None:
            d["summary"] = [{"type": "summary_text", "text": s} for s in p.summary]
        else:
            d["summary"] = []
            if p.text:
                d["content"] = [{"type": "reasoning_text", "text": p.text}]
        enc = op.get("encrypted_content")
        if isinstance(enc, str):
            d["encrypted_content"] = enc
        return d
    d["summary"] = [{"type": "summary_text", "text": p.text}] if p.text else []
    d["encrypted_content"] = rz.pack(dict(op or {}, text=p.text, summary=p.summary, redacted=p.redacted))
    return d


def _own_reasoning_id(p: Reasoning) -> str | None:
    op = p.opaque
    own_id = op.get("id") if op and op.get("protocol") == PROTOCOL else None
    return own_id if isinstance(own_id, str) and own_id else None


def _is_own(p: Reasoning) -> bool:
    op = p.opaque
    return op is not None and op.get("protocol") == PROTOCOL


def _response_shell(rid: str, model: str | None, created: int, status: str, output: list[Any],
                    usage: dict[str, Any] | None, error: dict[str, Any] | None,
                    incomplete: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": None,
        "model": model or "",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "metadata": {},
        "usage": usage,
    }


def _apply_refusal_rule(parts: list[Part], stop: StopInfo | None) -> list[Part]:
    """Seed 000 refusal rules for a complete response toward a Responses client."""
    if stop is None or stop.reason is not StopReason.REFUSAL:
        return parts
    if any(isinstance(p, Refusal) for p in parts):
        return parts
    if not is_filter_refusal(stop):
        texts = [p for p in parts if isinstance(p, Text) and p.text]
        if texts:
            # a model refusal whose visible text is the refusal (Anthropic): it becomes the refusal part
            out: list[Part] = []
            done = False
            for p in parts:
                if isinstance(p, Text):
                    if not done:
                        out.append(Refusal("".join(t.text for t in texts)))
                        done = True
                    continue
                out.append(p)
            return out
    return list(parts) + [Refusal(refusal_fallback(stop))]


def _call_item(p: ToolCall, ctx: ClientContext, arguments: str, status: str) -> dict[str, Any]:
    """The function_call / custom_tool_call output item (complete and stream)."""
    iid = tool_item_id(p.id, p.kind, p.item_id)
    if p.kind == "custom":
        item = {"id": iid, "type": "custom_tool_call", "status": status, "call_id": p.id, "name": p.name,
                "input": arguments}
    else:
        item = {"id": iid, "type": "function_call", "status": status, "call_id": p.id, "name": p.name,
                "arguments": arguments}
    _set_name(item, p.name, ctx)
    return item


def _set_name(item: dict[str, Any], name: str, ctx: ClientContext) -> None:
    """A tool of a client's namespace tool was carried flat: its call gets the namespace form back."""
    nss = getattr(ctx, "namespaces", None)
    split = nss.get(name) if nss else None
    if split is None:
        item["name"] = name
    else:
        item["namespace"], item["name"] = split


def encode_response(resp: Response, ctx: ClientContext, warnings: list[str]) -> dict[str, Any]:
    w = warnings
    base = id_base(resp.id)
    err = resp.extra.get("error")
    incomplete: dict[str, Any] | None
    error: dict[str, Any] | None
    if isinstance(err, Error):
        status, incomplete, error = "failed", None, response_error_object(err)
    else:
        status, incomplete, error = terminal_status(resp.stop, w)
    parts = _apply_refusal_rule(resp.parts, resp.stop)
    output: list[dict[str, Any]] = []
    msg: dict[str, Any] | None = None
    dropped: list[str] = []
    for p in parts:
        if isinstance(p, (Text, Refusal)):
            if msg is None:
                msg = {"id": f"msg_{base}_{len(output)}", "type": "message", "role": "assistant",
                       "status": "completed", "content": []}
                output.append(msg)
            if isinstance(p, Text):
                msg["content"].append(_text_part(p.text, citations_to_annotations(p.citations, p.text, w)))
            else:
                msg["content"].append({"type": "refusal", "refusal": p.text})
            continue
        msg = None
        if isinstance(p, ToolCall):
            output.append(_call_item(p, ctx, p.arguments, "completed"))
        elif isinstance(p, Reasoning):
            own = _own_reasoning_id(p)
            output.append(_reasoning_out(p, own or f"rs_{base}_{len(output)}", _is_own(p)))
        elif isinstance(p, Opaque):
            if p.protocol == PROTOCOL and isinstance(p.raw, dict):
                output.append(p.raw)
            else:
                dropped.append(p.label or p.protocol)
        else:
            dropped.append(p.type)
    if dropped:
        w.append("parts a Responses client cannot receive dropped: " + ", ".join(sorted(set(dropped))))
    if status == "incomplete" and output and output[-1].get("type") == "message":
        output[-1]["status"] = "incomplete"
    created = resp.created if resp.created is not None else NO_TIMESTAMP
    return _response_shell("resp_" + base, ctx.model or resp.model, created, status, output,
                           encode_usage(resp.usage), error, incomplete)


# ============================================================================= stream decode
class _Item:
    __slots__ = (
        "call_id",
        "closed",
        "final",
        "has_delta",
        "id",
        "index",
        "kind",
        "mode",
        "name",
        "oi",
        "parts",
        "si",
    )

    def __init__(self, kind: str, oi: Any, iid: Any):
        self.kind = kind  # message | function | custom | reasoning | hosted
        self.oi = oi
        self.id = iid if isinstance(iid, str) else None
        self.index = -1  # neutral index (tool calls, reasoning, hosted)
        self.parts: dict[Any, _MPart] | None = None  # message content parts by content_index
        self.has_delta = False
        self.final: str | None = None  # arguments / input from a .done event
        self.call_id = ""
        self.name = ""
        self.si = 0  # current summary / content index of a reasoning item
        self.mode: str | None = None  # reasoning: "summary" or "text" deltas
        self.closed = False


class _MPart:
    __slots__ = ("anns", "closed", "final", "has_delta", "index", "kind")

    def __init__(self, index: int, kind: str):
        self.index = index
        self.kind = kind  # text | refusal
        self.anns: list[Any] | None = None
        self.final: str | None = None
        self.has_delta = False
        self.closed = False


_TOOL_KINDS = {"function_call": "function", "custom_tool_call": "custom"}

# Intermediate events of hosted tools: their item arrives complete at output_item.done.
_HOSTED_EVENT_PREFIXES = (
    "response.web_search_call.", "response.file_search_call.", "response.code_interpreter_call",
    "response.image_generation_call.", "response.mcp_call", "response.mcp_list_tools.",
    "response.shell_call", "response.compaction.", "response.apply_patch_call", "response.local_shell_call",
    "response.computer_call", "response.tool_search_call",
)
_IGNORED_EVENTS = (
    "response.queued", "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done", "response.reasoning_text.done", "response.steer",
    "response.steer.accepted", "response.steer.pending", "response.steer.failed",
)


def _idx(v: Any) -> int | None:
    """An output/content index from the wire (ints only: anything else is not a usable key)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _checked_item(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The event's output item (None: there is none); an item whose type is not a string is a
    malformed event (raised before any state changes)."""
    item = obj.get("item")
    if not isinstance(item, dict):
        return None
    if not isinstance(item.get("type"), str):
        raise MalformedEvent(f"{obj.get('type')}: output item without a string type")
    return item


def _ci(obj: dict[str, Any]) -> int:
    v = obj.get("content_index")
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


#: the most reasoning-part separators one summary/content index jump produces
_MAX_PART_GAP = 8


class StreamDecoder:
    """Responses SSE events -> neutral events."""

    __slots__ = ("_by_id", "_has_tools", "_items", "_next", "_open", "_produced", "_refusal", "_started",
                 "_stopped", "_unknown", "done", "warnings")

    def __init__(self, warnings: list[str]):
        self.warnings = warnings
        self.done = False
        self._started = False
        self._stopped = False
        self._next = 0
        self._items: dict[Any, _Item] = {}
        self._by_id: dict[str, _Item] = {}
        self._open: dict[int, tuple[_Item, _MPart | None]] = {}
        self._has_tools = False
        self._refusal: list[str] | None = None
        self._produced = False
        self._unknown: set[str] | None = None

    # ------------------------------------------------------------------ plumbing
    def feed(self, event: str | None, data: str) -> list[Event]:
        if self.done:
            return []
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            if data.strip() != "[DONE]":
                self.warnings.append(f"invalid JSON in a Responses SSE event ({event or 'message'}) ignored")
            return []
        if not isinstance(obj, dict):
            self.warnings.append("Responses SSE event data is not an object: ignored")
            return []
        t = obj.get("type")
        if not isinstance(t, str):
            t = event or ""
        # the deltas are read here, the other events by their handler
        if t == "response.output_text.delta":
            # the hot path: a delta to a part that is already open (anything else: _text_delta)
            try:
                oi, ci, d = obj["output_index"], obj["content_index"], obj["delta"]
            except KeyError:
                return self._text_delta(obj)
            st = self._items.get(oi) if isinstance(oi, int) and not isinstance(oi, bool) else None
            if st is not None and st.parts is not None:
                mp = st.parts.get(ci) if isinstance(ci, int) and not isinstance(ci, bool) else None
                if mp is not None and mp.kind == "text" and not mp.closed and isinstance(d, str):
                    if not d:
                        return []
                    mp.has_delta = True
                    self._produced = True
                    return [Delta(mp.index, "text", d)]
            return self._text_delta(obj)
        if t == "response.function_call_arguments.delta" or t == "response.custom_tool_call_input.delta":
            oi = obj.get("output_index")
            st = self._items.get(oi) if isinstance(oi, int) and not isinstance(oi, bool) else None
            if st is None:
                st = self._lookup(obj)
            d = obj.get("delta")
            if st is None or st.index < 0 or st.closed or not isinstance(d, str) or not d:
                return []
            st.has_delta = True
            return [Delta(st.index, "arguments", d)]
        h = _EVENTS.get(t)
        if h is None:
            if not t.startswith(_HOSTED_EVENT_PREFIXES):
                if self._unknown is None:
                    self._unknown = set()
                if t not in self._unknown:
                    self._unknown.add(t)
                    self.warnings.append(f"unknown Responses stream event {t!r} skipped")
            return []
        return h(self, obj)

    def finish(self) -> list[Event]:
        if self.done:
            return []
        self.done = True
        if self._stopped:
            return [End()]
        return [ErrorEvent(Error(kind=ErrorKind.INTERRUPTED, message="upstream stream ended before its terminal event",
                                 status=502))]

    def _nothing(self, obj: dict[str, Any]) -> list[Event]:
        return []

    def _start(self, out: list[Event], resp: Any = None) -> None:
        self._started = True
        if not isinstance(resp, dict):
            out.append(Start())
            return
        rid = resp.get("id")
        model = resp.get("model")
        created = resp.get("created_at")
        out.append(Start(
            id=rid if isinstance(rid, str) else None,
            model=model if isinstance(model, str) else None,
            usage=decode_usage(resp.get("usage")),
            created=int(created) if isinstance(created, (int, float)) and not isinstance(created, bool) else None,
        ))

    def _alloc(self) -> int:
        i = self._next
        self._next = i + 1
        return i

    def _lookup(self, obj: dict[str, Any]) -> _Item | None:
        oi = _idx(obj.get("output_index"))
        st = self._items.get(oi) if oi is not None else None
        if st is None:
            iid = obj.get("item_id")
            if isinstance(iid, str):
                st = self._by_id.get(iid)
        return st

    def _register(self, st: _Item) -> None:
        if st.oi is not None:
            self._items[st.oi] = st
        if st.id is not None:
            self._by_id[st.id] = st

    # ------------------------------------------------------------------ lifecycle
    def _created(self, obj: dict[str, Any]) -> list[Event]:
        if self._started:
            return []
        out: list[Event] = []
        self._start(out, obj.get("response"))
        return out

    # ------------------------------------------------------------------ items
    def _new_item(self, item: dict[str, Any], oi: Any, out: list[Event]) -> _Item:
        t = item.get("type")
        if t == "message":
            st = _Item("message", oi, item.get("id"))
            st.parts = {}
        elif t in _TOOL_KINDS:
            st = _Item(_TOOL_KINDS[t], oi, item.get("id"))
            tc = _tool_from_item(item)
            st.call_id, st.name = tc.id, tc.name
            st.index = self._alloc()
            out.append(BlockStart(st.index, ToolCall(tc.id, tc.name, "", tc.kind, tc.item_id)))
            self._open[st.index] = (st, None)
            self._has_tools = True
            if tc.arguments:
                st.has_delta = True
                out.append(Delta(st.index, "arguments", tc.arguments))
        elif t == "reasoning":
            st = _Item("reasoning", oi, item.get("id"))
            st.index = self._alloc()
            out.append(BlockStart(st.index, Reasoning()))
            self._open[st.index] = (st, None)
        else:
            st = _Item("hosted", oi, item.get("id"))
        self._register(st)
        return st

    def _item_added(self, obj: dict[str, Any]) -> list[Event]:
        item = _checked_item(obj)
        out: list[Event] = []
        if not self._started:
            self._start(out)
        if item is None:
            return out
        self._new_item(item, _idx(obj.get("output_index")), out)
        return out

    def _message(self, obj: dict[str, Any], out: list[Event]) -> _Item:
        st = self._lookup(obj)
        if st is None:
            if not self._started:
                self._start(out)
            st = _Item("message", _idx(obj.get("output_index")), obj.get("item_id"))
            st.parts = {}
            self._register(st)
        return st

    def _part(self, st: _Item, ci: Any, kind: str, out: list[Event]) -> _MPart:
        parts = st.parts
        if parts is None:
            parts = st.parts = {}
        mp = parts.get(ci)
        if mp is None:
            mp = _MPart(self._alloc(), kind)
            parts[ci] = mp
            out.append(BlockStart(mp.index, Text("") if kind == "text" else Refusal("")))
            self._open[mp.index] = (st, mp)
        return mp

    def _part_added(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        part = obj.get("part")
        pt = part.get("type") if isinstance(part, dict) else None
        if pt == "output_text" or pt == "refusal":
            st = self._message(obj, out)
            if st.kind == "message":
                self._part(st, _ci(obj), "text" if pt == "output_text" else "refusal", out)
        elif pt == "reasoning_text":
            rst = self._lookup(obj)
            if rst is not None and rst.kind == "reasoning":
                self._sep(rst, _ci(obj), "text", out)
        return out

    def _text_delta(self, obj: dict[str, Any]) -> list[Event]:
        """A text delta that opens its message or part (deltas to an open part: read in feed)."""
        out: list[Event] = []
        st = self._message(obj, out)
        if st.kind != "message":
            return out
        mp = self._part(st, _ci(obj), "text", out)
        d = obj.get("delta")
        if isinstance(d, str) and d:
            mp.has_delta = True
            self._produced = True
            out.append(Delta(mp.index, "text", d))
        return out

    def _refusal_delta(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        st = self._message(obj, out)
        if st.kind != "message":
            return out
        mp = self._part(st, _ci(obj), "refusal", out)
        d = obj.get("delta")
        if self._refusal is None:
            self._refusal = []
        if isinstance(d, str) and d:
            mp.has_delta = True
            self._produced = True
            self._refusal.append(d)
            out.append(Delta(mp.index, "refusal", d))
        return out

    def _text_done(self, obj: dict[str, Any]) -> list[Event]:
        st = self._lookup(obj)
        if st is not None and st.parts is not None:
            mp = st.parts.get(_ci(obj))
            t = obj.get("text")
            if mp is not None and isinstance(t, str):
                mp.final = t
        return []

    def _refusal_done(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        st = self._message(obj, out)
        if st.kind != "message":
            return out
        mp = self._part(st, _ci(obj), "refusal", out)
        r = obj.get("refusal")
        if isinstance(r, str):
            mp.final = r
            if not mp.has_delta:
                self._refusal = (self._refusal or []) + [r]
        elif self._refusal is None:
            self._refusal = []
        return out

    def _annotation(self, obj: dict[str, Any]) -> list[Event]:
        st = self._lookup(obj)
        if st is not None and st.parts is not None:
            mp = st.parts.get(_ci(obj))
            ann = obj.get("annotation")
            if mp is not None and isinstance(ann, dict):
                if mp.anns is None:
                    mp.anns = []
                mp.anns.append(ann)
        return []

    def _close_part(self, mp: _MPart, part: Any, out: list[Event]) -> None:
        if mp.closed:
            return
        mp.closed = True
        self._open.pop(mp.index, None)
        if mp.kind == "text":
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(text, str):
                text = mp.final
            anns = part.get("annotations") if isinstance(part, dict) else None
            if not anns:
                anns = mp.anns
            if not mp.has_delta and text:
                self._produced = True
                out.append(Delta(mp.index, "text", text))
            out.append(BlockEnd(mp.index, Text(text or "", citations=annotations_to_citations(anns))))
        else:
            text = part.get("refusal") if isinstance(part, dict) else None
            if not isinstance(text, str):
                text = mp.final
            if not mp.has_delta and text:
                self._produced = True
                if mp.final is None:
                    self._refusal = (self._refusal or []) + [text]
                out.append(Delta(mp.index, "refusal", text))
            if self._refusal is None:
                self._refusal = []
            out.append(BlockEnd(mp.index, Refusal(text or "")))

    def _part_done(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        part = obj.get("part")
        pt = part.get("type") if isinstance(part, dict) else None
        if pt != "output_text" and pt != "refusal":
            return out
        st = self._message(obj, out)
        if st.kind != "message":
            return out
        mp = self._part(st, _ci(obj), "text" if pt == "output_text" else "refusal", out)
        self._close_part(mp, part, out)
        return out

    def _args_done(self, obj: dict[str, Any]) -> list[Event]:
        st = self._lookup(obj)
        a = obj.get("arguments")
        if st is not None and isinstance(a, str):
            st.final = a
        return []

    def _input_done(self, obj: dict[str, Any]) -> list[Event]:
        st = self._lookup(obj)
        a = obj.get("input")
        if st is not None and isinstance(a, str):
            st.final = a
        return []

    def _sep(self, st: _Item, idx: Any, mode: str, out: list[Event]) -> bool:
        """Reasoning: whether deltas of ``mode`` go out; emits the "\\n\\n" between summary parts."""
        if st.mode is None:
            st.mode = mode
        elif st.mode != mode:
            return False
        if isinstance(idx, int) and not isinstance(idx, bool) and idx > st.si:
            # one "\n\n" per part boundary, at most _MAX_PART_GAP of them: the index is the upstream's
            # number, and a jump past empty parts must not size the text
            sep = "\n\n" * min(idx - st.si, _MAX_PART_GAP)
            if st.has_delta:
                out.append(Delta(st.index, "reasoning", sep))
            else:
                st.final = sep  # pending separators before the first delta
            st.si = idx
        return True

    def _summary_part(self, obj: dict[str, Any]) -> list[Event]:
        st = self._lookup(obj)
        out: list[Event] = []
        if st is not None and st.kind == "reasoning" and not st.closed:
            self._sep(st, obj.get("summary_index"), "summary", out)
        return out

    def _reasoning_delta(self, obj: dict[str, Any], idx_key: str, mode: str) -> list[Event]:
        oi = obj.get("output_index")
        st = self._items.get(oi) if isinstance(oi, int) and not isinstance(oi, bool) else None
        d = obj.get("delta")
        if (st is not None and st.mode == mode and st.has_delta and not st.closed and isinstance(d, str)
                and obj.get(idx_key) == st.si):
            return [Delta(st.index, "reasoning", d)] if d else []  # hot path
        if st is None:
            st = self._lookup(obj)
        if st is None or st.kind != "reasoning" or st.closed or not isinstance(d, str):
            return []
        out: list[Event] = []
        if self._sep(st, obj.get(idx_key), mode, out) and d:
            if not st.has_delta and st.final:
                d = st.final + d
                st.final = None
            st.has_delta = True
            out.append(Delta(st.index, "reasoning", d))
        return out

    def _summary_delta(self, obj: dict[str, Any]) -> list[Event]:
        return self._reasoning_delta(obj, "summary_index", "summary")

    def _rtext_delta(self, obj: dict[str, Any]) -> list[Event]:
        return self._reasoning_delta(obj, "content_index", "text")

    def _item_done(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        item = _checked_item(obj)
        if item is None:
            return out
        if not self._started:
            self._start(out)
        oi = _idx(obj.get("output_index"))
        st = self._items.get(oi) if oi is not None else None
        if st is None:
            iid = item.get("id")
            st = self._by_id.get(iid) if isinstance(iid, str) else None
        if st is None:
            st = self._new_item(item, oi, out)
        if st.closed:
            return out
        st.closed = True
        kind = st.kind
        if kind == "message":
            content = item.get("content")
            content = content if isinstance(content, list) else []
            for ci, c in enumerate(content):
                if not isinstance(c, dict):
                    continue
                ct = c.get("type")
                if ct != "output_text" and ct != "refusal":
                    continue
                mp = self._part(st, ci, "text" if ct == "output_text" else "refusal", out)
                self._close_part(mp, c, out)
            for mp in (st.parts or {}).values():
                if not mp.closed:
                    self._close_part(mp, None, out)
        elif kind == "function" or kind == "custom":
            self._open.pop(st.index, None)
            tc = _tool_from_item(item)
            if not tc.arguments and st.final:
                tc.arguments = st.final
            if not tc.id:
                tc.id = st.call_id
            if not tc.name:
                tc.name = st.name
            self._produced = True
            out.append(BlockEnd(st.index, tc))
        elif kind == "reasoning":
            self._open.pop(st.index, None)
            r = _reasoning_from_item(item)
            if not st.has_delta and r.text:
                out.append(Delta(st.index, "reasoning", r.text))
            out.append(BlockEnd(st.index, r))
        else:
            st.index = self._alloc()
            t = item.get("type")
            op = Opaque(PROTOCOL, item, t if isinstance(t, str) else "")
            self._produced = True
            out.append(BlockStart(st.index, op))
            out.append(BlockEnd(st.index, op))
        return out

    # ------------------------------------------------------------------ terminals
    def _close_all(self, out: list[Event]) -> None:
        if not self._open:
            return
        for idx in sorted(self._open):
            st, mp = self._open[idx]
            if mp is not None:
                self._close_part(mp, None, out)
            else:
                st.closed = True
                if st.kind in ("function", "custom"):
                    out.append(BlockEnd(idx, ToolCall(st.call_id, st.name, st.final or "", cast(ToolKind, st.kind),
                                                      st.id)))
                else:
                    out.append(BlockEnd(idx))
        self._open.clear()

    def _terminal(self, obj: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        resp = obj.get("response")
        resp = resp if isinstance(resp, dict) else {}
        if not self._started:
            self._start(out, resp)
        self._close_all(out)
        status = resp.get("status")
        if not isinstance(status, str):
            status = "incomplete" if obj.get("type") == "response.incomplete" else "completed"
        has_tools = self._has_tools
        refusal: str | None = "".join(self._refusal) if self._refusal else ""
        produced = self._produced
        output = resp.get("output")
        if isinstance(output, list) and output:
            # the snapshot is authoritative for what was produced
            snap_refusal: list[str] = []
            for item in output:
                if not isinstance(item, dict):
                    continue
                t = item.get("type")
                if t in _TOOL_KINDS:
                    has_tools = True
                    produced = True
                elif t == "message":
                    content = item.get("content")
                    for c in content if isinstance(content, list) else []:
                        if isinstance(c, dict) and c.get("type") == "refusal" and isinstance(c.get("refusal"), str):
                            snap_refusal.append(c["refusal"])
            if not refusal and snap_refusal:
                refusal = "\n".join(snap_refusal)
        refusal = refusal or None
        usage = decode_usage(resp.get("usage"))
        if usage is not None:
            out.append(UsageEvent(usage))
        if status == "failed":
            out.append(ErrorEvent(response_error(resp.get("error"))))
            self.done = True
            return out
        out.append(Stop(stop_from_status(status, resp.get("incomplete_details"), resp.get("error"),
                                         has_tools=has_tools, refusal=refusal, produced=produced,
                                         warnings=self.warnings)))
        out.append(End())
        self._stopped = True
        self.done = True
        return out

    def _failed(self, obj: dict[str, Any]) -> list[Event]:
        resp = obj.get("response")
        err = resp.get("error") if isinstance(resp, dict) else None
        self.done = True
        return [ErrorEvent(response_error(err))]

    def _error(self, obj: dict[str, Any]) -> list[Event]:
        self.done = True
        e = parse_error(None, obj)
        return [ErrorEvent(e)]


# per-class dispatch: no table of bound methods built per stream
_EVENTS = {
    "response.created": StreamDecoder._created,
    "response.in_progress": StreamDecoder._created,
    "response.output_item.added": StreamDecoder._item_added,
    "response.content_part.added": StreamDecoder._part_added,
    "response.output_text.delta": StreamDecoder._text_delta,
    "response.refusal.delta": StreamDecoder._refusal_delta,
    "response.output_text.done": StreamDecoder._text_done,
    "response.refusal.done": StreamDecoder._refusal_done,
    "response.output_text.annotation.added": StreamDecoder._annotation,
    "response.content_part.done": StreamDecoder._part_done,
    "response.function_call_arguments.done": StreamDecoder._args_done,
    "response.custom_tool_call_input.done": StreamDecoder._input_done,
    "response.reasoning_summary_part.added": StreamDecoder._summary_part,
    "response.reasoning_summary_text.delta": StreamDecoder._summary_delta,
    "response.reasoning_text.delta": StreamDecoder._rtext_delta,
    "response.output_item.done": StreamDecoder._item_done,
    "response.completed": StreamDecoder._terminal,
    "response.incomplete": StreamDecoder._terminal,
    "response.failed": StreamDecoder._failed,
    "error": StreamDecoder._error,
}
for _t in _IGNORED_EVENTS:
    _EVENTS[_t] = StreamDecoder._nothing


# ============================================================================= stream encode
class _Msg:
    """The message output item the text and refusal parts go into."""

    __slots__ = ("closed", "item", "joinable", "open_parts", "output_index")

    def __init__(self, output_index: int, item: dict[str, Any]):
        self.output_index = output_index
        self.item = item
        self.open_parts = 0
        self.joinable = True
        self.closed = False


class _Blk:
    """A neutral block as it goes to the client: one output item, or one content part of a message."""

    __slots__ = ("acc", "content_index", "delta_template", "item", "item_id", "kind", "msg", "output_index", "part",
                 "scan", "scanned", "summary_open")

    def __init__(self, kind: str, output_index: int, item_id: str):
        self.kind = kind  # text | refusal | tool | custom | reasoning | opaque | skip
        self.output_index = output_index
        self.content_index = 0
        self.item_id = item_id
        self.acc: list[str] = []
        self.msg: _Msg | None = None
        self.item: dict[str, Any] | None = None
        self.summary_open = False
        self.part: Any = None
        self.scan: JsonObjectScanner | None = None  # built only when another block waits for this one
        self.scanned = 0  # acc entries fed to scan
        #: this block's delta frame, written at its first delta (sequence number and value left)
        self.delta_template: bytes | None = None

    def ends_early(self) -> bool:
        """A function call whose arguments are one whole JSON object can take nothing more."""
        if self.kind != "tool":
            return False
        if self.scan is None:
            self.scan = JsonObjectScanner()
        acc = self.acc
        for k in range(self.scanned, len(acc)):
            self.scan.feed(acc[k])
        self.scanned = len(acc)
        return self.scan.complete()


#: created_at when the source has no timestamp (an Anthropic upstream): a fixed value, never the
#: clock, so one input always gives the same bytes (docs/mapping.md)
NO_TIMESTAMP = 0

_SKIP = _Blk("skip", -1, "")


def _delta_frame(t: str, tail: bytes = b"") -> tuple[bytes, bytes]:
    """A delta event type's frame around its item id and indices (``%d``: the sequence number,
    ``%b``: the written value)."""
    te = t.encode()
    return (b"event: " + te + b'\ndata: {"type":"' + te + b'","sequence_number":%d,"item_id":',
            b',"delta":%b' + tail + b"}\n\n")


_TEXT_DELTA = _delta_frame("response.output_text.delta", b',"logprobs":[]')
_ARGS_DELTA = _delta_frame("response.function_call_arguments.delta")
_INPUT_DELTA = _delta_frame("response.custom_tool_call_input.delta")
_SUMMARY_DELTA = _delta_frame("response.reasoning_summary_text.delta")


def _delta_template(frame: tuple[bytes, bytes], item_id: str, indices: bytes) -> bytes:
    """The one builder of a delta event's frame: everything but its sequence number and its value
    fixed once per item; the bytes frame() gives for the event's dict."""
    return frame[0] + orjson.dumps(item_id).replace(b"%", b"%%") + indices + frame[1]


def _message_item(item_id: str) -> dict[str, Any]:
    """A message output item as it opens."""
    return {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}


class StreamEncoder(OneOpenBlockEncoder):
    """Neutral events -> a Responses SSE stream for the client (``event:`` lines and ``type`` in every
    payload, ``sequence_number`` from 0, one terminal carrying the full snapshot). Output items never
    overlap on the wire (:class:`OneOpenBlockEncoder` orders overlapping neutral blocks)."""

    __slots__ = ("_base", "_blocks", "_created", "_dropped", "_finished", "_items", "_model", "_msg",
                 "_refusal_sent", "_rid", "_seq", "_started", "_stop", "_usage", "ctx")
    CLIENT = "Responses"

    def __init__(self, ctx: ClientContext, warnings: list[str]):
        super().__init__(parses_streamed_arguments=CODEC.capabilities.parses_streamed_arguments)
        self.ctx = ctx
        self.warnings = warnings
        self._seq = 0
        self._started = False
        self._finished = False
        self._rid = ""
        self._base = ""
        self._model: str | None = ctx.model
        self._created = 0
        self._items: list[dict[str, Any]] = []
        self._blocks: dict[int, _Blk] = {}
        self._msg: _Msg | None = None
        self._usage: Usage | None = None
        self._stop: StopInfo | None = None
        self._refusal_sent = False
        self._dropped: set[str] | None = None

    # ------------------------------------------------------------------ plumbing
    def _emit(self, out: list[bytes], t: str, d: dict[str, Any]) -> None:
        """Every event but the deltas: frame() of ``{"type": t, "sequence_number": n, **d}``, written as
        its two first keys then ``d`` (``d``: never empty; ``t``: a plain event name, no JSON escape)."""
        seq = self._seq
        self._seq = seq + 1
        try:
            rest = orjson.dumps(d)
        except orjson.JSONEncodeError:  # an upstream item nested deeper than orjson writes
            out.append(frame(t, {"type": t, "sequence_number": seq, **d}))
            return
        te = t.encode()
        out.append(b'event: %s\ndata: {"type":"%s","sequence_number":%d,%s\n\n' % (te, te, seq, rest[1:]))

    def _snapshot(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
                  error: dict[str, Any] | None = None, incomplete: dict[str, Any] | None = None) -> dict[str, Any]:
        return _response_shell(self._rid, self._model, self._created, status, output, usage, error, incomplete)

    def _terminal(self, out: list[bytes], t: str, status: str, error: dict[str, Any] | None,
                  incomplete: dict[str, Any] | None) -> None:
        """The terminal event ``t`` carrying the whole response."""
        snapshot = self._snapshot(status, self._items, encode_usage(self._usage), error, incomplete)
        self._emit(out, t, {"response": snapshot})

    def _begin(self, out: list[bytes], ev: Start | None) -> None:
        self._started = True
        src_id = ev.id if ev is not None else None
        self._base = id_base(src_id)
        self._rid = "resp_" + self._base
        if self._model is None and ev is not None:
            self._model = ev.model
        self._created = ev.created if ev is not None and ev.created is not None else NO_TIMESTAMP
        if ev is not None and ev.usage is not None:
            self._usage = ev.usage
        # the same snapshot in both (nothing produced yet): serialized once
        snapshot = orjson.Fragment(orjson.dumps(self._snapshot("in_progress", [])))
        self._emit(out, "response.created", {"response": snapshot})
        self._emit(out, "response.in_progress", {"response": snapshot})

    def encode(self, ev: Event) -> bytes:
        if self._finished:
            return b""
        out: list[bytes] = []
        if not self._started:
            if isinstance(ev, Start):
                self._begin(out, ev)
                return b"".join(out)
            self._begin(out, None)
        if isinstance(ev, Delta):
            self._delta(ev, out)
        elif isinstance(ev, BlockStart):
            self._block_start(ev, out)
        elif isinstance(ev, BlockEnd):
            self._block_end(ev, out)
        elif isinstance(ev, (UsageEvent, Start)):
            if ev.usage is not None:
                self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
        elif isinstance(ev, Stop):
            self._on_stop(ev.stop, out)
        elif isinstance(ev, End):
            self._on_end(out)
        elif isinstance(ev, ErrorEvent):
            self._on_error(ev.error, out)
        return b"".join(out)

    # ------------------------------------------------------------------ item order (OneOpenBlockEncoder's hooks)
    def _is_complete(self, index: int) -> bool:
        b = self._blocks.get(index)
        return b is None or b.ends_early()

    def _tool_call(self, index: int) -> Part | None:
        b = self._blocks.get(index)
        return b.part if b is not None else None

    def _fail(self, warning: str, error: Error, out: list[bytes]) -> None:
        self.warnings.append(warning)
        self._on_error(error, out)

    def _write_delta(self, ev: Delta, out: list[bytes]) -> None:
        self._delta(ev, out)

    def _close_block(self, index: int, final: Part | None, out: list[bytes]) -> None:
        b = self._blocks.pop(index, None)
        if b is not None and b is not _SKIP:
            self._finish_block(b, final, out)

    # ------------------------------------------------------------------ items
    def _add_item(self, item: dict[str, Any]) -> int:
        oi = len(self._items)
        self._items.append(item)
        return oi

    def _close_msg(self, m: _Msg, out: list[bytes], status: str = "completed") -> None:
        if m.closed:
            return
        m.closed = True
        m.item["status"] = status
        self._emit(out, "response.output_item.done", {"output_index": m.output_index, "item": m.item})

    def _detach_msg(self, out: list[bytes], status: str = "completed") -> None:
        m = self._msg
        if m is None:
            return
        self._msg = None
        m.joinable = False
        if m.open_parts == 0:
            self._close_msg(m, out, status)

    def _open_block(self, ev: BlockStart, out: list[bytes]) -> None:
        index, part = ev.index, ev.part
        if isinstance(part, (Text, Refusal)):
            self._open_part(index, isinstance(part, Text), out)
            return
        if isinstance(part, ToolCall):
            self._detach_msg(out)
            item = _call_item(part, self.ctx, "", "in_progress")
            iid = item["id"]
            b = _Blk("custom" if part.kind == "custom" else "tool", self._add_item(item), iid)
            b.item = item
            b.part = part
            self._blocks[index] = b
            self._emit(out, "response.output_item.added", {"output_index": b.output_index, "item": item})
            return
        if isinstance(part, Reasoning):
            self._detach_msg(out)
            own = _own_reasoning_id(part)
            oi = len(self._items)
            iid = own or f"rs_{self._base}_{oi}"
            item = {"id": iid, "type": "reasoning", "summary": []}
            b = _Blk("reasoning", self._add_item(item), iid)
            b.item = item
            b.part = part
            self._blocks[index] = b
            self._emit(out, "response.output_item.added", {"output_index": b.output_index, "item": item})
            return
        if isinstance(part, Opaque) and part.protocol == PROTOCOL and isinstance(part.raw, dict):
            self._detach_msg(out)
            item = part.raw
            b = _Blk("opaque", self._add_item(item), str(item.get("id") or ""))
            b.item = item
            self._blocks[index] = b
            self._emit(out, "response.output_item.added", {"output_index": b.output_index, "item": item})
            return
        label = part.label if isinstance(part, Opaque) else part.type
        if self._dropped is None:
            self._dropped = set()
        if label not in self._dropped:
            self._dropped.add(label or "opaque")
            self.warnings.append(f"{label or 'opaque'} part dropped (a Responses client cannot receive it)")
        self._blocks[index] = _SKIP
        self._active = -1

    def _open_part(self, index: int | None, is_text: bool, out: list[bytes]) -> _Blk:
        m = self._msg
        if m is None:
            oi = len(self._items)
            item = _message_item(f"msg_{self._base}_{oi}")
            m = _Msg(self._add_item(item), item)
            self._msg = m
            self._emit(out, "response.output_item.added", {"output_index": oi, "item": item})
        ci = len(m.item["content"])
        part = _text_part("", []) if is_text else {"type": "refusal", "refusal": ""}
        m.item["content"].append(part)
        m.open_parts += 1
        b = _Blk("text" if is_text else "refusal", m.output_index, m.item["id"])
        b.content_index = ci
        b.msg = m
        if index is not None:
            self._blocks[index] = b
        if not is_text:
            self._refusal_sent = True
        self._emit(out, "response.content_part.added",
                   {"item_id": b.item_id, "output_index": m.output_index, "content_index": ci, "part": part})
        return b

    # ------------------------------------------------------------------ deltas
    def _delta(self, ev: Delta, out: list[bytes]) -> None:
        b = self._blocks.get(ev.index)
        if b is None or not ev.value:
            self._delta_elsewhere(ev, out)
            return
        k = b.kind
        if k == "text":
            if ev.kind == "text":
                b.acc.append(ev.value)
                self._text_delta(b, ev.value, out)
        elif k == "refusal":
            if ev.kind == "refusal" or ev.kind == "text":
                b.acc.append(ev.value)
                self._refusal_delta(b, ev.value, out)
        elif k == "tool" or k == "custom":
            if ev.kind == "arguments":
                b.acc.append(ev.value)
                self._args_delta(b, ev.value, out)
                self._after_arguments(ev.index, out)
        elif k == "reasoning" and (ev.kind == "reasoning" or ev.kind == "summary"):
            self._summary_delta(b, ev.value, out)

    # one builder per delta frame (concatenated: the hot path; test_wire_builders checks them against frame())
    def _text_delta(self, b: _Blk, v: str, out: list[bytes]) -> None:
        t = b.delta_template
        if t is None:
            t = b.delta_template = _delta_template(_TEXT_DELTA, b.item_id, b',"output_index":%d,"content_index":%d' % (b.output_index, b.content_index))
        seq = self._seq
        self._seq = seq + 1
        out.append(t % (seq, orjson.dumps(v)))

    def _refusal_delta(self, b: _Blk, v: str, out: list[bytes]) -> None:
        self._emit(out, "response.refusal.delta",
                   {"item_id": b.item_id, "output_index": b.output_index, "content_index": b.content_index, "delta": v})

    def _args_delta(self, b: _Blk, v: str, out: list[bytes]) -> None:
        t = b.delta_template
        if t is None:
            t = b.delta_template = _delta_template(_ARGS_DELTA if b.kind == "tool" else _INPUT_DELTA, b.item_id,
                                         b',"output_index":%d' % b.output_index)
        seq = self._seq
        self._seq = seq + 1
        out.append(t % (seq, orjson.dumps(v)))

    def _summary_delta(self, b: _Blk, value: str, out: list[bytes]) -> None:
        if not b.summary_open:
            b.summary_open = True
            self._emit(out, "response.reasoning_summary_part.added",
                       {"item_id": b.item_id, "output_index": b.output_index, "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""}})
        b.acc.append(value)
        t = b.delta_template
        if t is None:
            t = b.delta_template = _delta_template(_SUMMARY_DELTA, b.item_id, b',"output_index":%d,"summary_index":0' % b.output_index)
        seq = self._seq
        self._seq = seq + 1
        out.append(t % (seq, orjson.dumps(value)))

    # ------------------------------------------------------------------ block end
    def _finish_block(self, b: _Blk, final: Part | None, out: list[bytes]) -> None:
        k = b.kind
        if k == "text" or k == "refusal":
            text = "".join(b.acc)
            if not b.acc and isinstance(final, (Text, Refusal)) and final.text:
                text = final.text
                if k == "text":
                    self._text_delta(b, text, out)
                else:
                    self._refusal_delta(b, text, out)
            m = b.msg
            if k == "text":
                cits = final.citations if isinstance(final, Text) else None
                anns = citations_to_annotations(cits, text, self.warnings) if cits else []
                for ai, a in enumerate(anns):
                    self._emit(out, "response.output_text.annotation.added",
                               {"item_id": b.item_id, "output_index": b.output_index, "content_index": b.content_index,
                                "annotation_index": ai, "annotation": a})
                self._emit(out, "response.output_text.done", {"item_id": b.item_id, "output_index": b.output_index,
                                                             "content_index": b.content_index, "text": text, "logprobs": []})
                part = _text_part(text, anns)
                self._emit(out, "response.content_part.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "content_index": b.content_index, "part": part})
            else:
                self._emit(out, "response.refusal.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "content_index": b.content_index, "refusal": text})
                part = {"type": "refusal", "refusal": text}
                self._emit(out, "response.content_part.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "content_index": b.content_index, "part": part})
            if m is not None:
                m.item["content"][b.content_index] = part
                m.open_parts -= 1
                if not m.joinable and m.open_parts == 0:
                    self._close_msg(m, out)
            return
        if k == "tool" or k == "custom":
            args = "".join(b.acc)
            item = b.item
            assert item is not None
            if isinstance(final, ToolCall):
                if not b.acc and final.arguments:
                    args = final.arguments
                    self._args_delta(b, args, out)
                if final.name:
                    _set_name(item, final.name, self.ctx)
            if k == "tool":
                item["arguments"] = args
                self._emit(out, "response.function_call_arguments.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "arguments": args, "name": item["name"]})
            else:
                item["input"] = args
                self._emit(out, "response.custom_tool_call_input.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "input": args})
            item["status"] = "completed"
            self._emit(out, "response.output_item.done", {"output_index": b.output_index, "item": item})
            return
        if k == "reasoning":
            text = "".join(b.acc)
            p = final if isinstance(final, Reasoning) else b.part
            if not b.acc and isinstance(final, Reasoning) and final.text:
                text = final.text
                self._summary_delta(b, text, out)
            if b.summary_open:
                self._emit(out, "response.reasoning_summary_text.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "summary_index": 0, "text": text})
                self._emit(out, "response.reasoning_summary_part.done",
                           {"item_id": b.item_id, "output_index": b.output_index, "summary_index": 0,
                            "part": {"type": "summary_text", "text": text}})
            r = Reasoning(text=text, summary=p.summary if isinstance(p, Reasoning) else None,
                          opaque=p.opaque if isinstance(p, Reasoning) else None,
                          redacted=p.redacted if isinstance(p, Reasoning) else False)
            own = _is_own(r)
            item = _reasoning_out(r, b.item_id, own)
            if own:
                # the summary went out as one part: keep the snapshot equal to the events
                item["summary"] = [{"type": "summary_text", "text": text}] if text else []
                item.pop("content", None)
            self._items[b.output_index] = item
            self._emit(out, "response.output_item.done", {"output_index": b.output_index, "item": item})
            return
        if k == "opaque":
            item = final.raw if isinstance(final, Opaque) and isinstance(final.raw, dict) else b.item
            assert item is not None  # (an opaque block opens with its item)
            self._items[b.output_index] = item
            self._emit(out, "response.output_item.done", {"output_index": b.output_index, "item": item})

    # ------------------------------------------------------------------ terminals
    def _close_open(self, out: list[bytes]) -> None:
        if not self._blocks and not self._held:
            return
        self._flush_held(out)
        for idx in sorted(self._blocks):
            b = self._blocks[idx]
            if b is not _SKIP:
                self._finish_block(b, None, out)
        self._blocks.clear()

    def _on_stop(self, stop: StopInfo, out: list[bytes]) -> None:
        self._stop = stop
        self._close_open(out)
        if stop.reason is StopReason.REFUSAL and not self._refusal_sent:
            # the client must see the refusal; text that already went out stays as sent
            b = self._open_part(None, False, out)
            text = refusal_fallback(stop)
            b.acc.append(text)
            self._refusal_delta(b, text, out)
            self._finish_block(b, None, out)

    def _on_end(self, out: list[bytes]) -> None:
        self._close_open(out)
        status, incomplete, error = terminal_status(self._stop, self.warnings)
        self._detach_msg(out, "incomplete" if status == "incomplete" else "completed")
        if status == "failed":
            t = "response.failed"
        elif status == "completed":
            t = "response.completed"
        else:
            t = "response.incomplete"
        self._terminal(out, t, status, error, incomplete)
        self._finished = True

    def _on_error(self, err: Error, out: list[bytes]) -> None:
        e = error_event_payload(err, None)
        del e["type"]  # (the frame's own first key)
        self._emit(out, "error", e)
        # the partial output so far, with the text already sent
        for b in self._blocks.values():
            if b is _SKIP or not b.acc:
                continue
            text = "".join(b.acc)
            if b.kind == "text" and b.msg is not None:
                b.msg.item["content"][b.content_index] = _text_part(text, [])
            elif b.kind == "refusal" and b.msg is not None:
                b.msg.item["content"][b.content_index] = {"type": "refusal", "refusal": text}
            elif b.kind == "tool" and b.item is not None:
                b.item["arguments"] = text
            elif b.kind == "custom" and b.item is not None:
                b.item["input"] = text
        self._terminal(out, "response.failed", "failed", response_error_object(err), None)
        self._finished = True


# ============================================================================= error frame
def _error_id(err: Error) -> str:
    """A response id for an error with no response of its own: derived from the error, never random."""
    return hashlib.sha1(f"{err.kind}\n{err.status}\n{err.message}".encode("utf-8", "replace")).hexdigest()[:24]


def error_frame(err: Error, *, sequence_number: int | None = None, response_id: str | None = None) -> bytes:
    """The Responses native mid-stream error: an ``error`` event (flat + nested fields) then
    ``response.failed`` (what Codex reads). Sequence numbers are unknown on the pass-through path: pass
    ``sequence_number`` to continue the upstream's numbering (the failed event gets the next one)."""
    e = error_event_payload(err, sequence_number)
    out = frame("error", e)
    snap = _response_shell(response_id or "resp_" + _error_id(err), None, NO_TIMESTAMP, "failed", [], None,
                           response_error_object(err), None)
    failed: dict[str, Any] = {"type": "response.failed", "response": snap}
    if sequence_number is not None:
        failed["sequence_number"] = sequence_number + 1
    return out + frame("response.failed", failed)


# ============================================================================= the codec
CODEC = Codec(
    protocol=Protocol(_facts.PROTOCOL),
    name="responses",
    label="OpenAI Responses",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=encode_response,
    StreamDecoder=StreamDecoder,
    StreamEncoder=StreamEncoder,
    error_frame=error_frame,
    wire=Wire(
        endpoints=_facts.ENDPOINTS,
        counter=_facts.COUNTER,
        fields=_facts.FIELDS,
        credentials=_facts.CREDENTIALS,
        model_entry=_models.model_entry,
        model_list=_models.model_list,
    ),
    errors=_facts.ERRORS,
    capabilities=_facts.CAPABILITIES,
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.response_id,
    sniff_request=_facts.sniff_request,
    sniff_response=_facts.sniff_response,
    sniff_stream=_facts.sniff_stream,
    stream_observes=_facts.stream_observes,
    is_error_body=_facts.is_error_body,
    cache_hints=_models.prompt_cache_key,
)
