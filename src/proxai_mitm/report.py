"""Reports and exports of recorded LLM exchanges, with or without the addon's metadata.

A flow recorded through the addon carries ``flow.metadata["proxai"]`` (client/upstream protocol,
route, StopInfo, usage, warnings, the client's original request, the raw upstream response). A plain
mitmproxy capture has none of it: then everything is derived on the fly with the same logic the
addon uses (protocol from the path, StopInfo from the JSON body or the SSE stream), so reports work
on any recording of Chat Completions, Responses or Anthropic Messages traffic.

Public API (wired into the addon as commands ``proxai.report`` / ``proxai.export``, and into
``python -m proxai_mitm report|export``):

* :func:`rows` / :func:`format_table` / :func:`report_command`
* :func:`exchange` / :func:`export_jsonl` / :func:`export_command`
* :func:`read_flows`, :func:`protocol_from_path`, :func:`sniff_protocol`, :func:`analyze_response`
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from proxai_core import Protocol, StopInfo, StreamTranslator, classify_stop, decode_request, decode_response
from proxai_core import neutral as n
from proxai_core.api import error_stop_info, stop_of_error
from proxai_core.collect import Collector
from proxai_core.errors import parse_error
from proxai_core.sse import SSEReader

__all__ = [
    "SHORT",
    "BodyInfo",
    "analyze_response",
    "compact_part",
    "compact_request",
    "exchange",
    "export_command",
    "export_jsonl",
    "format_table",
    "looks_like_sse",
    "protocol_from_path",
    "read_flows",
    "report_command",
    "rows",
    "sniff_protocol",
]

#: Short protocol names for tables.
SHORT = {
    Protocol.CHAT: "chat",
    Protocol.RESPONSES: "responses",
    Protocol.ANTHROPIC: "anthropic",
}


# ----------------------------------------------------------------------------- detection
def protocol_from_path(path: str | None) -> Protocol | None:
    """The protocol an LLM endpoint path speaks (``/v1/chat/completions``, OpenRouter
    ``/api/v1/...``, Azure ``/openai/deployments/x/chat/completions?api-version=...``,
    ``/v1/responses``, ``/v1/messages``); None for anything else (``/messages/count_tokens``,
    ``/models``, ``/responses/{id}``...)."""
    if not path:
        return None
    p = path.split("?", 1)[0].split("#", 1)[0]
    if "://" in p:
        p = "/" + p.split("://", 1)[1].partition("/")[2]
    p = p.rstrip("/")
    if p.endswith("/chat/completions"):
        return Protocol.CHAT
    if p.endswith("/responses"):
        return Protocol.RESPONSES
    if p.endswith("/messages"):
        return Protocol.ANTHROPIC
    return None


def looks_like_sse(data: bytes, content_type: str | None = None) -> bool:
    """A server-sent-events body: the content type says so (and the body is not plain JSON), or the
    body starts like one."""
    head = data[:200].lstrip()
    if head.startswith((b"{", b"[")):
        return False
    if content_type and "event-stream" in content_type.lower():
        return True
    return head.startswith((b"event:", b"data:", b":", b"id:", b"retry:"))


def _json(data: bytes | str | None) -> Any:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if not data.strip():
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


_CHAT_REQ_KEYS = {"max_completion_tokens", "n", "response_format", "stream_options", "logprobs",
                  "frequency_penalty", "presence_penalty", "logit_bias", "seed", "functions",
                  "reasoning_effort", "modalities", "audio", "prediction", "web_search_options"}
_ANTHROPIC_REQ_KEYS = {"system", "stop_sequences", "thinking", "top_k", "anthropic_version", "mcp_servers",
                       "container", "context_management"}
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document", "image",
                     "server_tool_use", "web_search_tool_result", "search_result"}
_CHAT_BLOCKS = {"image_url", "input_audio", "file", "refusal"}


def _sniff_request(obj: dict[str, Any]) -> Protocol | None:
    if "input" in obj or "instructions" in obj or "previous_response_id" in obj or "conversation" in obj:
        return Protocol.RESPONSES
    msgs = obj.get("messages")
    if not isinstance(msgs, list):
        return None
    th = obj.get("thinking")
    if isinstance(th, dict) and not (th.get("type") == "enabled" and "budget_tokens" in th
                                     or th.get("type") in ("adaptive", "disabled")):
        return Protocol.CHAT  # OpenAI-compatible providers' own "thinking" switches (Z.ai, ...)
    if _ANTHROPIC_REQ_KEYS & obj.keys():
        return Protocol.ANTHROPIC
    if _CHAT_REQ_KEYS & obj.keys():
        return Protocol.CHAT
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("system", "developer", "tool", "function") or "tool_calls" in m:
            return Protocol.CHAT
        content = m.get("content")
        if isinstance(content, list):
            for b in content:
                t = b.get("type") if isinstance(b, dict) else None
                if t in _ANTHROPIC_BLOCKS:
                    return Protocol.ANTHROPIC
                if t in _CHAT_BLOCKS or (isinstance(t, str) and t.endswith("_url")):
                    return Protocol.CHAT
    tools = obj.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        t0 = tools[0]
        if "function" in t0 or t0.get("type") == "function":
            return Protocol.CHAT
        if "input_schema" in t0 or "name" in t0:
            return Protocol.ANTHROPIC
    # ambiguous (plain text messages): max_tokens is required by Anthropic, optional (and legacy) in Chat
    return Protocol.ANTHROPIC if "max_tokens" in obj else Protocol.CHAT


def _sniff_response(obj: dict[str, Any]) -> Protocol | None:
    if "choices" in obj or obj.get("object") in ("chat.completion", "chat.completion.chunk"):
        return Protocol.CHAT
    if obj.get("object") == "response" or ("output" in obj and "status" in obj):
        return Protocol.RESPONSES
    if obj.get("type") in ("message", "error") or "stop_reason" in obj:
        return Protocol.ANTHROPIC
    if "error" in obj:
        return Protocol.CHAT  # an OpenAI-shaped error; any OpenAI protocol reads it the same
    return None


def _sniff_sse(data: bytes) -> Protocol | None:
    head = data[:4000]
    if b"event: message_start" in head or b'"type":"message_start"' in head or b"event:message_start" in head:
        return Protocol.ANTHROPIC
    if b'"type":"response.' in head or b"event: response." in head or b'"type": "response.' in head:
        return Protocol.RESPONSES
    if b"chat.completion.chunk" in head or b'"choices"' in head:
        return Protocol.CHAT
    if b"event: error" in head or b"event: ping" in head:
        return Protocol.ANTHROPIC
    return None


def sniff_protocol(data: bytes | dict[str, Any] | None, *, request: bool | None = None) -> Protocol | None:
    """Guess the protocol of a body from its shape. ``request`` True/False restricts the guess to a
    request / a response; None tries both (response shapes first)."""
    if data is None:
        return None
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data)
        if looks_like_sse(data):
            return None if request else _sniff_sse(data)
        obj = _json(data)
    else:
        obj = data
    if not isinstance(obj, dict):
        return None
    if request is True:
        return _sniff_request(obj)
    if request is False:
        return _sniff_response(obj)
    looks_request = ("messages" in obj or "input" in obj) and "model" in obj and not (
        "choices" in obj or "output" in obj or "stop_reason" in obj)
    return _sniff_request(obj) if looks_request else (_sniff_response(obj) or _sniff_request(obj))


def is_error_body(obj: Any, protocol: Protocol | None) -> bool:
    """An HTTP error body (any shape), as opposed to a model response."""
    if not isinstance(obj, dict):
        return True
    if obj.get("type") == "error":
        return True
    if protocol is Protocol.ANTHROPIC:
        return "error" in obj and "content" not in obj
    if protocol is Protocol.CHAT or protocol is None:
        return "error" in obj and not obj.get("choices")
    return "error" in obj and "output" not in obj


# ----------------------------------------------------------------------------- analysis
@dataclass
class BodyInfo:
    """What one response body says, in neutral terms."""

    protocol: Protocol | None
    kind: str  # "json" | "sse" | "error" | "empty" | "text"
    response: n.Response | None = None
    stop: StopInfo | None = None
    usage: n.Usage | None = None
    model: str | None = None
    error: n.Error | None = None
    warnings: list[str] = field(default_factory=list)
    events: int = 0


def analyze_response(data: bytes | str | None, protocol: Protocol | None, *, status: int | None = None,
                     content_type: str | None = None) -> BodyInfo:
    """Decode a complete JSON response, an error body, or a (possibly cut) SSE stream. Never raises:
    what could not be decoded is reported in ``warnings``."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if not data or not data.strip():
        info = BodyInfo(protocol, "empty")
        if status is not None and status >= 400:
            info.error = parse_error(status, b"")
            info.stop = error_stop_info(status, b"")
        return info
    sse = looks_like_sse(data, content_type)
    if protocol is None:
        protocol = _sniff_sse(data) if sse else sniff_protocol(data, request=False)
    if sse:
        return _analyze_sse(data, protocol)
    obj = _json(data)
    bad_status = status is not None and status >= 400
    if obj is None:
        if bad_status:
            return BodyInfo(protocol, "error", error=parse_error(status, data),
                            stop=error_stop_info(status, data))
        return BodyInfo(protocol, "text", warnings=["body is neither JSON nor SSE"])
    if bad_status or is_error_body(obj, protocol):
        return BodyInfo(protocol, "error", error=parse_error(status, data),
                        stop=error_stop_info(status, data))  # type: ignore[arg-type]
    info = BodyInfo(protocol, "json")
    if protocol is None:
        info.warnings.append("unknown protocol")
        return info
    try:
        resp = decode_response(obj, protocol, info.warnings)
    except Exception as e:  # noqa: BLE001 - reports must survive odd bodies
        info.warnings.append(f"could not decode the {protocol.value} response: {e}")
        return info
    info.response = resp
    info.model = resp.model
    info.usage = resp.usage
    err = resp.extra.get("error")
    if isinstance(err, n.Error):
        info.error = err
        info.stop = stop_of_error(err)
    else:
        info.stop = resp.stop or classify_stop(None)
    return info


def _analyze_sse(data: bytes, protocol: Protocol | None) -> BodyInfo:
    info = BodyInfo(protocol, "sse")
    if protocol is None:
        info.warnings.append("unknown protocol")
        return info
    # StopInfo / usage / model exactly as the addon's stream translator observes them
    try:
        tr = StreamTranslator(protocol, protocol)
        tr.feed(data)
        tr.close()
        info.stop, info.usage, info.model, info.error = tr.stop, tr.usage, tr.model, tr.error
        info.warnings.extend(tr.warnings)
    except Exception as e:  # noqa: BLE001
        info.warnings.append(f"stream translator failed: {e}")
    # the parts, accumulated
    try:
        from proxai_core.codecs import codec

        w: list[str] = []
        reader = SSEReader()
        dec = codec(protocol).StreamDecoder(w)
        col = Collector()
        events = reader.feed(data) + reader.close()
        info.events = len(events)
        for name, payload in events:
            for ev in dec.feed(name, payload):
                col.add(ev)
        if not dec.done:
            for ev in dec.finish():
                col.add(ev)
        resp = col.finish()
        info.response = resp
        if info.stop is None:
            info.stop = resp.stop
        if info.usage is None:
            info.usage = resp.usage
        if info.model is None:
            info.model = resp.model
        if info.error is None:
            info.error = col.error
    except Exception as e:  # noqa: BLE001
        info.warnings.append(f"could not accumulate the {protocol.value} stream: {e}")
    return info


# ----------------------------------------------------------------------------- compact neutral
def _args(text: str) -> Any:
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def _size(data: str | None) -> int | None:
    return len(data) if data else None


def compact_part(p: Any) -> dict[str, Any]:
    """One neutral part as a small JSON object (no base64 data, no opaque payloads)."""
    if isinstance(p, n.Text):
        d: dict[str, Any] = {"type": "text", "text": p.text}
        if p.citations:
            d["citations"] = [{k: c.get(k) for k in ("type", "url", "title", "cited_text") if c.get(k)}
                              for c in p.citations]
        return d
    if isinstance(p, n.Refusal):
        return {"type": "refusal", "text": p.text}
    if isinstance(p, n.ToolCall):
        d = {"type": "tool_call", "id": p.id, "name": p.name,
             "arguments": p.arguments if p.kind == "custom" else _args(p.arguments)}
        if p.kind != "function":
            d["kind"] = p.kind
        return d
    if isinstance(p, n.ToolResult):
        d = {"type": "tool_result", "call_id": p.call_id,
             "content": [compact_part(c) for c in p.content]}
        if p.is_error:
            d["is_error"] = True
        return d
    if isinstance(p, n.Reasoning):
        d = {"type": "reasoning", "text": p.text}
        if p.redacted:
            d["redacted"] = True
        if p.opaque:
            d["opaque"] = {k: (f"<{len(v)} chars>" if isinstance(v, str) and len(v) > 40 else v)
                           for k, v in p.opaque.items()}
        return d
    if isinstance(p, n.Image):
        d = {"type": "image", "source": p.source, "media_type": p.media_type}
        if p.url and not p.url.startswith("data:"):
            d["url"] = p.url
        if p.file_id:
            d["file_id"] = p.file_id
        size = _size(p.data) or (_size(p.url) if p.url and p.url.startswith("data:") else None)
        if size:
            d["chars"] = size
        return d
    if isinstance(p, n.Document):
        d = {"type": "document", "source": p.source, "media_type": p.media_type}
        for k in ("url", "file_id", "filename", "title"):
            v = getattr(p, k)
            if v:
                d[k] = v
        if p.source == "text" and p.data:
            d["text"] = p.data
        elif p.data:
            d["chars"] = len(p.data)
        return d
    if isinstance(p, n.Opaque):
        return {"type": "opaque", "protocol": p.protocol, "label": p.label or str(p.raw.get("type", ""))}
    return {"type": type(p).__name__.lower()}


def compact_request(req: n.Request) -> dict[str, Any]:
    out: dict[str, Any] = {"model": req.model}
    if req.system:
        out["system"] = "\n\n".join(t.text for t in req.system)
    out["messages"] = [{"role": m.role, "content": [compact_part(p) for p in m.parts]} for m in req.messages]
    if req.tools:
        out["tools"] = [t.name for t in req.tools]
    if req.tool_choice is not None and req.tool_choice.mode != "auto":
        out["tool_choice"] = req.tool_choice.name or req.tool_choice.mode
    if req.max_output_tokens is not None:
        out["max_output_tokens"] = req.max_output_tokens
    out["stream"] = req.stream
    return out


# ----------------------------------------------------------------------------- flows
def _meta(flow: Any) -> dict[str, Any]:
    md = getattr(flow, "metadata", None) or {}
    m = md.get("proxai")
    return m if isinstance(m, dict) else {}


def _as_protocol(v: Any) -> Protocol | None:
    if isinstance(v, Protocol):
        return v
    try:
        return Protocol(v) if v else None
    except ValueError:
        return None


def _content(msg: Any) -> bytes | None:
    if msg is None or getattr(msg, "raw_content", None) is None:
        return None
    try:
        return msg.get_content(strict=False)
    except Exception:  # noqa: BLE001
        return msg.raw_content


def _text(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass")
    if isinstance(v, (dict, list)):
        return orjson.dumps(v)
    return None


def _iso(ts: float | None) -> str | None:
    if not ts:
        return None
    return _dt.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def is_llm_flow(flow: Any) -> bool:
    req = getattr(flow, "request", None)
    if req is None:
        return False
    if _meta(flow).get("client_protocol") or _meta(flow).get("upstream_protocol"):
        return True
    return req.method.upper() == "POST" and protocol_from_path(req.path) is not None


def _usage_dict(u: Any) -> dict[str, Any] | None:
    if u is None:
        return None
    if isinstance(u, n.Usage):
        return u.to_dict()
    if isinstance(u, dict):
        return dict(u)
    return None


def _summary(flow: Any, *, full: bool) -> dict[str, Any] | None:
    """The normalized exchange of one flow (metadata first, derived where missing)."""
    if not is_llm_flow(flow):
        return None
    req = flow.request
    resp = getattr(flow, "response", None)
    meta = _meta(flow)
    path_proto = protocol_from_path(req.path)
    upstream = _as_protocol(meta.get("upstream_protocol")) or path_proto
    client = _as_protocol(meta.get("client_protocol")) or upstream
    req_body = _content(req)
    client_body = _text(meta.get("client_request")) or req_body
    client_obj = _json(client_body)
    upstream_obj = _json(req_body)

    status = resp.status_code if resp is not None else None
    # the upstream's own response, when the addon kept it; else what the client got
    raw_upstream = _text(meta.get("upstream_response"))
    if raw_upstream is not None:
        body, body_proto = raw_upstream, upstream
        status_for_body = meta.get("upstream_status", status)
    else:
        body, body_proto = _content(resp), (client if meta else (path_proto or client))
        status_for_body = status
    ctype = resp.headers.get("content-type") if resp is not None else None

    info: BodyInfo | None = None
    need_info = full or not meta.get("stop") or meta.get("usage") is None
    if resp is not None and body is not None and need_info:
        info = analyze_response(body, body_proto, status=status_for_body,
                                content_type=ctype if raw_upstream is None else None)

    stop: dict[str, Any] | None
    if isinstance(meta.get("stop"), dict):
        stop = meta["stop"]
    elif info is not None and info.stop is not None:
        stop = info.stop.to_dict()
    elif getattr(flow, "error", None) is not None:
        stop = stop_of_error(n.Error(kind="interrupted", message=str(flow.error.msg))).to_dict()
    else:
        stop = None
    usage = _usage_dict(meta.get("usage")) if meta.get("usage") is not None else (
        _usage_dict(info.usage) if info is not None else None)

    client_model = client_obj.get("model") if isinstance(client_obj, dict) else None
    upstream_model = upstream_obj.get("model") if isinstance(upstream_obj, dict) else None
    model = meta.get("model") or client_model or upstream_model or (info.model if info else None)
    stream = bool(client_obj.get("stream")) if isinstance(client_obj, dict) else None

    warnings = list(meta.get("warnings") or [])
    if info is not None and not meta:
        warnings.extend(info.warnings)

    out: dict[str, Any] = {
        "id": flow.id,
        "time": _iso(req.timestamp_start or getattr(flow, "timestamp_created", None)),
        "timestamp": req.timestamp_start,
        "method": req.method,
        "host": req.pretty_host,
        "path": req.path.split("?", 1)[0],
        "client_protocol": client.value if client else None,
        "upstream_protocol": upstream.value if upstream else None,
        "route": meta.get("route"),
        "model": model,
        "upstream_model": upstream_model if upstream_model != model else None,
        "stream": stream,
        "status": status,
        "stop": stop,
        "usage": usage,
        "warnings": warnings,
        "annotation": "metadata" if meta.get("stop") else "derived",
    }
    if getattr(flow, "error", None) is not None:
        out["error"] = str(flow.error.msg)
    if not full:
        return out
    # the key proxai_replay matches this exchange by (the request as sent upstream)
    from .replay import canonical_key

    out["replay_key"] = canonical_key(req.method, req.path, req_body or b"")

    # request conversation: the client's original request, in its protocol
    conv: dict[str, Any] | None = None
    for obj, proto in ((client_obj, client), (upstream_obj, upstream)):
        if isinstance(obj, dict) and proto is not None:
            try:
                conv = compact_request(decode_request(obj, proto, []))
                break
            except Exception as e:  # noqa: BLE001
                out["warnings"].append(f"could not decode the {proto.value} request: {e}")
    out["request"] = conv
    if info is not None and info.response is not None:
        out["response"] = {"id": info.response.id, "model": info.response.model,
                           "parts": [compact_part(p) for p in info.response.parts]}
    elif info is not None and info.error is not None:
        out["response"] = {"error": {"kind": info.error.kind, "message": info.error.message,
                                     "status": info.error.status}}
    else:
        out["response"] = None
    t0 = req.timestamp_start
    timing: dict[str, Any] = {"start": t0}
    if resp is not None and t0:
        if resp.timestamp_start:
            timing["first_byte_ms"] = round((resp.timestamp_start - t0) * 1000, 1)
        if resp.timestamp_end:
            timing["duration_ms"] = round((resp.timestamp_end - t0) * 1000, 1)
    out["timing"] = timing
    return out


def exchange(flow: Any) -> dict[str, Any] | None:
    """The normalized exchange of one flow (None when it is not an LLM flow)."""
    return _summary(flow, full=True)


def _short(p: str | None) -> str:
    pr = _as_protocol(p)
    return SHORT.get(pr, p or "?") if pr else (p or "?")


def rows(flows: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per LLM exchange: time, client → upstream protocol, model, reason, category,
    input/output tokens, status, route, url path."""
    out = []
    for f in flows:
        try:
            s = _summary(f, full=False)
        except Exception as e:  # noqa: BLE001 - one odd flow must not kill the report
            s = {"id": getattr(f, "id", None), "time": None, "client_protocol": None,
                 "upstream_protocol": None, "model": None, "stop": None, "usage": None, "status": None,
                 "route": None, "path": getattr(getattr(f, "request", None), "path", None),
                 "warnings": [f"report failed: {e}"]}
        if s is None:
            continue
        stop = s.get("stop") or {}
        usage = s.get("usage") or {}
        inp = usage.get("input_total")
        if inp is None:
            inp = usage.get("input")
        model = s.get("model")
        if s.get("upstream_model"):
            model = f"{model} → {s['upstream_model']}" if model else s["upstream_model"]
        out.append({
            "time": s.get("time"),
            "client_protocol": s.get("client_protocol"),
            "upstream_protocol": s.get("upstream_protocol"),
            "model": model,
            "reason": stop.get("reason"),
            "category": stop.get("category"),
            "message": stop.get("message"),
            "input_tokens": inp,
            "output_tokens": usage.get("output"),
            "status": s.get("status"),
            "route": s.get("route"),
            "path": s.get("path"),
            "id": s.get("id"),
        })
    return out


_COLUMNS = (
    ("time", "time"),
    ("protocols", "client → upstream"),
    ("model", "model"),
    ("reason", "reason"),
    ("category", "category"),
    ("input_tokens", "in"),
    ("output_tokens", "out"),
    ("status", "status"),
    ("route", "route"),
    ("path", "path"),
)
_RIGHT = {"input_tokens", "output_tokens", "status"}


def format_table(table_rows: Sequence[dict[str, Any]]) -> str:
    """An aligned plain-text table of :func:`rows` output."""
    if not table_rows:
        return "no LLM flows"
    cells: list[list[str]] = []
    for r in table_rows:
        line = []
        for key, _ in _COLUMNS:
            if key == "protocols":
                a, b = _short(r.get("client_protocol")), _short(r.get("upstream_protocol"))
                v = a if a == b else f"{a} → {b}"
            else:
                v = r.get(key)
                v = "-" if v is None or v == "" else str(v)
            if key == "model" and len(v) > 48:
                v = v[:47] + "…"
            line.append(v)
        cells.append(line)
    heads = [h for _, h in _COLUMNS]
    widths = [max(len(heads[i]), *(len(c[i]) for c in cells)) for i in range(len(heads))]

    def fmt(vals: list[str]) -> str:
        parts = []
        for i, v in enumerate(vals):
            key = _COLUMNS[i][0]
            parts.append(v.rjust(widths[i]) if key in _RIGHT else v.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    lines = [fmt(heads), "  ".join("-" * w for w in widths)]
    lines += [fmt(c) for c in cells]
    reasons: dict[str, int] = {}
    for r in table_rows:
        reasons[r.get("reason") or "?"] = reasons.get(r.get("reason") or "?", 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    lines.append(f"{len(table_rows)} exchange(s): {summary}")
    return "\n".join(lines)


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS)


def export_jsonl(flows: Iterable[Any], path: str | Path) -> int:
    """Write one JSON line per LLM exchange (:func:`exchange`) to ``path``; returns the count."""
    count = 0
    with open(Path(path).expanduser(), "wb") as fh:
        for f in flows:
            try:
                ex = exchange(f)
            except Exception as e:  # noqa: BLE001
                ex = {"id": getattr(f, "id", None), "warnings": [f"export failed: {e}"]}
            if ex is None:
                continue
            fh.write(_dumps(ex) + b"\n")
            count += 1
    return count


def report_command(flows: Sequence[Any]) -> str:
    """Body of the addon command ``proxai.report``."""
    return format_table(rows(flows))


def export_command(flows: Sequence[Any], path: str) -> str:
    """Body of the addon command ``proxai.export``."""
    count = export_jsonl(flows, path)
    return f"exported {count} LLM exchange(s) to {path}"


def read_flows(path: str | Path) -> list[Any]:
    """HTTP flows of a .mitm file, or of every ``*.mitm`` file in a folder (sorted by name)."""
    from mitmproxy import http, io
    from mitmproxy.exceptions import FlowReadException

    p = Path(path).expanduser()
    files = sorted(p.rglob("*.mitm")) if p.is_dir() else [p]
    out: list[Any] = []
    for fp in files:
        with open(fp, "rb") as fh:
            try:
                for f in io.FlowReader(fh).stream():
                    if isinstance(f, http.HTTPFlow):
                        out.append(f)
            except FlowReadException as e:
                raise ValueError(f"{fp}: {e}") from e
    return out
