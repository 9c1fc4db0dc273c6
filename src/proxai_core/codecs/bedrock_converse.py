"""Amazon Bedrock Converse (``/model/{id}/converse`` and ``converse-stream``): one codec.

Bodies are camelCase JSON; the model and the stream flag live in the URL. Streams come in the
``application/vnd.amazon.eventstream`` framing (:mod:`proxai_core.eventstream`): ``messageStart``,
``contentBlockStart`` (tool use only: text and reasoning blocks begin with a delta),
``contentBlockDelta``, ``contentBlockStop``, ``messageStop`` (the stop), ``metadata`` (usage,
metrics); a stream has ended when both of the last two arrived. Errors inside a 200 stream are
exception frames; HTTP errors are ``{"message"}`` with the type in ``x-amzn-errortype``.
"""

from __future__ import annotations

from typing import Any

import orjson

from .. import eventstream as es
from ..context import ClientContext
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
    UsageEvent,
)
from ..protocol import Protocol
from ..stop import GENERIC_REFUSAL, StopInfo, StopReason, classify_stop
from ..strict import MalformedEvent
from . import _aws_errors as _aws
from . import _converse_common as _facts
from ._converse_common import (
    PROTOCOL,
    stop_from_wire,
    stop_sequence_of,
    stop_to_wire,
    usage_from_wire,
    usage_to_wire,
    warn_once,
)
from ._converse_request import decode_request, encode_request, reasoning_block
from ._request_common import tool_input
from .base import Codec, Wire

_INTERRUPTED = "upstream stream ended before its stop and metadata events"
_CITATIONS_DROPPED = "citations were dropped (Bedrock Converse clients get the cited text without them)"


# ============================================================================= complete responses
def _dec_block(b: Any, warnings: list[str]) -> Part | None:
    if not isinstance(b, dict):
        warnings.append("a non-object content block in the upstream response was skipped")
        return None
    if "text" in b:
        t = b["text"]
        return Text(t if isinstance(t, str) else "")
    inner = b.get("toolUse") or b.get("toolResult")
    if isinstance(inner, dict) and inner.get("type") not in (None, "tool_use", "tool_result"):
        return Opaque(PROTOCOL, b, str(inner["type"]))  # a server tool's call or result (Bedrock ran it)
    if "toolUse" in b and isinstance(b["toolUse"], dict):
        tu = b["toolUse"]
        inp = tu.get("input")
        return ToolCall(str(tu.get("toolUseId") or ""), str(tu.get("name") or ""),
                        dumps(inp if inp is not None else {}).decode())
    if "reasoningContent" in b and isinstance(b["reasoningContent"], dict):
        rc = b["reasoningContent"]
        rt = rc.get("reasoningText")
        if isinstance(rt, dict):
            opaque: dict[str, Any] = {"protocol": PROTOCOL}
            if isinstance(rt.get("signature"), str):
                opaque["signature"] = rt["signature"]
            text = rt.get("text")
            return Reasoning(text=text if isinstance(text, str) else "", opaque=opaque)
        if isinstance(rc.get("redactedContent"), str):
            return Reasoning(text="", redacted=True, opaque={"protocol": PROTOCOL, "data": rc["redactedContent"]})
    if "citationsContent" in b and isinstance(b["citationsContent"], dict):
        cc = b["citationsContent"]
        text = "".join(c.get("text", "") for c in cc.get("content") or [] if isinstance(c, dict)
                       and isinstance(c.get("text"), str))
        cits = [{"type": "url" if isinstance(c.get("location"), dict) and "web" in c["location"] else "file",
                 "title": c.get("title"), "raw": c}
                for c in cc.get("citations") or [] if isinstance(c, dict)]
        return Text(text, cits or None)
    key = next(iter(b), None)
    if not isinstance(key, str):
        warnings.append("an empty content block in the upstream response was skipped")
        return None
    return Opaque(PROTOCOL, b, key)


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    resp = Response()
    if not isinstance(body, dict):
        raise MalformedEvent("a Converse response is a JSON object")
    if _facts.is_error_body(body):
        err = Error(kind=ErrorKind.API_ERROR, message=str(body.get("message") or body.get("Message")), raw=body)
        resp.extra["error"] = err
        resp.stop = classify_stop("error", category=err.kind, message=err.message)
        return resp
    out = body.get("output")
    msg = out.get("message") if isinstance(out, dict) else None
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, list):
        if content is not None or out is not None:
            warnings.append("upstream response output.message.content is not an array; read as empty")
        content = []
    parts = [p for p in (_dec_block(b, warnings) for b in content) if p is not None]
    resp.parts = parts
    has_tools = any(isinstance(p, ToolCall) for p in parts)
    fields = body.get("additionalModelResponseFields")
    resp.stop = stop_from_wire(body.get("stopReason"), has_tools, body.get("trace"))
    resp.stop_sequence = stop_sequence_of(fields)
    resp.usage = usage_from_wire(body.get("usage"))
    metrics = body.get("metrics")
    if isinstance(metrics, dict) and isinstance(metrics.get("latencyMs"), int):
        resp.extra["latencyMs"] = metrics["latencyMs"]
    for k in ("additionalModelResponseFields", "trace", "performanceConfig", "serviceTier"):
        if body.get(k) is not None:
            resp.extra[k] = body[k]
    return resp


def _effective_stop(stop: StopInfo | None, has_tools: bool, refusal: str | None) -> StopInfo:
    stop = stop or classify_stop(None, has_tool_calls=has_tools)
    if refusal and stop.reason is StopReason.END_TURN:  # a refusal outranks the finish
        stop = classify_stop("refusal", category="output-refusal", message=refusal)
    return stop


def _content(parts: list[Part], warnings: list[str]) -> tuple[list[dict[str, Any]], str | None, bool, bool]:
    """(content blocks, refusal text, has text, has tool calls) of response parts."""
    content: list[dict[str, Any]] = []
    refusals: list[str] = []
    has_text = has_tools = False
    for p in parts:
        if isinstance(p, Text):
            if p.text:
                content.append({"text": p.text})
                has_text = True
            if p.citations:
                warn_once(warnings, _CITATIONS_DROPPED)
        elif isinstance(p, Refusal):
            if p.text:
                content.append({"text": p.text})
                refusals.append(p.text)
                has_text = True
        elif isinstance(p, Reasoning):
            b = reasoning_block(p, for_client=True)
            if b is not None:
                content.append(b)
        elif isinstance(p, ToolCall):
            content.append({"toolUse": {"toolUseId": p.id, "name": p.name, "input": tool_input(p, warnings)}})
            has_tools = True
        elif isinstance(p, Opaque):
            if p.protocol == PROTOCOL:
                content.append(p.raw)
            else:
                warn_once(warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Bedrock Converse "
                          "clients cannot represent it")
        elif isinstance(p, (Image, Document, ToolResult)):
            warn_once(warnings, f"{p.type} part in a response dropped")
        else:  # another provider's server work (a web search call or its results)
            warn_once(warnings, f"{p.type} part dropped: Bedrock Converse clients cannot represent it")
    return content, "".join(refusals) or None, has_text, has_tools


def encode_response(resp: Response, ctx: Any, warnings: list[str]) -> dict[str, Any]:
    content, refusal, has_text, has_tools = _content(resp.parts, warnings)
    stop = _effective_stop(resp.stop, has_tools, refusal)
    if stop.reason is StopReason.REFUSAL and not has_text:
        content.append({"text": stop.message or GENERIC_REFUSAL})
    reason, fields = stop_to_wire(stop, resp.stop_sequence, has_tools, warnings)
    latency = resp.extra.get("latencyMs")
    body: dict[str, Any] = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": reason,
        "usage": usage_to_wire(resp.usage),
        "metrics": {"latencyMs": latency if isinstance(latency, int) else 0},
    }
    if fields:
        body["additionalModelResponseFields"] = fields
    guard = stop.detail.get("guardrail") if stop.detail else None
    if reason == "guardrail_intervened" and guard is not None:
        body["trace"] = {"guardrail": guard}
    return body


def error_frame(err: Error) -> bytes:
    return _facts.exception_frame(err)


# ============================================================================= stream decode
def _load(data: str, name: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"{name}: payload is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise MalformedEvent(f"{name}: payload is not a JSON object")
    return obj


class _Blk:
    __slots__ = ("kind", "text", "sig", "part")

    def __init__(self, kind: str, part: Part | None = None) -> None:
        self.kind = kind  # text | reasoning | redacted | tool
        self.text: list[str] = []
        self.sig: str | None = None
        #: the whole part where the block's start gave it (a tool call, redacted reasoning)
        self.part = part


class StreamDecoder:
    """Converse stream events (one frame each) -> neutral events."""

    def __init__(self, warnings: list[str]) -> None:
        self.warnings = warnings
        self.done = False
        self._started = False
        self._blocks: dict[int, _Blk] = {}
        self._stop: StopInfo | None = None
        self._stop_sequence: str | None = None
        self._usage_seen = False
        self._has_tools = False

    def feed(self, event: str | None, data: str) -> list[Event]:
        if self.done:
            return []
        name = event or ""
        if name == es.CORRUPT or name == es.CUT:
            return self._error(Error(kind=ErrorKind.INTERRUPTED, status=502,
                                     message=f"the upstream event stream broke off: {data}"))
        if name == es.ERROR:
            obj = _load(data, name)
            return self._error(Error(kind=ErrorKind.API_ERROR, message=str(obj.get("message") or obj.get("code")),
                                     code=obj.get("code") if isinstance(obj.get("code"), str) else None, raw=obj))
        if name in _aws.STREAM_EXCEPTIONS or name.endswith("Exception"):
            return self._error(_facts.stream_error(name, _load(data, name)))
        handler = self._HANDLERS.get(name)
        if handler is None:
            warn_once(self.warnings, f"unknown Bedrock Converse stream event {name!r} ignored")
            return []
        out: list[Event] = handler(self, _load(data, name))
        return out

    def finish(self) -> list[Event]:
        if self.done:
            return []
        return self._error(Error(kind=ErrorKind.INTERRUPTED, status=502, message=_INTERRUPTED))

    def _error(self, err: Error) -> list[Event]:
        self.done = True
        out: list[Event] = [BlockEnd(i) for i in sorted(self._blocks)]
        self._blocks.clear()
        if not self._started:
            self._started = True
            out.insert(0, Start())
        out.append(ErrorEvent(err))
        return out

    def _head(self) -> list[Event]:
        if self._started:
            return []
        self._started = True
        return [Start()]

    def _message_start(self, obj: dict[str, Any]) -> list[Event]:
        return self._head()

    def _block_start(self, obj: dict[str, Any]) -> list[Event]:
        out = self._head()
        i = _facts.as_int(obj.get("contentBlockIndex"))
        start = obj.get("start")
        if i is None or not isinstance(start, dict):
            raise MalformedEvent("contentBlockStart needs contentBlockIndex and start")
        tu = start.get("toolUse")
        server = tu if isinstance(tu, dict) and tu.get("type") not in (None, "tool_use") else start.get("toolResult")
        if isinstance(server, dict):  # a tool Bedrock runs itself: its call or result, whole at its stop
            out += self._close(i)
            key = "toolUse" if server is tu else "toolResult"
            self._blocks[i] = _Blk("server", Opaque(PROTOCOL, {key: dict(server)}, str(server.get("type") or key)))
            return out
        if isinstance(tu, dict):
            call = ToolCall(str(tu.get("toolUseId") or ""), str(tu.get("name") or ""), "")
            out += self._close(i)
            self._blocks[i] = _Blk("tool", call)
            self._has_tools = True
            out.append(BlockStart(i, ToolCall(call.id, call.name, "")))
        else:
            warn_once(self.warnings, f"Bedrock Converse block start {sorted(start)!r} ignored")
        return out

    def _open(self, i: int, kind: str, out: list[Event]) -> _Blk:
        blk = self._blocks.get(i)
        if blk is not None:
            return blk
        blk = self._blocks[i] = _Blk(kind)
        if kind == "text":
            out.append(BlockStart(i, Text("")))
        elif kind == "reasoning":
            out.append(BlockStart(i, Reasoning(opaque={"protocol": PROTOCOL})))
        elif kind == "tool":  # (a tool delta without its start: the call has no id or name)
            self._has_tools = True
            out.append(BlockStart(i, ToolCall("", "", "")))
        return blk

    def _block_delta(self, obj: dict[str, Any]) -> list[Event]:
        out = self._head()
        i = _facts.as_int(obj.get("contentBlockIndex"))
        d = obj.get("delta")
        if i is None or not isinstance(d, dict):
            raise MalformedEvent("contentBlockDelta needs contentBlockIndex and delta")
        if "text" in d:
            v = d["text"]
            if not isinstance(v, str):
                raise MalformedEvent("contentBlockDelta text is not a string")
            self._open(i, "text", out)
            if v:
                out.append(Delta(i, "text", v))
            return out
        blk = self._blocks.get(i)
        if blk is not None and blk.kind == "server":
            if isinstance(d.get("toolUse"), dict) and isinstance(d["toolUse"].get("input"), str):
                blk.text.append(d["toolUse"]["input"])
            elif isinstance(d.get("toolResult"), list):
                assert isinstance(blk.part, Opaque)
                blk.part.raw["toolResult"].setdefault("content", []).extend(d["toolResult"])
            return out
        tu = d.get("toolUse")
        if isinstance(tu, dict):
            v = tu.get("input")
            if not isinstance(v, str):
                raise MalformedEvent("contentBlockDelta toolUse.input is not a string")
            self._open(i, "tool", out)
            if v:
                out.append(Delta(i, "arguments", v))
            return out
        rc = d.get("reasoningContent")
        if isinstance(rc, dict):
            if isinstance(rc.get("redactedContent"), str):
                out += self._close(i)
                self._blocks[i] = _Blk("redacted", Reasoning(text="", redacted=True, opaque={
                    "protocol": PROTOCOL, "data": rc["redactedContent"]}))
                out.append(BlockStart(i, Reasoning(redacted=True)))
                return out
            blk = self._open(i, "reasoning", out)
            if isinstance(rc.get("text"), str):
                if rc["text"]:
                    blk.text.append(rc["text"])
                    out.append(Delta(i, "reasoning", rc["text"]))
            elif isinstance(rc.get("signature"), str):
                blk.sig = (blk.sig or "") + rc["signature"]
            return out
        if "citation" in d:
            return out  # (citations of a text block: the text itself came as text deltas)
        warn_once(self.warnings, f"Bedrock Converse delta {sorted(d)!r} ignored")
        return out

    def _close(self, i: int) -> list[Event]:
        blk = self._blocks.pop(i, None)
        if blk is None:
            return []
        if blk.kind == "reasoning":
            opaque: dict[str, Any] = {"protocol": PROTOCOL}
            if blk.sig is not None:
                opaque["signature"] = blk.sig
            return [BlockEnd(i, Reasoning(text="".join(blk.text), opaque=opaque))]
        if blk.kind == "redacted":
            return [BlockEnd(i, blk.part)]
        if blk.kind == "server" and isinstance(blk.part, Opaque):
            raw = blk.part.raw
            if "toolUse" in raw:
                try:
                    raw["toolUse"]["input"] = orjson.loads("".join(blk.text) or "{}")
                except orjson.JSONDecodeError:
                    raw["toolUse"]["input"] = {}
                    warn_once(self.warnings, "a server tool call's input was not JSON")
            return [BlockStart(i, blk.part), BlockEnd(i, blk.part)]
        return [BlockEnd(i)]

    def _block_stop(self, obj: dict[str, Any]) -> list[Event]:
        i = _facts.as_int(obj.get("contentBlockIndex"))
        if i is None:
            raise MalformedEvent("contentBlockStop needs contentBlockIndex")
        return self._close(i)

    def _message_stop(self, obj: dict[str, Any]) -> list[Event]:
        out = self._head()
        for i in sorted(self._blocks):
            out += self._close(i)
        fields = obj.get("additionalModelResponseFields")
        self._stop = stop_from_wire(obj.get("stopReason"), self._has_tools)
        self._stop_sequence = stop_sequence_of(fields)
        return out + self._end()

    def _metadata(self, obj: dict[str, Any]) -> list[Event]:
        out = self._head()
        u = usage_from_wire(obj.get("usage"))
        if u is not None:
            out.append(UsageEvent(u))
        self._usage_seen = True
        trace = obj.get("trace")
        if self._stop is not None and self._stop.raw == "guardrail_intervened" and isinstance(trace, dict):
            self._stop = stop_from_wire("guardrail_intervened", self._has_tools, trace)
        return out + self._end()

    def _end(self) -> list[Event]:
        if self._stop is None or not self._usage_seen:
            return []
        self.done = True
        return [Stop(self._stop, self._stop_sequence), End()]

    _HANDLERS: dict[str, Any] = {
        "messageStart": _message_start,
        "contentBlockStart": _block_start,
        "contentBlockDelta": _block_delta,
        "contentBlockStop": _block_stop,
        "messageStop": _message_stop,
        "metadata": _metadata,
    }


def stream_observes(name: str | None, data: str) -> bool:
    """A pass-through decodes every event but text and argument deltas once the content began."""
    return name != "contentBlockDelta" or '"reasoningContent"' in data


# ============================================================================= stream encode
def _ev(name: str, obj: dict[str, Any]) -> bytes:
    return es.frame(name, dumps(obj))


class StreamEncoder:
    """Neutral events -> Converse event-stream frames. Each neutral block gets its own
    ``contentBlockIndex`` when it first writes something (an empty text block writes nothing);
    blocks may interleave (every event names its index)."""

    def __init__(self, ctx: ClientContext, warnings: list[str]) -> None:
        self.ctx = ctx
        self.warnings = warnings
        self._started = False
        self._done = False
        self._index: dict[int, int] = {}  # neutral index -> wire index
        self._parts: dict[int, Part] = {}
        self._next = 0
        self._usage: Any = None
        self._has_tools = False
        self._refusal: list[str] = []
        self._has_text = False
        self._args: dict[int, list[str]] = {}  # neutral index -> the argument fragments written

    def encode(self, ev: Event) -> bytes:
        if self._done:
            return b""
        if isinstance(ev, Delta):
            return self._delta(ev)
        if isinstance(ev, BlockStart):
            return self._head() + self._block_start(ev)
        if isinstance(ev, BlockEnd):
            return self._block_end(ev)
        if isinstance(ev, Start):
            if ev.usage is not None:
                self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
            return self._head()
        if isinstance(ev, UsageEvent):
            self._usage = ev.usage if self._usage is None else self._usage.merge(ev.usage)
            return b""
        if isinstance(ev, Stop):
            return self._stop(ev)
        if isinstance(ev, End):
            self._done = True
            return b""
        if isinstance(ev, ErrorEvent):
            self._done = True
            return self._head() + error_frame(ev.error)
        return b""

    def _head(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return _ev("messageStart", {"role": "assistant"})

    def _wire(self, i: int) -> tuple[int, bool]:
        w = self._index.get(i)
        if w is not None:
            return w, False
        w = self._index[i] = self._next
        self._next += 1
        return w, True

    def _block_start(self, ev: BlockStart) -> bytes:
        p = ev.part
        self._parts[ev.index] = p
        if isinstance(p, ToolCall):
            self._has_tools = True
            w, _ = self._wire(ev.index)
            return _ev("contentBlockStart", {"contentBlockIndex": w,
                                             "start": {"toolUse": {"toolUseId": p.id, "name": p.name}}})
        if isinstance(p, Opaque) and p.protocol == PROTOCOL:
            return self._server_block(ev.index, p)
        if isinstance(p, Opaque):
            if p.protocol != PROTOCOL:
                warn_once(self.warnings, f"{p.protocol} item {p.label or 'opaque'!r} dropped: Bedrock Converse "
                          "clients cannot represent it")
        elif isinstance(p, (Text, Refusal)):
            if p.text:
                return self._delta(Delta(ev.index, "refusal" if isinstance(p, Refusal) else "text", p.text))
        elif not isinstance(p, Reasoning):  # another provider's server work (a web search call, its results)
            warn_once(self.warnings, f"{p.type} part dropped: Bedrock Converse clients cannot represent it")
        return b""

    def _server_block(self, i: int, p: Opaque) -> bytes:
        """A tool Bedrock ran (its call or its result), as Bedrock streams it: start, one delta, stop."""
        raw = p.raw
        if "toolUse" in raw and isinstance(raw["toolUse"], dict):
            tu = raw["toolUse"]
            start = {"toolUse": {k: v for k, v in tu.items() if k != "input"}}
            delta: dict[str, Any] = {"toolUse": {"input": dumps(tu.get("input", {})).decode()}}
        elif "toolResult" in raw and isinstance(raw["toolResult"], dict):
            tr = raw["toolResult"]
            start = {"toolResult": {k: v for k, v in tr.items() if k != "content"}}
            delta = {"toolResult": tr.get("content") or []}
        else:
            warn_once(self.warnings, f"Bedrock Converse {p.label or 'opaque'} block not streamed")
            return b""
        w, _ = self._wire(i)
        self._parts.pop(i, None)
        return b"".join((_ev("contentBlockStart", {"contentBlockIndex": w, "start": start}),
                         _ev("contentBlockDelta", {"contentBlockIndex": w, "delta": delta})))

    def _delta(self, ev: Delta) -> bytes:
        k = ev.kind
        if not ev.value:
            return b""
        if k == "text" or k == "refusal":
            self._has_text = True
            if k == "refusal":
                self._refusal.append(ev.value)
            w, _ = self._wire(ev.index)
            return _ev("contentBlockDelta", {"contentBlockIndex": w, "delta": {"text": ev.value}})
        if k == "arguments":
            w, _ = self._wire(ev.index)
            self._args.setdefault(ev.index, []).append(ev.value)
            return _ev("contentBlockDelta", {"contentBlockIndex": w, "delta": {"toolUse": {"input": ev.value}}})
        if k == "reasoning" or k == "summary":
            w, _ = self._wire(ev.index)
            return _ev("contentBlockDelta", {"contentBlockIndex": w,
                                             "delta": {"reasoningContent": {"text": ev.value}}})
        return b""

    def _block_end(self, ev: BlockEnd) -> bytes:
        i = ev.index
        start = self._parts.pop(i, None)
        final = ev.part if ev.part is not None else start
        out: list[bytes] = []
        if isinstance(final, ToolCall):
            # arguments only the block's end carried (an upstream that sends them whole at the end)
            sent = "".join(self._args.pop(i, ()))
            rest = final.arguments[len(sent):] if final.arguments.startswith(sent) else ""
            if rest:
                w, _ = self._wire(i)
                out.append(_ev("contentBlockDelta", {"contentBlockIndex": w, "delta": {"toolUse": {"input": rest}}}))
        elif isinstance(final, Text) and final.citations:
            warn_once(self.warnings, _CITATIONS_DROPPED)
        if isinstance(final, Reasoning):
            op = final.opaque or {}
            if op.get("protocol") == PROTOCOL:
                w, _ = self._wire(i)
                if final.redacted and isinstance(op.get("data"), str):
                    out.append(_ev("contentBlockDelta", {"contentBlockIndex": w,
                                                         "delta": {"reasoningContent": {"redactedContent": op["data"]}}}))
                elif isinstance(op.get("signature"), str):
                    out.append(_ev("contentBlockDelta", {"contentBlockIndex": w,
                                                         "delta": {"reasoningContent": {"signature": op["signature"]}}}))
            elif op or final.redacted:
                # another protocol's reasoning (its text already streamed): the envelope that
                # carries it back to its issuer goes in the signature
                b = reasoning_block(final, for_client=True)
                if b is not None:
                    w, _ = self._wire(i)
                    sig = b["reasoningContent"]["reasoningText"]["signature"]
                    out.append(_ev("contentBlockDelta", {"contentBlockIndex": w,
                                                         "delta": {"reasoningContent": {"signature": sig}}}))
        w2 = self._index.get(i)
        if w2 is not None:
            out.append(_ev("contentBlockStop", {"contentBlockIndex": w2}))
        return b"".join(out)

    def _stop(self, ev: Stop) -> bytes:
        out = [self._head()]
        stop = _effective_stop(ev.stop, self._has_tools, "".join(self._refusal) or None)
        if stop.reason is StopReason.REFUSAL and not self._has_text:
            w, _ = self._wire(-1)
            out.append(_ev("contentBlockDelta", {"contentBlockIndex": w,
                                                 "delta": {"text": stop.message or GENERIC_REFUSAL}}))
            out.append(_ev("contentBlockStop", {"contentBlockIndex": w}))
        reason, fields = stop_to_wire(stop, ev.stop_sequence, self._has_tools, self.warnings)
        ms: dict[str, Any] = {"stopReason": reason}
        if fields:
            ms["additionalModelResponseFields"] = fields
        out.append(_ev("messageStop", ms))
        md: dict[str, Any] = {"usage": usage_to_wire(self._usage), "metrics": {"latencyMs": 0}}
        guard = stop.detail.get("guardrail") if stop.detail else None
        if reason == "guardrail_intervened" and guard is not None:
            md["trace"] = {"guardrail": guard}
        out.append(_ev("metadata", md))
        self._done = True
        return b"".join(out)


CODEC = Codec(
    protocol=Protocol(PROTOCOL),
    name="converse",
    label="Amazon Bedrock Converse",
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
        stream_type=_facts.EVENTSTREAM_TYPE,
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
    stream_reader=es.EventStreamReader,
    stream_observes=stream_observes,
)
