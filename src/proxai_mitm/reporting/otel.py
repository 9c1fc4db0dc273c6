"""OpenTelemetry export: one span per LLM flow over OTLP/HTTP (protobuf), GenAI semantic conventions.

Off unless ``proxai_otel_endpoint`` is set (e.g. ``http://127.0.0.1:4318/v1/traces``); needs the
optional extra ``proxai-mitm[otel]``. On the event loop the addon only copies a few values of the
finished flow; the span is built (and, with ``proxai_otel_content``, the conversation decoded) in one
worker thread, and the SDK's batch processor sends spans from its own thread: the proxy never waits
for the collector (otel_export.py bounds what a misbehaving one can cost). Prompt and completion
text leave the proxy only with ``proxai_otel_content``; every string sent is redacted as recordings
are (``proxai_redact``: the flow's own secrets and the known key shapes, redact.py).
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mitmproxy import ctx, exceptions

from proxai_core.codecs import get

from ..flow.record import FlowRecord
from ..flow.state import flow_state
from ..redaction.redact import Redactor, flow_secrets, redact_value

logger = logging.getLogger(__name__)

__all__ = ["OTelExport", "provider_name", "span_facts"]

#: OpenTelemetry's well-known provider names where they differ from the codec's vendor name
_OTEL_PROVIDER = {"google": "gcp.gemini"}

#: stop reasons that make a span an error (error.type carries the reason)
_ERROR_STOPS = frozenset({"interrupted", "other"})


def provider_name(host: str | None, protocol: str | None, priced_by: str | None = None) -> str:
    """``gen_ai.provider.name`` (a well-known value where the host or the price database tells it)."""
    h = (host or "").lower()
    if h.endswith(".openai.azure.com"):
        return "azure.ai.openai"
    if h.endswith("anthropic.com"):
        return "anthropic"
    if h.endswith("openai.com"):
        return "openai"
    if priced_by in ("openai", "anthropic"):
        return priced_by
    vendor = "openai"
    if protocol:
        try:
            vendor = get(protocol).wire.credentials.vendor  # the protocol's vendor, from the registry
        except ValueError:
            pass
    return _OTEL_PROVIDER.get(vendor, vendor)


def span_facts(flow: Any, rec: FlowRecord) -> dict[str, Any]:
    """What the span needs, copied on the event loop (cheap: no body is decoded here)."""
    m = rec.metrics
    req, resp = flow.request, getattr(flow, "response", None)
    start = req.timestamp_start
    end = start + (m.duration_ms or 0) / 1000.0 if m is not None and m.duration_ms is not None else None
    return {
        "flow": flow,
        "start": start,
        "end": end,
        "host": req.pretty_host,
        "port": req.port,
        "client_protocol": rec.client_protocol.value if rec.client_protocol else None,
        "upstream_protocol": rec.upstream_protocol.value if rec.upstream_protocol else None,
        "route": rec.route,
        "request_model": rec.upstream_model or rec.client_model,
        "client_model": rec.client_model,
        "response_model": m.response_model if m else None,
        "stop": rec.stop.model_dump() if rec.stop else None,
        "usage": rec.usage.model_dump() if rec.usage else None,
        "status": resp.status_code if resp is not None else None,
        "upstream_status": rec.upstream_status,
        "error": flow.error.msg if getattr(flow, "error", None) is not None else None,
        "ttft_ms": m.ttft_ms if m else None,
        "output_tps": m.output_tps if m else None,
        "cost_usd": m.cost_usd if m else None,
        "cost_provider": m.cost_provider if m else None,
        "stream": rec.stream,
        "session": rec.session.id if rec.session is not None else None,
        "attempts": [a.model_dump() for a in rec.attempts] if rec.attempts else None,
        # the flow's own secrets (credential headers and query keys, the client's key a route
        # replaced, the injected key): what recordings redact, read here while the flow is whole
        "secrets": flow_secrets(flow, st.secrets if (st := flow_state(flow)) is not None else ()),
    }


def attributes(f: dict[str, Any]) -> dict[str, Any]:
    """The span attributes (GenAI semantic conventions, plus ``proxai.*`` for what they do not name)."""
    a: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider_name(f["host"], f["upstream_protocol"], f["cost_provider"]),
        "server.address": f["host"],
        "server.port": f["port"],
    }
    if f["request_model"]:
        a["gen_ai.request.model"] = f["request_model"]
    if f["response_model"]:
        a["gen_ai.response.model"] = f["response_model"]
    u = f["usage"] or {}
    if u.get("input_total") is not None:
        a["gen_ai.usage.input_tokens"] = u["input_total"]
    if u.get("output") is not None:
        a["gen_ai.usage.output_tokens"] = u["output"]
    if u.get("cache_read"):
        a["gen_ai.usage.cache_read.input_tokens"] = u["cache_read"]
    if u.get("cache_write"):
        a["gen_ai.usage.cache_creation.input_tokens"] = u["cache_write"]
    stop = f["stop"] or {}
    if stop.get("reason"):
        a["gen_ai.response.finish_reasons"] = [stop.get("raw") or stop["reason"]]
        a["proxai.stop.reason"] = stop["reason"]
        if stop.get("category"):
            a["proxai.stop.category"] = stop["category"]
    if f.get("session"):  # the session (Langfuse and others group a conversation's spans by it)
        a["gen_ai.conversation.id"] = f["session"]
    if f["status"] is not None:
        a["http.response.status_code"] = f["status"]
    err = _error_type(f)
    if err:
        a["error.type"] = err
    for key, name in (("client_protocol", "proxai.client_protocol"), ("upstream_protocol", "proxai.upstream_protocol"),
                      ("route", "proxai.route"), ("client_model", "proxai.client_model"),
                      ("ttft_ms", "proxai.ttft_ms"), ("output_tps", "proxai.output_tokens_per_second"),
                      ("cost_usd", "proxai.cost_usd"), ("stream", "proxai.stream")):
        if f[key] is not None:
            a[name] = f[key]
    if f.get("attempts"):  # a route with fallbacks: every try, in order
        tries = f["attempts"]
        a["proxai.attempt.upstreams"] = [str(t["upstream"]) for t in tries]
        a["proxai.attempt.statuses"] = [int(t["status"] or 0) for t in tries]
        a["proxai.attempt.reasons"] = [str(t["reason"]) for t in tries]
        if stop.get("detail", {}).get("fallback"):
            a["proxai.fallback"] = stop["detail"]["fallback"]
    return a


def _error_type(f: dict[str, Any]) -> str | None:
    for st in (f["upstream_status"], f["status"]):  # the upstream's own status first (the client's is translated)
        if st is not None and st >= 400:
            return str(st)
    if f["error"]:
        return "interrupted"
    reason = (f["stop"] or {}).get("reason")
    return reason if reason in _ERROR_STOPS else None


# ----------------------------------------------------------------------------- content (opt-in)
def _weight(flow: Any, rec: FlowRecord) -> int:
    """About the bytes the conversation of a flow is decoded from (its bodies, the record's copies)."""
    resp = getattr(flow, "response", None)
    return sum(len(x) for x in (flow.request.raw_content, resp.raw_content if resp is not None else None,
                                rec.client_request, rec.upstream_response) if x)


def _parts(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in content or []:
        t = p.get("type")
        if t in ("text", "refusal"):
            out.append({"type": "text", "content": p.get("text", "")})
        elif t == "tool_call":
            out.append({"type": "tool_call", "id": p.get("id"), "name": p.get("name"),
                        "arguments": p.get("arguments")})
        elif t == "tool_result":
            out.append({"type": "tool_call_response", "id": p.get("call_id"),
                        "response": " ".join(c.get("text", "") for c in p.get("content") or [] if isinstance(c, dict))})
        elif t == "reasoning":
            out.append({"type": "reasoning", "content": p.get("text", "")})
        else:
            out.append({"type": str(t)})
    return out


def content_attributes(flow: Any, stop: dict[str, Any] | None, r: Redactor | None = None) -> dict[str, str]:
    """``gen_ai.system_instructions`` / ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON).
    With ``r``, redacted as recordings are, value by value before JSON encoding (an escape added by
    the encoding cannot hide a secret)."""
    from .report import exchange

    def dumps(obj: Any) -> str:
        return json.dumps(redact_value(obj, None, r) if r is not None else obj, ensure_ascii=False)

    ex = exchange(flow) or {}
    a: dict[str, str] = {}
    req = ex.get("request") or {}
    if req.get("system"):
        a["gen_ai.system_instructions"] = dumps([{"type": "text", "content": req["system"]}])
    msgs = [{"role": m.get("role"), "parts": _parts(m.get("content"))} for m in req.get("messages") or []]
    if msgs:
        a["gen_ai.input.messages"] = dumps(msgs)
    resp = ex.get("response") or {}
    if resp.get("parts") is not None:
        out = {"role": "assistant", "parts": _parts(resp["parts"])}
        if stop and stop.get("reason"):
            out["finish_reason"] = stop.get("raw") or stop["reason"]
        a["gen_ai.output.messages"] = dumps([out])
    return a


# ----------------------------------------------------------------------------- the addon
class OTelExport:
    """Sends one span per finished LLM flow when ``proxai_otel_endpoint`` is set."""

    def __init__(self) -> None:
        self._provider: Any = None
        self._tracer: Any = None
        self._budget: Any = None
        self._backlog: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._content = False
        self._redact = True
        self._hooks(False)

    def _hooks(self, on: bool) -> None:
        """Flow hooks only while exporting: mitmproxy skips a hook that is None, so flows pay no
        dispatch for this addon when it is off."""
        for name in ("response", "error"):
            if on:
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, None)

    def load(self, loader: Any) -> None:
        loader.add_option("proxai_otel_endpoint", str, "",
                          "OTLP/HTTP traces endpoint (e.g. http://127.0.0.1:4318/v1/traces): one span per LLM flow "
                          "(GenAI semantic conventions). Empty: off. Needs the extra proxai-mitm[otel].")
        loader.add_option("proxai_otel_content", bool, False,
                          "Also send prompts and completions in the spans (gen_ai.input.messages / "
                          "gen_ai.output.messages). Off by default: conversations stay in the proxy.")
        loader.add_option("proxai_otel_service", str, "proxai", "service.name of the exported spans.")

    def configure(self, updated: set[str]) -> None:
        if "proxai_otel_content" in updated:
            self._content = bool(ctx.options.proxai_otel_content)
        if "proxai_redact" in updated:  # spans are redacted as recordings are (Recorder's option)
            self._redact = bool(getattr(ctx.options, "proxai_redact", True))
        if not updated & {"proxai_otel_endpoint", "proxai_otel_service"}:
            return
        self._retire()  # the old exporter may be stuck on its collector: never waited for here
        endpoint = ctx.options.proxai_otel_endpoint.strip()
        if not endpoint:
            return
        if not endpoint.startswith(("http://", "https://")):
            raise exceptions.OptionsError(f"proxai_otel_endpoint: an http(s) URL, got {endpoint!r}")
        try:
            from .otel_export import FLOW_BACKLOG, Budget, make_provider

            provider, budget = make_provider(endpoint, ctx.options.proxai_otel_service)
        except ImportError as e:
            raise exceptions.OptionsError(
                f"proxai_otel_endpoint: OpenTelemetry is not installed ({e}); install proxai-mitm[otel]") from e
        self._provider, self._budget, self._backlog = provider, budget, Budget(FLOW_BACKLOG)
        self._tracer = provider.get_tracer("proxai_mitm")
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proxai-otel")
        self._hooks(True)
        logger.info("proxai: OpenTelemetry spans to %s%s", endpoint,
                    " (with prompts and completions)" if self._content else "")

    def response(self, flow: Any) -> None:
        self._export(flow)

    def error(self, flow: Any) -> None:
        self._export(flow)

    def _export(self, flow: Any) -> None:
        if self._pool is None or not getattr(flow, "live", False):
            return
        rec = FlowRecord.of(flow)
        if rec is None or rec.kind != "generate":
            return
        try:
            facts = span_facts(flow, rec)
        except Exception:  # noqa: BLE001 - telemetry must never break a flow
            logger.debug("proxai: no span for this flow", exc_info=True)
            return
        weight = _weight(flow, rec) if self._content else 0
        content = self._content and self._backlog.take(weight)
        if not content:
            facts["flow"] = None  # the worker does not need the flow: not kept alive for it
        self._pool.submit(self._emit, facts, self._tracer, self._redact, self._budget if content else None,
                          self._content and not content)
        if content:  # the flow's bodies are free again once the worker built its conversation
            self._pool.submit(self._backlog.give, weight)

    def _emit(self, f: dict[str, Any], tracer: Any, redact: bool, budget: Any, omitted: bool) -> None:
        """Build and end the span (worker thread). ``budget``: send the conversation, within it;
        ``omitted``: the conversation was asked for but the span builder is behind."""
        try:
            from opentelemetry.trace import SpanKind, Status, StatusCode

            r = Redactor(f["secrets"]) if redact else None
            attrs = attributes(f)
            if r is not None:  # models, route: client-chosen strings
                attrs = {k: redact_value(v, None, r) for k, v in attrs.items()}
            conv = content_attributes(f["flow"], f["stop"], r) if budget is not None else {}
            model = attrs.get("gen_ai.request.model")
            name = f"chat {model}" if model else "chat"
            start_ns = int(f["start"] * 1e9) if f["start"] else None
            span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, start_time=start_ns)
            if conv and budget.reserve(conv):
                span.set_attributes(conv)
            elif conv or omitted:  # the collector, or this worker, is behind: no more conversations
                span.set_attribute("proxai.content_omitted", "backlog")
            if "error.type" in attrs:
                span.set_status(Status(StatusCode.ERROR, str(attrs["error.type"])))
            span.end(end_time=int(f["end"] * 1e9) if f["end"] else None)
        except Exception:  # noqa: BLE001
            logger.debug("proxai: span export failed", exc_info=True)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every finished flow's span was handed to the collector (tests, shutdown)."""
        if self._pool is not None:
            self._pool.submit(lambda: None).result(timeout=timeout_s)
        if self._provider is not None:
            self._provider.force_flush(int(timeout_s * 1000))

    def _retire(self) -> threading.Thread | None:
        """Stop exporting now; the old pool and provider shut down in a daemon thread (returned)."""
        pool, provider = self._pool, self._provider
        self._pool = self._provider = self._tracer = self._budget = self._backlog = None
        self._hooks(False)
        if pool is None and provider is None:
            return None
        from .otel_export import retire

        return retire(pool, provider)

    def done(self) -> None:
        t = self._retire()
        if t is not None:
            from .otel_export import EXIT_WAIT_S

            t.join(EXIT_WAIT_S)  # the last spans, if the collector answers at once; a hanging one is left behind
