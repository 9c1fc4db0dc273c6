"""The "LLM" contentview: an LLM request or response read as a conversation.

Renders OpenAI Chat Completions, OpenAI Responses and Anthropic Messages bodies — requests, complete
JSON responses, error bodies and SSE streams (accumulated) — as a person reads them: system /
instructions, each message with its role, text, images and documents as one-line placeholders, tool
definitions (names), tool calls with pretty-printed arguments, tool results, reasoning (signatures and
encrypted blobs elided), refusals highlighted (``⛔ REFUSAL: …``), the StopInfo line
(``stop: refusal (cyber): …``) and the usage line.

The protocol comes from the flow's ``metadata["proxai"]`` when the addon annotated it (the saved
request is the *upstream* request, the saved response body is what the *client* received), else from
the request path (``/chat/completions``, ``/responses``, ``/messages``), else from the body's shape.
It is auto-selected (priority above the JSON view) for LLM flows only.

Registered by :func:`register` (the addon calls it from ``load``), never at import time.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mitmproxy import contentviews, http

from ..flow.analysis import analyze_response
from ..flow.record import FlowRecord
from ..wire.protocols import TITLES, looks_like_response, looks_like_sse, protocol_from_path, sniff_protocol
from .render import render_request, render_request_lenient, render_response
from .views import ClientRequestView, UpstreamResponseView, header

logger = logging.getLogger(__name__)

__all__ = ["LLMContentview", "register", "render"]


# ----------------------------------------------------------------------------- dispatch
def _record(metadata: contentviews.Metadata) -> FlowRecord | None:
    f = getattr(metadata, "flow", None)
    return FlowRecord.of(f) if f is not None else None


def _is_request(data: bytes, metadata: contentviews.Metadata) -> bool:
    msg = getattr(metadata, "http_message", None)
    if isinstance(msg, http.Request):
        return True
    if isinstance(msg, http.Response):
        return False
    if looks_like_sse(data, metadata.content_type):
        return False
    obj = _loads(data)
    if not isinstance(obj, dict):
        return False
    if looks_like_response(obj):
        return False
    return "messages" in obj or "input" in obj or "instructions" in obj


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def render(data: bytes, metadata: contentviews.Metadata) -> str:
    """The LLM rendering of one body (may raise; :class:`LLMContentview` catches)."""
    rec = _record(metadata)
    flow = getattr(metadata, "flow", None)
    if not data or not data.strip():
        return _with_header(flow, rec, "(empty body)\n")
    req_obj = getattr(flow, "request", None) if flow is not None else None
    path_proto = protocol_from_path(req_obj.path) if req_obj is not None else None
    is_req = _is_request(data, metadata)
    if is_req:
        obj = _loads(data)
        if not isinstance(obj, dict):
            raise ValueError("the request body is not a JSON object")
        proto = (rec.upstream_protocol if rec else None) or path_proto or sniff_protocol(obj, request=True)
        if proto is None:
            raise ValueError("not an LLM request")
        note = None
        client = rec.client_protocol if rec else None
        if client is not None and client is not proto:
            note = (f"(sent upstream; translated from the client's {TITLES[client]} request — "
                    "the view \"LLM client request\" shows it)")
        try:
            body = render_request(obj, proto, note)
        except Exception as first:  # noqa: BLE001 - a shape guess may be wrong; else be lenient
            body = render_request_lenient(obj, proto, first)
        return _with_header(flow, rec, body)
    msg = getattr(metadata, "http_message", None)
    status = msg.status_code if isinstance(msg, http.Response) else None
    proto = (rec.client_protocol if rec else None) or path_proto
    info = analyze_response(data, proto, status=status, content_type=metadata.content_type)
    if info.response is None and info.kind in ("json", "sse") and proto is not None:
        alt_info = analyze_response(data, None, status=status, content_type=metadata.content_type)
        if alt_info.response is not None:
            info = alt_info
    if rec is not None and rec.usage is not None:  # the upstream's counts (a translated stream may carry none)
        info.usage = rec.usage.usage()
    elif rec is not None and rec.client_protocol is not rec.upstream_protocol and info.usage is not None \
            and not (info.usage.input_total or info.usage.output):
        info.usage = None  # a translated stream's placeholder zeros: the counts are unknown, not 0
    out = render_response(info, status)
    tail: list[str] = []
    if rec is not None:
        cp, up = rec.client_protocol, rec.upstream_protocol
        if cp and up:
            route = f" · route {rec.route}" if rec.route else ""
            tail.append(f"proxai: client {cp.value} ← upstream {up.value}{route}")
        upstream_stop = rec.stop_info()
        if upstream_stop is not None and info.stop is not None and upstream_stop.describe() != info.stop.describe():
            tail.append(f"upstream stop: {upstream_stop.describe()}")
        if rec.warnings:
            tail.append("proxai warnings: " + "; ".join(rec.warnings))
    if tail:
        out += "\n" + "\n".join(tail) + "\n"
    return _with_header(flow, rec, out)


def _with_header(flow: Any, rec: FlowRecord | None, body: str) -> str:
    """The summary header (views.py) above the conversation."""
    head = header(flow, rec)
    return "\n".join(head) + "\n\n" + body if head else body


class LLMContentview(contentviews.Contentview):
    """mitmproxy 12 contentview "LLM" (see the module docstring)."""

    @property
    def name(self) -> str:
        return "LLM"

    @property
    def syntax_highlight(self) -> contentviews.SyntaxHighlight:
        return "none"

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        try:
            return render(data, metadata)
        except Exception as e:
            logger.debug("LLM view failed", exc_info=True)
            text = data.decode("utf-8", "replace")
            obj = _loads(data)
            if obj is not None:
                text = json.dumps(obj, indent=2, ensure_ascii=False)
            if len(text) > 200_000:
                text = text[:200_000] + "\n… (truncated)"
            return f"[LLM view: could not read this body as an LLM exchange: {type(e).__name__}: {e}]\n\n{text}\n"

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        try:
            if not data:
                return -1
            flow = getattr(metadata, "flow", None)
            req = getattr(flow, "request", None) if flow is not None else None
            head = data[:64].lstrip()
            bodyish = head.startswith((b"{", b"[")) or looks_like_sse(data, metadata.content_type)
            if req is not None:
                rec = _record(metadata)
                if rec is not None and (rec.client_protocol or rec.upstream_protocol):
                    return 3 if bodyish else -1
                if req.method.upper() == "POST" and protocol_from_path(req.path) is not None:
                    return 2 if bodyish else -1
                return -1
            ct = (metadata.content_type or "").lower()
            if "event-stream" in ct and sniff_protocol(data, request=False) is not None:
                return 1.5
            return -1
        except Exception:  # noqa: BLE001
            return -1


_registered: LLMContentview | None = None
_others: list[contentviews.Contentview] = []


def register() -> LLMContentview:
    """Add the view to mitmproxy's registry (idempotent); returns the instance."""
    global _registered
    if _registered is None:
        _registered = LLMContentview()
    if contentviews.registry.get("llm") is not _registered:
        contentviews.add(_registered)
    if not _others:
        _others.extend((ClientRequestView(), UpstreamResponseView()))
    for v in _others:  # the other side of a translation, chosen by hand
        if contentviews.registry.get(v.name.lower()) is not v:
            contentviews.add(v)
    return _registered
