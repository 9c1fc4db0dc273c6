"""Google Gemini ``generateContent`` codec (``gemini_generate_content``).

Requests, complete responses and streams (``streamGenerateContent``: SSE with ``alt=sse``, a
JSON array without; both carry the same chunks, which the decoder reads one at a time). Choices:

* Thought signatures ride in neutral ``Reasoning`` parts tagged ``on`` = ``thought`` (a thought part),
  ``text`` or ``call`` (the signature of the following text or function-call part). Reasoning of
  another issuer reaches a Gemini client as thought text, its continuity envelope as the
  ``thoughtSignature`` of the next part (clients echo signatures on function calls back).
* Function calls without an id get a stable minted id (``gcall_…``, from the response id and the
  call's position); minted ids are never sent to Gemini, whose function responses match by name.
* A ``finishReason`` ends the step; the stream is complete at its end (a server-side tool loop
  sends several steps in one stream). A stream that ends before any ``finishReason`` is
  interrupted, never completed.
* Toward a Gemini client every ``StopReason`` maps explicitly (:func:`stop_to_wire`): refusals keep
  Gemini's own filter value, content filters become SAFETY, a refusal the model wrote is its text
  with STOP and the explanation as ``finishMessage``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .. import ratelimit
from ..errors import parse_error
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
    WebSearchCall,
    WebSearchResults,
)
from ..protocol import Protocol
from ..stop import GENERIC_REFUSAL, StopInfo, StopReason, classify_stop
from ..strict import MalformedEvent
from . import _gemini_common as _facts
from ._gemini_common import (
    BLOCK_REASONS as _BLOCKS,
)
from ._gemini_common import (
    PROTOCOL,
    REFUSAL_FINISHES,
    created_from_wire,
    created_to_wire,
    error_body,
    error_from_wire,
    grounding_metadata,
    is_packed_signature,
    mint_call_id,
    pack_signature,
    stop_from_block,
    stop_from_wire,
    stop_to_wire,
    unpack_signature,
    usage_from_wire,
    usage_to_wire,
    warn_once,
    web_search_from_grounding,
)
from ._gemini_request import decode_request, encode_request
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

_OPAQUE_PARTS = ("executableCode", "codeExecutionResult", "toolCall", "toolResponse", "functionResponse",
                 "inlineData", "fileData")
_INTERRUPTED = "upstream stream ended before its terminal event"


# ============================================================================= citations
def _citations(cand: dict[str, Any]) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] = []
    cm = cand.get("citationMetadata")
    if isinstance(cm, dict):
        for c in cm.get("citations") or cm.get("citationSources") or ():
            if isinstance(c, dict) and isinstance(c.get("uri"), str):
                n: dict[str, Any] = {"type": "url", "url": c["uri"]}
                if isinstance(c.get("title"), str):
                    n["title"] = c["title"]
                if isinstance(c.get("startIndex"), int):
                    n["start"] = c["startIndex"]
                if isinstance(c.get("endIndex"), int):
                    n["end"] = c["endIndex"]
                out.append(n)
    gm = cand.get("groundingMetadata")
    if isinstance(gm, dict):
        gc = gm.get("groundingChunks")
        chunks: list[Any] = gc if isinstance(gc, list) else []
        for s in gm.get("groundingSupports") or ():
            if not isinstance(s, dict):
                continue
            sg = s.get("segment")
            seg: dict[str, Any] = sg if isinstance(sg, dict) else {}
            for ci in s.get("groundingChunkIndices") or ():
                ch = chunks[ci] if isinstance(ci, int) and 0 <= ci < len(chunks) else None
                web = ch.get("web") if isinstance(ch, dict) else None
                if not isinstance(web, dict) or not isinstance(web.get("uri"), str):
                    continue
                n = {"type": "url", "url": web["uri"]}
                if isinstance(web.get("title"), str):
                    n["title"] = web["title"]
                if isinstance(seg.get("startIndex"), int):
                    n["start"] = seg["startIndex"]
                if isinstance(seg.get("endIndex"), int):
                    n["end"] = seg["endIndex"]
                if isinstance(seg.get("text"), str):
                    n["cited_text"] = seg["text"]
                out.append(n)
    return out or None


def _citations_to_wire(cits: list[dict[str, Any]], warnings: list[str]) -> list[dict[str, Any]]:
    out = []
    for c in cits:
        url = c.get("url")
        if not isinstance(url, str):
            continue
        w: dict[str, Any] = {"uri": url}
        if isinstance(c.get("title"), str):
            w["title"] = c["title"]
        if isinstance(c.get("start"), int):
            w["startIndex"] = c["start"]
        if isinstance(c.get("end"), int):
            w["endIndex"] = c["end"]
        out.append(w)
    if len(out) < len(cits):
        warn_once(warnings, "citations without a URL were dropped (Gemini cites by URI)")
    return out


# ============================================================================= responses
def _sig_part(sig: str, on: str) -> Reasoning:
    if is_packed_signature(sig):
        payload = unpack_signature(sig)
        if payload is not None:
            text = payload.pop("text", "")
            summary = payload.pop("summary", None)
            return Reasoning(text=text if isinstance(text, str) else "", summary=summary, opaque=payload,
                             redacted=bool(payload.pop("redacted", False)))
    return Reasoning(text="", opaque={"protocol": PROTOCOL, "signature": sig, "on": on})


def _call_args(fc: dict[str, Any], warnings: list[str]) -> str:
    args = fc.get("args")
    if isinstance(args, dict):
        return dumps(args).decode()
    partial = fc.get("partialArgs")
    if isinstance(partial, list):
        obj: dict[str, Any] = {}
        pieces = _Pieces()
        _apply_partial(obj, partial, pieces, warnings)
        pieces.close()
        return dumps(obj).decode()
    return "{}"


def _server_run(parts: list[Any], raws: dict[int, dict[str, Any]]) -> None:
    """A function call answered by a ``functionResponse`` in the same response was run by Google
    (server-side MCP): it is not the client's to run, so it stays an opaque Gemini part."""
    for k, p in enumerate(parts):
        if not (isinstance(p, Opaque) and p.label == "functionResponse"):
            continue
        fr = p.raw.get("functionResponse")
        name = fr.get("name") if isinstance(fr, dict) else None
        for j in range(k):
            c = parts[j]
            if isinstance(c, ToolCall) and c.name == name and id(c) in raws:
                parts[j] = Opaque(PROTOCOL, raws.pop(id(c)), "functionCall")
                break


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    resp = Response()
    if not isinstance(body, dict):
        err = parse_error(None, body)
        resp.extra["error"] = err
        resp.stop = classify_stop("error", category=err.kind, message=err.message)
        return resp
    if "error" in body and not body.get("candidates"):
        err = error_from_wire(None, body)
        if err is None:
            err = parse_error(None, body)
        resp.extra["error"] = err
        resp.stop = classify_stop("error", category=err.kind, message=err.message)
        return resp
    rid = body.get("responseId")
    resp.id = rid if isinstance(rid, str) and rid else None
    mv = body.get("modelVersion")
    resp.model = mv if isinstance(mv, str) and mv else None
    resp.created = created_from_wire(body.get("createTime"))
    u = body.get("usageMetadata")
    if isinstance(u, dict):
        resp.usage = usage_from_wire(u)
    cands = body.get("candidates")
    cand = cands[0] if isinstance(cands, list) and cands and isinstance(cands[0], dict) else None
    if isinstance(cands, list) and len(cands) > 1:
        warnings.append("Gemini returned several candidates; only the first was translated")
    pf = body.get("promptFeedback")
    block = stop_from_block(pf) if isinstance(pf, dict) else None
    if cand is None:
        resp.stop = block or classify_stop(None)
        return resp
    content = cand.get("content")
    raw_parts = content.get("parts") if isinstance(content, dict) else None
    parts: list[Any] = []
    calls = 0
    open_calls = 0
    scope = resp.id or ""
    raws: dict[int, dict[str, Any]] = {}  # ToolCall -> its wire part (for server-run calls)
    for p in raw_parts if isinstance(raw_parts, list) else ():
        if not isinstance(p, dict):
            warnings.append("a non-object part in the upstream response was skipped")
            continue
        sig = p.get("thoughtSignature")
        sig = sig if isinstance(sig, str) and sig else None
        if "text" in p and isinstance(p["text"], str):
            if p.get("thought") is True:
                op: dict[str, Any] = {"protocol": PROTOCOL, "on": "thought"}
                if sig:
                    op["signature"] = sig
                parts.append(Reasoning(text=p["text"], opaque=op))
                continue
            if sig:
                parts.append(_sig_part(sig, "text"))
            if p["text"]:
                if parts and isinstance(parts[-1], Text) and not parts[-1].citations:
                    parts[-1].text += p["text"]
                else:
                    parts.append(Text(p["text"]))
        elif isinstance(p.get("functionCall"), dict):
            fc = p["functionCall"]
            name = fc.get("name") if isinstance(fc.get("name"), str) else ""
            if sig:
                parts.append(_sig_part(sig, "call"))
            fid = fc.get("id")
            cid = fid if isinstance(fid, str) and fid else mint_call_id(scope, calls, name)
            parts.append(ToolCall(cid, name, _call_args(fc, warnings)))
            raws[id(parts[-1])] = p
            calls += 1
            open_calls += 1
        else:
            label = next((k for k in _OPAQUE_PARTS if k in p), None)
            if label == "functionResponse":
                open_calls = max(open_calls - 1, 0)  # a call the server ran itself (server-side MCP)
            if sig:
                parts.append(_sig_part(sig, "text"))
            if label is None:
                if sig and len(p) == 1:
                    continue
                warnings.append(f"unknown Gemini part ({', '.join(sorted(p))}) kept only for Gemini clients")
                label = "unknown"
            parts.append(Opaque(PROTOCOL, p, label))
    _server_run(parts, raws)
    cits = _citations(cand)
    if cits:
        for part in reversed(parts):
            if isinstance(part, Text):
                part.citations = cits
                break
    gm = cand.get("groundingMetadata")
    if isinstance(gm, dict):
        parts[:0] = web_search_from_grounding(gm, scope)  # (the searches came before the answer)
    resp.parts = parts
    detail: dict[str, Any] = {}
    if isinstance(cand.get("safetyRatings"), list):
        detail["safety_ratings"] = cand["safetyRatings"]
    if cand.get("finishReason") is None and block is not None:
        resp.stop = block
    else:
        resp.stop = stop_from_wire(cand.get("finishReason"), cand.get("finishMessage"), open_calls > 0, detail)
    return resp


def _packed(p: Reasoning, text: str) -> str:
    payload = dict(p.opaque or {})
    payload["text"] = text
    payload["summary"] = p.summary
    payload["redacted"] = p.redacted
    return pack_signature(payload)


def _effective_stop(stop: StopInfo | None, has_tools: bool, refusal: str | None) -> StopInfo:
    stop = stop or classify_stop(None, has_tool_calls=has_tools)
    if refusal and stop.reason is StopReason.END_TURN:  # refusal outranks finish
        stop = classify_stop("refusal", category="output-refusal", message=refusal)
    return stop


def _refusal_needs_text(stop: StopInfo) -> bool:
    """A refusal of another provider that came with no text: the Gemini client sees its
    explanation as text (its SDK drops ``finishMessage`` on the developer API)."""
    return stop.reason is StopReason.REFUSAL and not stop.detail.get("input_blocked") and (
        (stop.raw or "").upper() not in REFUSAL_FINISHES)


def encode_response(resp: Response, ctx: Any, warnings: list[str]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    pending: str | None = None
    refusals: list[str] = []
    has_tools = has_text = False
    cits: list[dict[str, Any]] = []
    search: list[Any] = []
    for p in resp.parts:
        if isinstance(p, (WebSearchCall, WebSearchResults)):
            search.append(p)
            continue
        if isinstance(p, Reasoning):
            op = p.opaque
            if op and op.get("protocol") == PROTOCOL:
                sig = op.get("signature") if isinstance(op.get("signature"), str) else None
                if op.get("on") == "thought" or (op.get("on") is None and p.text):
                    part: dict[str, Any] = {"text": p.text, "thought": True}
                    if sig:
                        part["thoughtSignature"] = sig
                    parts.append(part)
                elif sig is not None:
                    if pending is not None:
                        parts.append({"text": "", "thoughtSignature": pending})
                    pending = sig
            else:
                if p.text:
                    parts.append({"text": p.text, "thought": True})
                if pending is not None:
                    parts.append({"text": "", "thoughtSignature": pending})
                pending = _packed(p, p.text)
            continue
        if isinstance(p, (Text, Refusal)):
            if not p.text:
                continue
            part = {"text": p.text}
            if isinstance(p, Refusal):
                refusals.append(p.text)
            elif p.citations:
                cits.extend(p.citations)
            has_text = True
        elif isinstance(p, ToolCall):
            has_tools = True
            part = {"functionCall": {"id": p.id, "name": p.name, "args": tool_input(p, warnings)}}
        elif isinstance(p, Opaque):
            if p.protocol != PROTOCOL:
                warn_once(warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Gemini clients "
                          "cannot represent it")
                continue
            part = dict(p.raw)
        else:
            if isinstance(p, (Image, Document, ToolResult)):
                warn_once(warnings, f"{p.type} part in a response dropped")
            continue
        if pending is not None:
            part["thoughtSignature"] = pending
            pending = None
        parts.append(part)
    if pending is not None:
        parts.append({"text": "", "thoughtSignature": pending})
    stop = _effective_stop(resp.stop, has_tools, "".join(refusals) or None)
    body: dict[str, Any] = {}
    usage = usage_to_wire(resp.usage)
    if stop.reason is StopReason.REFUSAL and stop.detail.get("input_blocked") and not parts:
        fb: dict[str, Any] = {"blockReason": stop.raw if stop.raw in _BLOCKS else "OTHER",
                              "blockReasonMessage": stop.message or GENERIC_REFUSAL}
        body = {"promptFeedback": fb, "usageMetadata": usage}
    else:
        finish, message = stop_to_wire(stop, has_tools, warnings)
        if _refusal_needs_text(stop) and not has_text:
            parts.append({"text": stop.message or GENERIC_REFUSAL})
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        if message:
            cand["finishMessage"] = message
        gm = grounding_metadata(search, cits) if search else None
        if gm is not None:
            cand["groundingMetadata"] = gm  # (the URL citations are its supports)
        elif cits:
            cand["citationMetadata"] = {"citations": _citations_to_wire(cits, warnings)}
        body = {"candidates": [cand], "usageMetadata": usage}
    body["modelVersion"] = getattr(ctx, "model", None) or resp.model or "unknown"
    if resp.id:
        body["responseId"] = resp.id
    ct = created_to_wire(resp.created)
    if ct:
        body["createTime"] = ct
    return body


def error_frame(err: Error) -> bytes:
    """A mid-stream failure as the Gemini SSE frame (the array form closes its array: see
    :class:`StreamEncoder`)."""
    return b"data: " + orjson.dumps(error_body(err)) + b"\r\n\r\n"


# ============================================================================= partial arguments
#: how far past a list's end one piece may write: Gemini names list items in order, so an index
#: further on is no item of these arguments, only a request to allocate that many nulls (dropped)
_LIST_GAP = 8
#: the deepest path a piece may name (deeper is no JSON a tool takes, and could not be written back)
_MAX_DEPTH = 128
_FAR = 1 << 62  # an index of more than 9 digits: past any list (int() of a long digit string is slow)
_TOO_FAR = object()
_UNREADABLE = "a partialArgs path Gemini sent could not be read; that piece was dropped"
_BEYOND = ("a partialArgs path Gemini sent points beyond what the arguments can hold (an index more than "
           f"{_LIST_GAP} past the list's end, or over {_MAX_DEPTH} levels deep); that piece was dropped")


def _path_keys(path: str) -> list[str | int] | None:
    """``$.a.b[0].c`` / ``$['a']`` -> keys; None when it is not a path we read."""
    if path[:1] != "$":
        return None
    keys: list[str | int] = []
    i, n = 1, len(path)
    while i < n:
        c = path[i]
        if c == ".":
            m = _KEY_END.search(path, i + 1)
            j = m.start() if m is not None else n
            keys.append(path[i + 1 : j])
            i = j
        elif c == "[":
            j = path.find("]", i)
            if j < 0:
                return None
            tok = path[i + 1 : j]
            if tok[:1] in ("'", '"'):
                keys.append(tok[1:-1])
            elif tok.isdigit() and tok.isascii():
                keys.append(int(tok) if len(tok) < 10 else _FAR)
            else:
                return None
            i = j + 1
        else:
            return None
    return keys


_KEY_END = re.compile(r"[.\[]")


class _Pieces:
    """One call's ``partialArgs`` state, dropped with the call: the strings still arriving (path ->
    their container, key and pieces so far; joined once when the string ends, so joining stays
    linear)."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open: dict[str, tuple[Any, type, str | int, list[str]]] = {}

    def close(self) -> None:
        """Write the strings whose last piece never came (the call ended)."""
        for cur, kind, last, parts in self.open.values():
            _put(cur, kind, last, "".join(parts))
        self.open.clear()


def _apply_partial(obj: dict[str, Any], partial: list[Any], pieces: _Pieces, warnings: list[str]) -> None:
    """Apply Vertex ``partialArgs`` to the arguments object; a piece whose path we cannot read or
    that points beyond what the arguments can hold is dropped with a warning. A string whose piece
    says ``willContinue`` is continued by the next piece of the same path."""
    for pa in partial:
        path = pa.get("jsonPath") if isinstance(pa, dict) else None
        if not isinstance(path, str):
            warn_once(warnings, _UNREADABLE)
            continue
        keys = _path_keys(path)
        if not keys:
            warn_once(warnings, _UNREADABLE)
            continue
        if "stringValue" in pa:
            value: Any = pa["stringValue"]
        elif "numberValue" in pa:
            value = pa["numberValue"]
        elif "boolValue" in pa:
            value = pa["boolValue"]
        elif "nullValue" in pa:
            value = None
        else:
            continue
        if len(keys) > _MAX_DEPTH:
            warn_once(warnings, _BEYOND)
            continue
        cur: Any = obj
        if len(keys) > 1:  # (a nested path: its containers, made where missing)
            for k, nxt in zip(keys, keys[1:]):
                kind = cur.__class__  # (JSON values: exact dicts and lists)
                if kind is dict:
                    child = cur.get(k)
                elif kind is list and isinstance(k, int) and k < len(cur):
                    child = cur[k]
                else:
                    child = None
                if child is None:
                    child = [] if isinstance(nxt, int) else {}
                    placed = _put(cur, kind, k, child)
                    if not placed:
                        cur = None if placed is None else _TOO_FAR  # (None: takes nothing)
                        break
                cur = child
            if cur is _TOO_FAR:
                warn_once(warnings, _BEYOND)
                continue
        last = keys[-1]
        kind = cur.__class__
        if kind is not dict and kind is not list:  # (a path through a string or number takes nothing)
            continue
        more = pa.get("willContinue") is True and isinstance(value, str)
        held = pieces.open.pop(path, None) if pieces.open else None
        if held is not None and held[0] is cur and isinstance(value, str):
            held[3].append(value)
            if more:
                pieces.open[path] = held
            else:
                _put(cur, kind, last, "".join(held[3]))
            continue
        if kind is dict and isinstance(last, str):  # (the usual piece)
            cur[last] = value
            placed = True
        else:
            placed = _put(cur, kind, last, value)
        if placed is False:
            warn_once(warnings, _BEYOND)
        elif placed and more:
            pieces.open[path] = (cur, kind, last, [value])


def _put(cur: Any, kind: type, key: str | int, value: Any) -> bool | None:
    """``cur[key] = value`` for a name on a JSON object, or an index on a list grown (by at most
    ``_LIST_GAP`` nulls) to reach it: True; False for an index further on. Other values (a path
    through a string, a name on a list, an index on an object) take nothing: None."""
    if kind is dict:
        if not isinstance(key, str):
            return None
        cur[key] = value
    elif kind is list and isinstance(key, int):
        n = len(cur)
        if key < n:
            cur[key] = value
        elif key - n > _LIST_GAP:
            return False
        else:
            if key > n:
                cur.extend([None] * (key - n))
            cur.append(value)
    else:
        return None
    return True


# ============================================================================= stream decode
_loads = orjson.loads
_dumps = orjson.dumps
_EMPTY_TEXT = {"text": ""}


class _Call:
    """A function call being read: its arguments may arrive in pieces (Vertex ``partialArgs``)."""

    __slots__ = ("part", "obj", "pieces", "raw", "sig")

    def __init__(self, part: ToolCall, raw: dict[str, Any], sig: str | None):
        self.part = part
        self.obj: dict[str, Any] = {}
        self.pieces: _Pieces | None = None  # made by the first partialArgs
        self.raw = raw
        self.sig = sig


class StreamDecoder:
    """Gemini stream chunks (one ``GenerateContentResponse`` per SSE event or array element) ->
    neutral events.

    A complete function call is held until the next part that is not its ``functionResponse``
    (or the end of the stream): a call the server ran itself (server-side MCP) is answered in the
    same stream and must not reach the client as a call to run."""

    def __init__(self, warnings: list[str]):
        self.warnings = warnings
        self.done = False
        self._started = False
        self._next = 0
        self._kind: str | None = None  # the open text-like block: "text" | "thought"
        self._open = -1  # its neutral index
        self._sig: str | None = None  # signature of the open thought block
        self._cits: list[dict[str, Any]] | None = None
        self._call: _Call | None = None  # a function call whose arguments arrive in pieces
        self._held: list[_Call] = []  # complete calls not yet sent
        self._calls = 0
        self._client_calls = 0  # calls sent to the client as calls to run
        self._stop: StopInfo | None = None
        self._finish: tuple[Any, Any, Any] | None = None
        self._id = ""
        self._raw_usage: Any = None  # the latest usageMetadata (it repeats in every chunk)
        self._search: list[Any] | None = None  # grounding searches, sent once the answer's text closed

    def feed(self, event: str | None, data: str) -> list[Event]:
        """One chunk: one ``orjson.loads``, then only what the chunk carries is read (the usual one
        is a text part, the model version, the response id and the usage so far)."""
        if self.done:
            return []
        try:
            obj = _loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedEvent(f"invalid JSON in a Gemini stream chunk ({exc})") from None
        if not isinstance(obj, dict):
            raise MalformedEvent("a Gemini stream chunk that is not an object")
        cands = obj.get("candidates")
        if "error" in obj and not cands:
            err = error_from_wire(None, obj) or Error(ErrorKind.API_ERROR, "upstream error in the stream", 500)
            self.done = True
            return [ErrorEvent(err)]
        out: list[Event] = []
        if not self._started:
            self._started = True
            rid = obj.get("responseId")
            self._id = rid if isinstance(rid, str) else ""
            mv = obj.get("modelVersion")
            ct = obj.get("createTime")
            out.append(Start(self._id or None, mv if isinstance(mv, str) else None, None,
                             None if ct is None else created_from_wire(ct)))
        cand = cands[0] if isinstance(cands, list) and cands else None
        if isinstance(cand, dict):
            content = cand.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            if isinstance(parts, list) and parts:
                if self._finish is not None and any(isinstance(p, dict) and p and p != _EMPTY_TEXT for p in parts):
                    self._finish = None  # another step follows (a server-side tool loop)
                part = self._part
                for p in parts:
                    if isinstance(p, dict):
                        part(p, out)
            if "citationMetadata" in cand or "groundingMetadata" in cand:
                cits = _citations(cand)
                if cits:
                    self._cits = (self._cits or []) + cits
                gm = cand.get("groundingMetadata")
                if self._search is None and isinstance(gm, dict):
                    self._search = web_search_from_grounding(gm, self._id) or None
            finish = cand.get("finishReason")
            if finish is not None:
                self._end_call(out)
                self._close(out)
                self._searches(out)
                sr = cand.get("safetyRatings")
                self._finish = (finish, cand.get("finishMessage"),
                                {"safety_ratings": sr} if isinstance(sr, list) else None)
        else:
            pf = obj.get("promptFeedback")
            if isinstance(pf, dict):
                block = stop_from_block(pf)
                if block is not None:
                    self._stop = block
        u = obj.get("usageMetadata")
        if u is not None:
            self._raw_usage = u
        return out

    def finish(self) -> list[Event]:
        if self.done:
            return []
        self.done = True
        out: list[Event] = []
        u = self._raw_usage  # (cumulative, repeated in every chunk: only the latest counts)
        if isinstance(u, dict):
            usage = usage_from_wire(u)
            if usage is not None:
                out.append(UsageEvent(usage))
        if self._finish is not None or self._stop is not None:
            if self._call is not None:
                self._end_call(out)
            if self._held:
                self._flush(out)
            if self._kind is not None:
                self._close(out)
            self._searches(out)
            if self._finish is not None:
                f, m, d = self._finish
                stop = stop_from_wire(f, m, self._client_calls > 0, d)
            else:
                assert self._stop is not None  # (one of the two, checked above)
                stop = self._stop
            out.append(Stop(stop))
            out.append(End())
            return out
        out.append(ErrorEvent(Error(kind=ErrorKind.INTERRUPTED, message=_INTERRUPTED, status=502)))
        return out

    # ---- parts
    def _alloc(self) -> int:
        n = self._next
        self._next += 1
        return n

    def _close(self, out: list[Event]) -> None:
        if self._kind is None:
            return
        n = self._open
        if self._kind == "thought":
            op: dict[str, Any] = {"protocol": PROTOCOL, "on": "thought"}
            if self._sig:
                op["signature"] = self._sig
            out.append(BlockEnd(n, Reasoning(opaque=op)))
        elif self._cits:
            out.append(BlockEnd(n, Text("", self._cits)))
            self._cits = None
        else:
            out.append(BlockEnd(n))
        self._kind = None
        self._sig = None

    def _searches(self, out: list[Event]) -> None:
        for p in self._search or ():
            self._lone(p, out)
        if self._search:
            self._search = []  # (sent: a later grounding repeats them)

    def _lone(self, part: Any, out: list[Event]) -> None:
        n = self._alloc()
        out.append(BlockStart(n, part))
        out.append(BlockEnd(n, part))

    def _flush(self, out: list[Event]) -> None:
        """Send the held calls: they were not run by the server."""
        for call in self._held:
            if call.sig:
                self._lone(_sig_part(call.sig, "call"), out)
            n = self._alloc()
            p = call.part
            out.append(BlockStart(n, ToolCall(p.id, p.name)))
            out.append(Delta(n, "arguments", p.arguments))
            out.append(BlockEnd(n, p))
            self._client_calls += 1
        self._held.clear()

    def _part(self, p: dict[str, Any], out: list[Event]) -> None:
        text = p.get("text")
        lone = isinstance(text, str) and len(p) == 1  # a text alone (the usual part)
        if lone:  # (no signature, call or result to look for)
            sig = None
            if self._call is not None:
                self._end_call(out)
        else:
            sig = p.get("thoughtSignature")
            if not isinstance(sig, str) or not sig:
                sig = None
            fc = p.get("functionCall")
            if isinstance(fc, dict):
                if self._kind is not None:
                    self._close(out)
                self._function_call(fc, p, sig, out)
                return
            if self._call is not None:
                self._end_call(out)
            fr = p.get("functionResponse")
            if isinstance(fr, dict):
                name = fr.get("name")
                for k, call in enumerate(self._held):
                    if call.part.name == name:  # run by the server: both stay Gemini's own parts
                        del self._held[k]
                        self._flush(out)
                        self._close(out)
                        if call.sig:
                            self._lone(_sig_part(call.sig, "call"), out)
                        self._lone(Opaque(PROTOCOL, call.raw, "functionCall"), out)
                        break
        if isinstance(text, str):
            if not text and lone:
                return  # an empty text part (Gemini ends some streams so): nothing to say
            if self._held:
                self._flush(out)
            if not lone and p.get("thought") is True:
                if self._kind != "thought":
                    self._close(out)
                    self._kind, self._open = "thought", self._alloc()
                    out.append(BlockStart(self._open, Reasoning()))
                if sig:
                    self._sig = sig
                if text:
                    out.append(Delta(self._open, "reasoning", text))
                return
            if sig:
                self._close(out)
                self._lone(_sig_part(sig, "text"), out)
            if text:
                if self._kind != "text":
                    self._close(out)
                    self._kind, self._open = "text", self._alloc()
                    out.append(BlockStart(self._open, Text("")))
                out.append(Delta(self._open, "text", text))
            return
        if self._held:
            self._flush(out)
        self._close(out)
        label = next((k for k in _OPAQUE_PARTS if k in p), None)
        if sig:
            self._lone(_sig_part(sig, "text"), out)
        if label is None:
            if sig and len(p) == 1:
                return
            warn_once(self.warnings, f"unknown Gemini part ({', '.join(sorted(p))}) kept only for Gemini clients")
            label = "unknown"
        self._lone(Opaque(PROTOCOL, p, label), out)

    def _function_call(self, fc: dict[str, Any], raw: dict[str, Any], sig: str | None, out: list[Event]) -> None:
        name = fc.get("name")
        partial = fc.get("partialArgs")
        more = fc.get("willContinue") is True
        call = self._call
        if call is not None and not isinstance(name, str):  # a piece of the call in progress
            if isinstance(partial, list):
                _apply_partial(call.obj, partial, call.pieces or self._pieces(call), self.warnings)
            args = fc.get("args")
            if isinstance(args, dict):
                call.obj.update(args)
            if sig and not call.sig:
                call.sig = sig
            if not more:
                self._end_call(out)
            return
        if call is not None:
            self._end_call(out)
        if not isinstance(name, str):
            if fc:
                warn_once(self.warnings, "a Gemini function call without a name was skipped")
            return
        fid = fc.get("id")
        cid = fid if isinstance(fid, str) and fid else mint_call_id(self._id, self._calls, name)
        self._calls += 1
        call = _Call(ToolCall(cid, name), raw, sig)
        args = fc.get("args")
        if isinstance(args, dict):
            call.obj.update(args)
        if isinstance(partial, list):
            _apply_partial(call.obj, partial, self._pieces(call), self.warnings)
        self._call = call
        if not more:
            self._end_call(out)

    @staticmethod
    def _pieces(call: _Call) -> _Pieces:
        pieces = call.pieces = _Pieces()
        return pieces

    def _end_call(self, out: list[Event]) -> None:
        call = self._call
        if call is None:
            return
        self._call = None
        if call.pieces is not None:
            call.pieces.close()
            call.pieces = None
        call.part.arguments = dumps(call.obj).decode()
        if call.raw.get("functionCall", {}).get("partialArgs") is not None or call.raw["functionCall"].get(
                "willContinue"):
            # the wire part of a call read in pieces: the whole call, as a complete response has it
            call.raw = {k: v for k, v in call.raw.items() if k != "functionCall"}
            call.raw["functionCall"] = {"name": call.part.name, "args": call.obj}
        self._held.append(call)


# ============================================================================= stream encode
class _Out:
    __slots__ = ("kind", "buf", "part", "sig", "on", "sent")

    def __init__(self, kind: str, part: Any = None):
        self.kind = kind  # text | refusal | thought | own_sig | foreign | tool | opaque | search | drop
        self.buf: list[str] = []
        self.part = part
        self.sig: str | None = None
        self.on: str | None = None
        self.sent = False  # text of this block went out


class StreamEncoder:
    """Neutral events -> Gemini stream chunks for the client: SSE frames (``data: …\\r\\n\\r\\n``)
    or, when the client asked without ``alt=sse``, the elements of one JSON array."""

    def __init__(self, ctx: Any, warnings: list[str]):
        self.ctx = ctx
        self.warnings = warnings
        self.done = False
        self._sse = getattr(ctx, "sse", True) is not False
        self._first = True
        self._open: dict[int, _Out] = {}
        self._model: str | None = getattr(ctx, "model", None)
        self._id: str | None = None
        self._created: str | None = None
        self._tail = b"}"
        self._usage: Usage | None = None
        self._stop: StopInfo | None = None
        self._pending: str | None = None  # a signature for the next part
        self._refusal: list[str] = []
        self._text_sent = False
        self._has_tools = False
        self._search: list[Any] = []  # web search parts, sent as the last chunk's groundingMetadata
        #: a text chunk with nothing else to carry is these two around its JSON string (both known
        #: once the first chunk went out: the stream's metadata tail and, in an array, its separator)
        self._text_pre = b"data: " + _TEXT_HEAD if self._sse else b",\r\n" + _TEXT_HEAD
        self._text_post: bytes | None = None

    # ---- framing
    def _frame(self, obj_bytes: bytes) -> bytes:
        if self._sse:
            return b"data: " + obj_bytes + b"\r\n\r\n"
        if self._first:
            self._first = False
            return b"[" + obj_bytes
        return b",\r\n" + obj_bytes

    def _end_frame(self) -> bytes:
        if self._sse:
            return b""
        return b"[]" if self._first else b"]"

    def _meta(self) -> None:
        if self._tail != b"}":
            return
        tail = b',"modelVersion":' + orjson.dumps(self._model or "unknown")
        if self._id:
            tail += b',"responseId":' + orjson.dumps(self._id)
        if self._created:
            tail += b',"createTime":' + orjson.dumps(self._created)
        self._tail = tail + b"}"

    def _chunk(self, part: dict[str, Any]) -> bytes:
        if self._pending is not None and "thought" not in part:
            part["thoughtSignature"] = self._pending
            self._pending = None
        if self._text_post is None:
            self._meta()
            self._text_post = _TEXT_MID + self._tail + (b"\r\n\r\n" if self._sse else b"")
        return self._frame(b'{"candidates":[{"content":{"role":"model","parts":[' + dumps(part)
                           + b']},"index":0}]' + self._tail)

    def encode(self, ev: Event) -> bytes:
        if self.done:
            return b""
        if isinstance(ev, Delta):  # (most events: the text deltas first)
            o = self._open.get(ev.index)
            if o is None or not ev.value:
                return b""
            if o.kind == "text" and ev.kind == "text":
                return self._text(o, ev.value)
            return self._delta(o, ev)
        if isinstance(ev, BlockStart):
            return self._block_start(ev)
        if isinstance(ev, BlockEnd):
            return self._block_end(ev)
        if isinstance(ev, Start):
            return self._start(ev)
        if isinstance(ev, UsageEvent):
            return self._usage_ev(ev)
        if isinstance(ev, Stop):
            return self._stop_ev(ev)
        if isinstance(ev, End):
            return self._end(ev)
        return self._error(ev)

    def _start(self, ev: Start) -> bytes:
        if self._id is None:
            self._id = ev.id
            self._model = self._model or ev.model
            self._created = created_to_wire(ev.created)
        if ev.usage is not None:
            self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
        return b""

    def _block_start(self, ev: BlockStart) -> bytes:
        p = ev.part
        i = ev.index
        if isinstance(p, Text):
            self._open[i] = _Out("text")
            return self._text(self._open[i], p.text) if p.text else b""
        if isinstance(p, Refusal):
            self._open[i] = _Out("refusal")
            return self._text(self._open[i], p.text) if p.text else b""
        if isinstance(p, Reasoning):
            op = p.opaque
            if op and op.get("protocol") == PROTOCOL and op.get("on") in ("text", "call"):
                o = self._open[i] = _Out("own_sig", p)
                o.sig = op.get("signature") if isinstance(op.get("signature"), str) else None
                return b""
            o = self._open[i] = _Out("thought" if op and op.get("protocol") == PROTOCOL else "foreign", p)
            return self._thought(o, p.text) if p.text else b""
        if isinstance(p, ToolCall):
            self._has_tools = True
            o = self._open[i] = _Out("tool", p)
            if p.arguments:
                o.buf.append(p.arguments)
            return b""
        if isinstance(p, (WebSearchCall, WebSearchResults)):
            self._open[i] = _Out("search", p)
            return b""
        if isinstance(p, Opaque):
            if p.protocol != PROTOCOL:
                warn_once(self.warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Gemini clients "
                          "cannot represent it")
                self._open[i] = _Out("drop")
                return b""
            self._open[i] = _Out("opaque", p)
            return b""
        warn_once(self.warnings, f"{getattr(p, 'type', 'unknown')} part in a response dropped")
        self._open[i] = _Out("drop")
        return b""

    def _text(self, o: _Out, v: str) -> bytes:
        if o.kind == "refusal":
            self._refusal.append(v)
        self._text_sent = o.sent = True
        post = self._text_post
        if post is None or self._pending is not None:
            return self._chunk({"text": v})
        return self._text_pre + _dumps(v) + post

    def _thought(self, o: _Out, v: str) -> bytes:
        o.buf.append(v)
        return self._chunk({"text": v, "thought": True})

    def _delta(self, o: _Out, ev: Delta) -> bytes:
        v = ev.value
        k, ok = ev.kind, o.kind
        if ok == "text" or ok == "refusal":
            if k == "text" or k == "refusal":
                return self._text(o, v)
        elif ok == "thought" or ok == "foreign":
            if k == "reasoning" or k == "summary":
                return self._thought(o, v)
            if k == "signature":
                o.sig = (o.sig or "") + v
        elif ok == "tool":
            if k == "arguments":
                o.buf.append(v)
        return b""

    def _block_end(self, ev: BlockEnd) -> bytes:
        o = self._open.pop(ev.index, None)
        if o is None:
            return b""
        final = ev.part
        k = o.kind
        out = b""
        if k == "text" or k == "refusal":
            if isinstance(final, (Text, Refusal)) and final.text and not o.sent:
                out += self._text(o, final.text)
            if isinstance(final, Text) and final.citations:
                cits = _citations_to_wire(final.citations, self.warnings)
                if cits:
                    self._meta()
                    out += self._frame(b'{"candidates":[{"content":{"role":"model","parts":[]},'
                                       b'"citationMetadata":{"citations":' + orjson.dumps(cits)
                                       + b'},"index":0}]' + self._tail)
            return out
        if k == "own_sig":
            if o.sig is not None:
                out = self._flush_pending()
                self._pending = o.sig
            return out
        if k == "thought":
            part = final if isinstance(final, Reasoning) else o.part
            op = part.opaque or o.part.opaque or {}
            if part.text and not o.buf:
                out += self._thought(o, part.text)
            sig = op.get("signature") if isinstance(op.get("signature"), str) else o.sig
            if sig:
                out += self._chunk({"text": "", "thought": True, "thoughtSignature": sig})
            return out
        if k == "foreign":
            part = final if isinstance(final, Reasoning) else o.part
            text = "".join(o.buf)
            if part.text and not text:
                text = part.text
                out += self._thought(o, text)
            merged = Reasoning(text, part.summary or o.part.summary, part.opaque or o.part.opaque,
                               part.redacted or o.part.redacted)
            out += self._flush_pending()
            self._pending = _packed(merged, text)
            return out
        if k == "tool":
            p: ToolCall = final if isinstance(final, ToolCall) else o.part
            args = "".join(o.buf) or p.arguments
            tc = ToolCall(p.id or o.part.id, p.name or o.part.name, args, p.kind)
            return self._chunk({"functionCall": {"id": tc.id, "name": tc.name, "args": tool_input(tc, self.warnings)}})
        if k == "opaque":
            part_o = final if isinstance(final, Opaque) else o.part
            return self._chunk(dict(part_o.raw))
        if k == "search":
            self._search.append(final if isinstance(final, (WebSearchCall, WebSearchResults)) else o.part)
        return b""

    def _flush_pending(self) -> bytes:
        if self._pending is None:
            return b""
        sig, self._pending = self._pending, None
        return self._chunk({"text": "", "thoughtSignature": sig})

    def _usage_ev(self, ev: UsageEvent) -> bytes:
        self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
        return b""

    def _stop_ev(self, ev: Stop) -> bytes:
        self._stop = ev.stop
        return b""

    def _end(self, ev: End) -> bytes:
        out = [self._block_end(BlockEnd(i)) for i in list(self._open)]
        stop = _effective_stop(self._stop, self._has_tools, "".join(self._refusal) or None)
        self._meta()
        usage = orjson.dumps(usage_to_wire(self._usage))
        if stop.reason is StopReason.REFUSAL and stop.detail.get("input_blocked") and not self._text_sent \
                and not self._has_tools:
            fb: dict[str, Any] = {"blockReason": stop.raw if stop.raw in _BLOCKS else "OTHER",
                                  "blockReasonMessage": stop.message or GENERIC_REFUSAL}
            out.append(self._frame(b'{"promptFeedback":' + orjson.dumps(fb) + b',"usageMetadata":' + usage
                                   + self._tail))
        else:
            finish, message = stop_to_wire(stop, self._has_tools, self.warnings)
            parts: list[dict[str, Any]] = []
            if self._pending is not None:
                parts.append({"text": "", "thoughtSignature": self._pending})
                self._pending = None
            if _refusal_needs_text(stop) and not self._text_sent:
                parts.append({"text": stop.message or GENERIC_REFUSAL})
            if not parts:
                parts.append({"text": ""})
            cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "finishReason": finish,
                                    "index": 0}
            if message:
                cand["finishMessage"] = message
            gm = grounding_metadata(self._search, None) if self._search else None
            if gm is not None:
                cand["groundingMetadata"] = gm
            out.append(self._frame(b'{"candidates":[' + dumps(cand) + b'],"usageMetadata":' + usage
                                   + self._tail))
        out.append(self._end_frame())
        self.done = True
        return b"".join(out)

    def _error(self, ev: ErrorEvent) -> bytes:
        self.done = True
        return self._frame(orjson.dumps(error_body(ev.error))) + self._end_frame()


_TEXT_HEAD = b'{"candidates":[{"content":{"role":"model","parts":[{"text":'
_TEXT_MID = b'}]},"index":0}]'


CODEC = Codec(
    protocol=Protocol(PROTOCOL),
    name="gemini",
    label="Google Gemini generateContent",
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
        sse_only=False,
        retry_after=ratelimit.reader(body=ratelimit.rpc_retry_info),
    ),
    errors=_facts.ERRORS,
    capabilities=_facts.CAPABILITIES,
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.response_id,
    sniff_request=_facts.sniff_request,
    sniff_response=_facts.sniff_response,
    sniff_stream=_facts.sniff_stream,
    is_error_body=_facts.is_error_body,
    stream_reader=_facts.StreamReader,
)
