"""Per-flow working state while a flow is live (never serialized), and how it becomes the record.

The routing addon creates a :class:`FlowState` for each LLM flow it recognizes; the replay, probe,
translation and annotation addons fill it in; :func:`to_record` turns it into the
:class:`~.record.FlowRecord` stored in ``flow.metadata["proxai"]`` (once, at the end of the flow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxai_core import Exchange, Plan, Protocol, StopInfo
from proxai_core.neutral import Usage

from ..redaction.scrubber import scrub_secrets
from .record import SCHEMA_VERSION, read_body

if TYPE_CHECKING:
    from ..wire.routing import Endpoint
    from ..wire.streaming import ErrorOnce, StreamHandler

__all__ = ["FlowState", "flow_state", "open_exchange", "read_body", "record_dict", "scrub", "set_flow_state"]

_STATE_ATTR = "_proxai_state"


@dataclass(slots=True)
class FlowState:
    """Working values of one live LLM flow."""

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
    usage: Usage | None = None
    upstream_text: str | None = None
    #: the StreamHandler installed as ``flow.response.stream`` (or the one-frame error callable)
    handler: StreamHandler | ErrorOnce | None = None
    synthetic: bool = False
    #: a count's input tokens (the upstream's counter, or the local estimate)
    count_tokens: int | None = None
    #: the count was estimated locally (the upstream has no counter)
    estimate: bool = False
    translated: bool = False
    annotated: bool = False
    #: what translation ran (decided once by translate.plan)
    translation: Plan | None = None
    #: the recognized endpoint
    endpoint: Endpoint | None = None
    #: the exchange of a generation (proxai_core): the request decoded once, the response translated
    #: or observed, its observations (see :func:`open_exchange`)
    exchange: Exchange | None = None
    #: model lists: did the client speak Anthropic, which model it asked for
    extra: dict[str, Any] = field(default_factory=dict)
    #: the flow's own secrets (the client's credential, the injected key): scrubbed from the record
    secrets: tuple[str, ...] = ()
    upstream_status: int | None = None
    upstream_headers: list[tuple[str, str]] | None = None
    upstream_chunks: list[tuple[float, int]] | None = None
    upstream_cut: bool | None = None
    replay: dict[str, Any] | None = None
    truncated: list[tuple[str, int, int]] = field(default_factory=list)
    #: the client got other bytes than the upstream sent although nothing was translated (a stream
    #: ended by ProxAI with an error event): the record keeps the upstream's
    keep_upstream: bool = False
    #: timings and cost (measure.py; record.MetricsRecord's fields as plain values)
    metrics: dict[str, Any] | None = None
    #: the client's encoder also puts a refusal's text in content (route option)
    refusal_in_content: bool = False

    @property
    def client_path(self) -> str | None:
        """The client's request path (where URL-keyed protocols keep the model and framing)."""
        ep = self.endpoint
        return ep.path if ep is not None else None

    @property
    def client_sse(self) -> bool:
        """The client's stream is SSE (False: its protocol's other framing, e.g. a JSON array)."""
        ep = self.endpoint
        return True if ep is None else bool(ep.sse)

    @property
    def model(self) -> str | None:
        if self.client_model and self.upstream_model and self.client_model != self.upstream_model:
            return f"{self.client_model} → {self.upstream_model}"
        return self.upstream_model or self.client_model


def open_exchange(state: FlowState) -> Exchange:
    """The flow's exchange, made on first use from the client's protocol, body and path (its
    warnings are the flow's)."""
    ex = state.exchange
    if ex is None:
        assert state.client_protocol is not None, "an exchange needs the client's protocol"
        ex = state.exchange = Exchange(state.client_protocol, state.client_body, path=state.client_path,
                                       stream=state.client_stream, refusal_in_content=state.refusal_in_content,
                                       warnings=state.warnings, kind=state.kind)
    return ex


def flow_state(flow: Any) -> FlowState | None:
    return getattr(flow, _STATE_ATTR, None)


def set_flow_state(flow: Any, state: FlowState | None) -> None:
    setattr(flow, _STATE_ATTR, state)


def scrub(text: str | None, secrets: tuple[str, ...]) -> str | None:
    """``text`` without the flow's own secrets, raw or encoded (JSON, percent, HTML, base64), each
    replaced by the one placeholder ``<redacted>``."""
    return scrub_secrets(text, secrets)


#: translations after which the client's response equals the upstream's (no copy kept)
_SAME_BODY = frozenset({None, "none", "observe", "synthetic"})


def record_dict(state: FlowState) -> dict[str, Any]:
    """The record of a finished flow as stored (``FlowRecord``'s schema, plain values, built without
    validation: the values are ours). Bodies are copied only when the flow does not show them; the
    flow's own secrets are scrubbed from every string."""
    sec = state.secrets
    stop = state.stop.to_dict() if state.stop is not None else None
    if stop is not None and stop["message"] and sec:
        stop["message"] = scrub(stop["message"], sec)
    usage = state.usage.to_dict() if isinstance(state.usage, Usage) else state.usage
    keep_upstream = state.translation not in _SAME_BODY or state.upstream_cut or state.keep_upstream
    headers = state.upstream_headers
    if headers is not None and sec:
        headers = [(k, scrub(v, sec) or "") for k, v in headers]
    return {
        "version": SCHEMA_VERSION,
        "kind": state.kind,
        "client_protocol": state.client_protocol.value if state.client_protocol else None,
        "upstream_protocol": state.upstream_protocol.value if state.upstream_protocol else None,
        "route": state.route,
        "translation": str(state.translation) if state.translation is not None else None,
        "client_model": state.client_model,
        "upstream_model": state.upstream_model,
        "stream": state.client_stream if state.kind == "generate" else None,
        "stop": stop,
        "usage": usage,
        "warnings": [scrub(str(w), sec) or "" for w in state.warnings],
        "client_request": scrub(state.client_text, sec) if state.route is not None else None,
        "upstream_response": scrub(state.upstream_text, sec) if keep_upstream else None,
        "upstream_status": state.upstream_status,
        "upstream_headers": headers,
        "upstream_chunks": state.upstream_chunks,
        "upstream_cut": state.upstream_cut,
        "replay": {k: state.replay.get(k) for k in ("result", "flow", "key", "upstream_url")}
        if state.replay else None,
        "truncated": [{"part": p, "kept": k, "total": t} for p, k, t in state.truncated],
        "metrics": state.metrics,  # timings and cost (measure.py)
        "count": {"total": state.count_tokens, "estimate": state.estimate}
        if state.kind == "count_tokens" else None,
    }
