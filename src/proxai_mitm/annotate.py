"""What every LLM flow carries after the addon saw it: metadata, comment, marker, one log line.

``flow.metadata["proxai"]`` holds plain JSON values only (mitmproxy serializes metadata with
tnetstring; a pydantic object or a set would make ``-w`` fail):

- ``client_protocol``, ``upstream_protocol``: protocol values (str) or None
- ``route``: the route name, or None when the flow passed through unrouted
- ``stop``: ``StopInfo.to_dict()`` or None (auxiliary endpoints, body not available)
- ``warnings``: list of str
- ``client_request``: the client's original request body (text, content-encoding decoded)
- ``upstream_response``: the raw upstream body (text; for streams the raw SSE)
- ``usage``: normalized token counts (``Usage.to_dict()``) or None

Present when known (recordings; replay uses them, see replay.py):

- ``upstream_status`` (int) and ``upstream_headers`` (list of [name, value]): what the upstream
  answered, before the addon rewrote status and headers for the client
- ``upstream_chunks``: ``[[offset_ms, n_bytes], ...]`` per upstream chunk of a stream (offsets from
  the response headers, byte counts of ``upstream_response`` in order)
- ``upstream_cut`` (bool): the upstream connection broke inside the response
- ``replay``: ``{"result": "hit" | "miss" | "forwarded", "flow": recorded flow id, "key": ...}`` on
  flows answered by ``proxai_replay``
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from proxai_core import Protocol, StopInfo, StopReason

logger = logging.getLogger(__name__)

__all__ = ["MARKERS", "METADATA_KEY", "FlowState", "annotate", "scrub"]

METADATA_KEY = "proxai"

#: one mitmproxy marker per non-ok reason (filter with ``~marker :no_entry:`` or by comment)
MARKERS: dict[StopReason, str] = {
    StopReason.REFUSAL: ":no_entry:",
    StopReason.MAX_OUTPUT: ":scissors:",
    StopReason.CONTEXT_FULL: ":package:",
    StopReason.PAUSED: ":pause_button:",
    StopReason.INTERRUPTED: ":electric_plug:",
    StopReason.OTHER: ":grey_question:",
}
_OUR_MARKERS = frozenset(MARKERS.values())


@dataclass(slots=True)
class FlowState:
    """Per-flow working state (kept on the flow object, never serialized)."""

    kind: str
    client_protocol: Protocol | None
    upstream_protocol: Protocol | None
    route: str | None = None
    client_text: str | None = None
    client_body: dict[str, Any] | None = None
    client_stream: bool = False
    client_model: str | None = None
    upstream_model: str | None = None
    warnings: list[str] = field(default_factory=list)
    stop: StopInfo | None = None
    usage: Any = None
    upstream_text: str | None = None
    handler: Any = None
    synthetic: bool = False
    translated: bool = False
    annotated: bool = False
    #: what the client asked for in a model list (route models) etc.
    extra: dict[str, Any] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    upstream_status: int | None = None
    upstream_headers: list[list[str]] | None = None
    upstream_chunks: list[list[float | int]] | None = None
    upstream_cut: bool | None = None
    replay: dict[str, Any] | None = None

    @property
    def model(self) -> str | None:
        if self.client_model and self.upstream_model and self.client_model != self.upstream_model:
            return f"{self.client_model} → {self.upstream_model}"
        return self.upstream_model or self.client_model


def scrub(text: str | None, secrets: tuple[str, ...]) -> str | None:
    if not text or not secrets:
        return text
    for s in secrets:
        if s and s in text:
            text = text.replace(s, "[REDACTED]")
    return text


def _usage_dict(usage: Any) -> dict[str, Any] | None:
    if usage is None:
        return None
    if isinstance(usage, dict):
        return usage
    to_dict = getattr(usage, "to_dict", None)
    return to_dict() if callable(to_dict) else None


def annotate(flow: Any, state: FlowState) -> None:
    """Write metadata, comment, marker and the INFO log line (once per flow)."""
    if state.annotated:
        return
    state.annotated = True
    sec = state.secrets
    stop = state.stop
    meta = {
        "client_protocol": state.client_protocol.value if state.client_protocol else None,
        "upstream_protocol": state.upstream_protocol.value if state.upstream_protocol else None,
        "route": state.route,
        "stop": stop.to_dict() if stop is not None else None,
        "warnings": [scrub(str(w), sec) for w in state.warnings],
        "client_request": scrub(state.client_text, sec),
        "upstream_response": scrub(state.upstream_text, sec),
        "usage": _usage_dict(state.usage),
    }
    if stop is not None and stop.message and sec:
        meta["stop"]["message"] = scrub(stop.message, sec)
    for key in ("upstream_status", "upstream_headers", "upstream_chunks", "upstream_cut", "replay"):
        value = getattr(state, key)
        if value is not None:
            meta[key] = value
    if state.upstream_headers is not None and sec:
        meta["upstream_headers"] = [[k, scrub(v, sec) or ""] for k, v in state.upstream_headers]
    flow.metadata[METADATA_KEY] = meta
    if stop is not None:
        flow.comment = scrub(stop.describe(), sec) or ""
        marker = MARKERS.get(stop.reason)
        if marker:
            flow.marked = marker
        elif flow.marked in _OUR_MARKERS:
            flow.marked = ""
    log_line(flow, state)


def log_line(flow: Any, state: FlowState) -> None:
    client = state.client_protocol.value if state.client_protocol else "?"
    upstream = state.upstream_protocol.value if state.upstream_protocol else "?"
    route = f"route {state.route}" if state.route else "pass-through"
    if state.replay is not None and state.replay.get("result") in ("hit", "miss", "forwarded"):
        route += f", replay {state.replay['result']}"
    if state.stop is not None:
        what = state.stop.describe()
    elif state.kind == "generate":
        what = "stop unknown (no response body)"
    elif state.kind == "websocket":
        what = "WebSocket upgrade refused (426): the client falls back to HTTP streaming"
    else:
        what = state.kind
    if len(what) > 240:
        what = what[:239] + "…"
    status = flow.response.status_code if getattr(flow, "response", None) is not None else "-"
    extra = {}
    peer = getattr(getattr(flow, "client_conn", None), "peername", None)
    if peer:
        extra["client"] = peer
    logger.info(
        "proxai: %s → %s (%s), %s, %s: %s",
        client,
        upstream,
        route,
        state.model or "model ?",
        status,
        scrub(what, state.secrets),
        extra=extra,
    )
