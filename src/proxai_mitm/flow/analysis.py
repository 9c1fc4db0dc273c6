"""What a response body says, in neutral terms, and compact neutral forms for exports.

Used by the report / export and by the contentview; never by the live hooks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proxai_core import Exchange, Protocol, StopInfo, error_stop_info
from proxai_core import neutral as n
from proxai_core.errors import parse_error

from ..wire.protocols import is_error_body, json_or_none, looks_like_sse, sniff_protocol, sniff_sse

__all__ = ["BodyInfo", "analyze_response", "compact_part", "compact_request"]


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
        protocol = sniff_sse(data) if sse else sniff_protocol(data, request=False)
    if sse:
        return _analyze_sse(data, protocol)
    obj = json_or_none(data)
    bad_status = status is not None and status >= 400
    if obj is None:
        if status is not None and status >= 400:
            return BodyInfo(protocol, "error", error=parse_error(status, data),
                            stop=error_stop_info(status, data))
        return BodyInfo(protocol, "text", warnings=["body is neither JSON nor SSE"])
    if bad_status or is_error_body(obj, protocol):
        return BodyInfo(protocol, "error", error=parse_error(status, data),
                        stop=error_stop_info(status, data))
    info = BodyInfo(protocol, "json")
    if protocol is None:
        info.warnings.append("unknown protocol")
        return info
    return _observe(info, protocol, data, "application/json")


def _analyze_sse(data: bytes, protocol: Protocol | None) -> BodyInfo:
    info = BodyInfo(protocol, "sse")
    if protocol is None:
        info.warnings.append("unknown protocol")
        return info
    return _observe(info, protocol, data, "text/event-stream")


def _observe(info: BodyInfo, protocol: Protocol, data: bytes, content_type: str) -> BodyInfo:
    """StopInfo, usage, model and the accumulated parts exactly as the addon's exchange observes them."""
    ex = Exchange(protocol, None, stream=False, warnings=info.warnings, keep_response=True)
    try:
        ex.respond(protocol, 200, content_type)
        ex.complete(data)
    except Exception as e:  # noqa: BLE001 - reports must survive odd bodies
        info.warnings.append(f"could not decode the {protocol.value} response: {e}")
        return info
    info.response, info.stop, info.usage, info.model = ex.response, ex.stop, ex.usage, ex.model
    info.error, info.events = ex.error, ex.events
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
