"""The per-flow record: the one thing ProxAI writes to ``flow.metadata["proxai"]``.

Writers (the addons, while a flow is live) keep their working values in :class:`~.state.FlowState`;
the annotation addon turns it into a :class:`FlowRecord` once, at the end of the flow, and stores
``record.dump()`` (plain JSON values: mitmproxy serializes metadata with tnetstring, a pydantic object
would make ``-w`` fail). Every reader (annotation of offline flows, report, export, contentview,
replay, HAR) calls :meth:`FlowRecord.of`, which also reads what older versions of the addon wrote
(no ``version`` key: schema 1) and returns None for a flow the addon never annotated.

To keep recordings small, bodies are copied into the record only when the flow does not show them
itself: ``client_request`` only when the request was rewritten, ``upstream_response`` only when the
client got something else than the upstream sent (translated, replaced by an error, or a stream).
:meth:`FlowRecord.client_body` / :meth:`FlowRecord.upstream_body` fall back to the flow's own bodies.
The schema is documented in docs/flow-record.md.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from proxai_core import Plan, Protocol, StopInfo
from proxai_core.neutral import Usage

from ..wire.bodies import DEFAULT_LIMIT, BodyError, body_limit, decode

logger = logging.getLogger(__name__)

__all__ = ["LIMIT_OPTIONS", "METADATA_KEY", "read_body", "safe_body_limit", "SCHEMA_VERSION", "FlowRecord",
           "MetricsRecord", "ReplayRecord", "StopRecord", "Truncation", "UsageRecord"]

METADATA_KEY = "proxai"
SCHEMA_VERSION = 2
_CACHE_ATTR = "_proxai_record"

class _Plain(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


class StopRecord(_Plain):
    """``StopInfo.to_dict()`` (see the StopInfo spec); :meth:`info` gives the StopInfo back."""

    reason: str
    raw: str | None = None
    category: str | None = None
    message: str | None = None
    recommended_model: str | None = None
    detail: dict[str, Any] = {}

    @classmethod
    def of(cls, stop: StopInfo | None) -> StopRecord | None:
        return None if stop is None else cls.model_validate(stop.to_dict())

    def info(self) -> StopInfo:
        return StopInfo.from_dict(self.model_dump())


class UsageRecord(_Plain):
    """Normalized token counts (``Usage.to_dict()``)."""

    input: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None
    reasoning: int | None = None
    input_total: int | None = None

    @classmethod
    def of(cls, usage: Any) -> UsageRecord | None:
        if usage is None:
            return None
        if isinstance(usage, Usage):
            return cls.model_validate(usage.to_dict())
        if isinstance(usage, dict):
            return cls.model_validate(usage)
        return None

    def usage(self) -> Usage:
        return Usage(self.input, self.cache_read, self.cache_write, self.output, self.reasoning)


class ReplayRecord(_Plain):
    """How ``proxai_replay`` handled the flow."""

    result: Literal["sent", "hit", "miss", "forwarded"]
    flow: str | None = None  # the id of the recorded flow that answered
    key: str | None = None  # the canonical key of a miss / forwarded request
    upstream_url: str | None = None  # where the request would have gone


class Truncation(_Plain):
    """A body kept only in part in the recording (recording caps)."""

    part: str  # "client_request" | "upstream_response" | "response" ...
    kept: int
    total: int


class MetricsRecord(_Plain):
    """Timings and cost of one exchange (metrics.py, cost.py). Milliseconds from the start of the
    client's request; None is unknown (never 0 for an unknown cost)."""

    start: float | None = None  # epoch seconds: the client's request began
    headers_ms: float | None = None  # the response headers arrived
    ttft_ms: float | None = None  # the first content event (complete answers: the body arrived)
    duration_ms: float | None = None
    output_tps: float | None = None  # output tokens per second of generation
    response_model: str | None = None  # the model that answered, as the upstream named it
    cost_usd: float | None = None
    cost_model: str | None = None  # the price entry used
    cost_provider: str | None = None
    cost_note: str | None = None  # why the cost is unknown


class CountRecord(_Plain):
    """A token count: the number the client got, and whether ProxAI estimated it locally (the
    upstream has no counter) instead of asking the upstream's counter."""

    #: the input tokens the client was told
    total: int | None = None
    estimate: bool = False


class FlowRecord(_Plain):
    """Schema version 2 (docs/flow-record.md)."""

    version: int = SCHEMA_VERSION
    #: ``generate`` | ``count_tokens`` | ``models`` | ``model`` | ``websocket``
    kind: str = "generate"
    client_protocol: Protocol | None = None
    upstream_protocol: Protocol | None = None
    #: the route name; None when the flow passed through unrouted
    route: str | None = None
    #: what translation ran on the flow (proxai_core.Plan: none, observe, stream, stream_whole,
    #: collect, to_stream, json, error, models, synthetic)
    translation: Plan | None = None
    client_model: str | None = None
    upstream_model: str | None = None
    #: the client asked for a stream
    stream: bool | None = None
    stop: StopRecord | None = None
    usage: UsageRecord | None = None
    warnings: list[str] = []
    #: the client's request body as it arrived (decoded text) when the request was rewritten
    client_request: str | None = None
    #: the upstream's body (decoded text, for streams the raw SSE) when the client got another one
    upstream_response: str | None = None
    upstream_status: int | None = None
    upstream_headers: list[tuple[str, str]] | None = None
    #: per upstream chunk of a stream: (offset ms since the response headers, decoded byte count)
    upstream_chunks: list[tuple[float, int]] | None = None
    #: the upstream connection broke inside the response
    upstream_cut: bool | None = None
    replay: ReplayRecord | None = None
    truncated: list[Truncation] = []
    metrics: MetricsRecord | None = None
    #: a ``count_tokens`` flow's count
    count: CountRecord | None = None

    @field_validator("client_protocol", "upstream_protocol", mode="before")
    @classmethod
    def _protocol(cls, v: Any) -> Any:
        if v is None or isinstance(v, Protocol):
            return v
        try:
            return Protocol(v)
        except ValueError:
            return None

    # ------------------------------------------------------------------------- reading
    @classmethod
    def of(cls, flow: Any) -> FlowRecord | None:
        """The record of a flow (cached on the flow object), or None when the addon never annotated it.
        Reads schema 1 (no ``version``; what the addon wrote before the record was typed)."""
        cached = getattr(flow, _CACHE_ATTR, None)
        md = getattr(flow, "metadata", None)
        raw = md.get(METADATA_KEY) if isinstance(md, dict) else None
        if cached is not None and cached[0] is raw:
            return cached[1]
        rec = cls.from_dict(raw) if isinstance(raw, dict) else None
        try:
            setattr(flow, _CACHE_ATTR, (raw, rec))
        except (AttributeError, TypeError):
            pass
        return rec

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FlowRecord | None:
        if not raw.keys() & cls.model_fields.keys():
            return None  # not written by this addon
        data = dict(raw)
        if not isinstance(data.get("version"), int):
            data = _from_v1(data)
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            logger.debug("proxai: unreadable flow record: %s", e)
            return cls.model_validate(_salvage(data))

    # ------------------------------------------------------------------------- writing
    def dump(self) -> dict[str, Any]:
        """Plain JSON values for ``flow.metadata`` (what mitmproxy can serialize)."""
        return self.model_dump(mode="json")

    @staticmethod
    def write_dict(flow: Any, raw: dict[str, Any]) -> None:
        """Store an already plain record (``state.record_dict``); it is validated only when read."""
        flow.metadata[METADATA_KEY] = raw

    # ------------------------------------------------------------------------- typed views
    def stop_info(self) -> StopInfo | None:
        return self.stop.info() if self.stop is not None else None

    @property
    def model(self) -> str | None:
        """The model for a table: ``client → upstream`` when a route mapped it."""
        if self.client_model and self.upstream_model and self.client_model != self.upstream_model:
            return f"{self.client_model} → {self.upstream_model}"
        return self.upstream_model or self.client_model

    def client_body(self, flow: Any) -> bytes | None:
        """What the client sent: the kept original, else the flow's own request body."""
        if self.client_request is not None:
            return self.client_request.encode("utf-8", "surrogatepass")
        return read_body(getattr(flow, "request", None))

    def upstream_body(self, flow: Any) -> bytes | None:
        """What the upstream answered: the kept body, else the flow's own response body."""
        if self.upstream_response is not None:
            return self.upstream_response.encode("utf-8", "surrogatepass")
        return read_body(getattr(flow, "response", None))


def read_body(msg: Any) -> bytes | None:
    """A message body with its content-encoding removed, within the body cap (the raw bytes when it
    cannot be decoded within it: readers show such a body as it is)."""
    raw = getattr(msg, "raw_content", None) if msg is not None else None
    if raw is None:
        return None
    try:
        return decode(raw, msg.headers.get("content-encoding"), safe_body_limit())
    except BodyError:
        return raw


#: the options the body cap depends on (addons re-read it in ``configure`` when one changes)
LIMIT_OPTIONS = frozenset({"proxai_body_limit", "body_size_limit"})


def safe_body_limit() -> int:
    """The body cap in effect, or the default outside mitmproxy (the report CLI)."""
    try:
        return body_limit()
    except Exception:  # noqa: BLE001 - no mitmproxy options here
        return DEFAULT_LIMIT


def _from_v1(d: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 (no ``version``): same key names, no ``kind`` / ``translation``; models came from the
    bodies. Both bodies were always kept."""
    out = dict(d)
    out["version"] = SCHEMA_VERSION
    out.setdefault("kind", "generate")
    if isinstance(out.get("upstream_headers"), list):
        out["upstream_headers"] = [tuple(p) for p in out["upstream_headers"]
                                   if isinstance(p, (list, tuple)) and len(p) == 2]
    rep = out.get("replay")
    if isinstance(rep, dict) and rep.get("result") not in ("sent", "hit", "miss", "forwarded"):
        out["replay"] = None
    return out


def _salvage(d: dict[str, Any]) -> dict[str, Any]:
    """Keep the fields that validate one by one (a damaged or hand-edited record)."""
    out: dict[str, Any] = {}
    for name in FlowRecord.model_fields:
        if name not in d:
            continue
        try:
            FlowRecord.model_validate({name: d[name]})
        except ValidationError:
            continue
        out[name] = d[name]
    return out
