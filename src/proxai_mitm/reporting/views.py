"""The summary header of the LLM views, and the two views of the other side of a translation.

:func:`header` is what every LLM view opens with: protocols, route, session, model asked / sent / answered, stop
with its message, tokens, TTFT, duration, cost, warnings — read from the flow's record (measured now
when an older recording has no measures).

"LLM client request" shows the request as the client sent it (before ProxAI translated or rewrote it);
"LLM upstream response" shows the upstream's own answer (before it was translated for the client), as
a conversation and then raw. Neither is auto-selected: pick them in the view menu of mitmweb or the
console (``m``) on either tab of a flow.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mitmproxy import contentviews

from proxai_core.neutral import Usage

from ..flow.analysis import analyze_response
from ..flow.metrics import fmt_ms, fmt_usd
from ..flow.record import FlowRecord, MetricsRecord
from ..wire.protocols import TITLES
from .render import render_request, render_request_lenient, render_response

logger = logging.getLogger(__name__)

__all__ = ["ClientRequestView", "UpstreamResponseView", "header", "tokens_text"]

_RULE = "─" * 72
_RAW_LIMIT = 200_000


def tokens_text(usage: Usage | None) -> str:
    """``input 21 (cache read 5) · output 9 (reasoning 2)``; unknown counts say so (never 0)."""
    if usage is None or (usage.input_total is None and usage.output is None):
        return "unknown (the answer carried no usage)"
    bits = []
    inp = usage.input_total
    extra = [f"cache read {usage.cache_read}" if usage.cache_read else "",
             f"cache write {usage.cache_write}" if usage.cache_write else ""]
    extra = [e for e in extra if e]
    bits.append(f"input {'?' if inp is None else inp}" + (f" ({', '.join(extra)})" if extra else ""))
    out = usage.output
    bits.append(f"output {'?' if out is None else out}" + (f" (reasoning {usage.reasoning})" if usage.reasoning
                                                           else ""))
    return " · ".join(bits)


def _metrics(flow: Any, rec: FlowRecord) -> MetricsRecord:
    if rec.metrics is not None:
        return rec.metrics
    from ..flow.measure import measure_flow

    try:
        return measure_flow(flow, rec)
    except Exception as e:  # noqa: BLE001 - the header then says unknown
        logger.debug("proxai: measuring for the view failed: %s", e)
        return MetricsRecord()


def header(flow: Any, rec: FlowRecord | None) -> list[str]:
    """The summary lines (empty when the flow has no record: a plain capture shows its body only)."""
    if rec is None or flow is None:
        return []
    m = _metrics(flow, rec)
    cp, up = rec.client_protocol, rec.upstream_protocol
    lines = [_RULE]
    if cp or up:
        proto = TITLES.get(cp, "?") if cp else "?"
        if up and up is not cp:
            proto += f" → {TITLES.get(up, up.value)} (translated)"
        else:
            proto += " (not translated)"
        lines.append(f"protocols  {proto}")
    how = rec.route or "none (pass-through)"
    if rec.translation:
        how += f" · translation {rec.translation}"
    if rec.stream is not None:
        how += " · streamed" if rec.stream else " · complete answer"
    lines.append(f"route      {how}")
    if rec.session is not None:
        lines.append(f"session    {rec.session.id} ({rec.session.source})")
    models = []
    asked = rec.client_model or _model_of(rec.client_body(flow))  # schema 1 kept no models
    if asked:
        models.append(f"asked {asked}")
    if rec.upstream_model and rec.upstream_model != asked:
        models.append(f"sent {rec.upstream_model}")
    if m.response_model:
        models.append(f"answered {m.response_model}")
    lines.append(f"model      {' · '.join(models) or 'unknown'}")
    stop = rec.stop_info()
    if stop is None:
        lines.append("stop       unknown (no stop information)")
    else:
        refusal = "⛔ " if stop.refused else ""
        lines.append(f"stop       {refusal}{stop.describe()}")
    lines.append(f"tokens     {tokens_text(rec.usage.usage() if rec.usage is not None else None)}")
    timing = [f"TTFT {fmt_ms(m.ttft_ms)}", f"duration {fmt_ms(m.duration_ms)}"]
    if m.headers_ms is not None:
        timing.append(f"headers after {fmt_ms(m.headers_ms)}")
    if m.output_tps is not None:
        timing.append(f"{m.output_tps} tok/s")
    lines.append(f"timing     {' · '.join(timing)}")
    if m.cost_usd is not None:
        cost = f"{fmt_usd(m.cost_usd)} ({m.cost_model} at {m.cost_provider} prices)"
    else:
        cost = f"unknown ({m.cost_note or 'no price'})"
    lines.append(f"cost       {cost}")
    for w in rec.warnings:
        lines.append(f"warning    ⚠ {w}")
    if rec.upstream_cut:
        lines.append("warning    ⚠ the upstream connection broke inside the response")
    lines.append(_RULE)
    return lines


def _model_of(body: bytes | None) -> str | None:
    obj = _loads(body)
    m = obj.get("model") if isinstance(obj, dict) else None
    return m if isinstance(m, str) else None


def _loads(data: bytes | None) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _raw(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    if len(text) > _RAW_LIMIT:
        text = text[:_RAW_LIMIT] + f"\n… (truncated, {len(text)} characters)"
    return text


class _OtherSide(contentviews.Contentview):
    syntax_highlight = "none"

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        return -1  # chosen by hand only

    def _rec(self, metadata: contentviews.Metadata) -> tuple[Any, FlowRecord]:
        flow = getattr(metadata, "flow", None)
        rec = FlowRecord.of(flow) if flow is not None else None
        if rec is None:
            raise ValueError("this flow has no ProxAI record (not an LLM flow seen by the addon)")
        return flow, rec


class ClientRequestView(_OtherSide):
    """The client's own request, before ProxAI translated or rewrote it."""

    name = "LLM client request"

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        try:
            flow, rec = self._rec(metadata)
        except ValueError as e:
            return f"[{e}]\n"
        body = rec.client_body(flow) or b""
        head = "\n".join(header(flow, rec))
        same = rec.client_request is None
        note = "(the client's request, unchanged: it is also what went upstream)" if same else \
            "(the client's request as it arrived, before ProxAI rewrote it)"
        obj = _loads(body)
        if isinstance(obj, dict) and rec.client_protocol is not None:
            try:
                conv = render_request(obj, rec.client_protocol, note)
            except Exception as e:  # noqa: BLE001
                conv = render_request_lenient(obj, rec.client_protocol, e)
        else:
            conv = note + "\n"
        return f"{head}\n\n{conv}\n── raw ──\n{_raw(body)}\n"


class UpstreamResponseView(_OtherSide):
    """The upstream's own answer, before ProxAI translated it for the client."""

    name = "LLM upstream response"

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        try:
            flow, rec = self._rec(metadata)
        except ValueError as e:
            return f"[{e}]\n"
        body = rec.upstream_body(flow)
        head = "\n".join(header(flow, rec))
        if body is None:
            return f"{head}\n\n(no upstream response body)\n"
        status = rec.upstream_status
        if status is None and getattr(flow, "response", None) is not None:
            status = flow.response.status_code
        ctype = None
        for k, v in rec.upstream_headers or []:
            if k.lower() == "content-type":
                ctype = v
        info = analyze_response(body, rec.upstream_protocol, status=status, content_type=ctype)
        note = "(the upstream's own answer, before translation)" if rec.upstream_response is not None else \
            "(the upstream's answer, unchanged: it is also what the client got)"
        return f"{head}\n\n{note}\n{render_response(info, status)}\n── raw ──\n{_raw(body)}\n"
