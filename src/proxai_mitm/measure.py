"""The measuring addon: timings and cost into each LLM flow's record, and the one-line comment.

Runs after the annotation addon (the record exists) and before the recording addons (the saved flow
carries the measures). Live flows get their time to first token from the stream handler
(streaming.py notes the first content event); flows read from a file keep the measures they were
recorded with, or get them from their timestamps and recorded chunk times.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson

from .cost import price
from .escape import escape
from .metrics import first_content_offset, summary_line, timings
from .record import FlowRecord, MetricsRecord
from .state import get_state

logger = logging.getLogger(__name__)

__all__ = ["Measure", "flow_summary", "measure_flow"]

#: complete bodies larger than this are not parsed again for the answering model's name
_MODEL_SCAN_LIMIT = 2 << 20


class Measure:
    """Writes :class:`~.record.MetricsRecord` into the record and the summary into ``flow.comment``."""

    def running(self) -> None:
        # the price database loads in ~0.5 s: not on the event loop, not with the first flow
        threading.Thread(target=_warm, name="proxai-prices", daemon=True).start()

    def response(self, flow: Any) -> None:
        self._finish(flow)

    def error(self, flow: Any) -> None:
        self._finish(flow)

    @staticmethod
    def _finish(flow: Any) -> None:
        rec = FlowRecord.of(flow)
        if rec is None or rec.kind != "generate":
            return
        try:
            if rec.metrics is None:
                if flow.live:
                    rec.metrics = measure_flow(flow, rec, get_state(flow))
                    rec.write(flow)
                else:  # a flow read from a file keeps its record as recorded
                    rec = rec.model_copy(update={"metrics": measure_flow(flow, rec)})
            flow.comment = flow_summary(rec)
        except Exception:  # noqa: BLE001 - measuring must never break a flow
            logger.debug("proxai: measuring failed", exc_info=True)


def _warm() -> None:
    try:
        price("gpt-4o-mini", "api.openai.com", input_total=1, output=1)
    except Exception:  # noqa: BLE001
        pass


def measure_flow(flow: Any, rec: FlowRecord, state: Any = None) -> MetricsRecord:
    """The measures of one finished flow (live: ``state`` is its FlowState; offline: None)."""
    req, resp = flow.request, getattr(flow, "response", None)
    start = getattr(req, "timestamp_start", None)
    headers = getattr(resp, "timestamp_start", None) if resp is not None else None
    end = getattr(resp, "timestamp_end", None) if resp is not None else None
    err = getattr(flow, "error", None)
    if end is None and err is not None:
        end = getattr(err, "timestamp", None)
    if end is None and getattr(flow, "live", False):
        end = time.time()

    handler = getattr(state, "handler", None) if state is not None else None
    first: float | None = None
    response_model: str | None = None
    if handler is not None and hasattr(handler, "first_content"):
        streamed = True
        first = handler.first_content
        response_model = getattr(getattr(handler, "translator", None), "model", None)
    elif rec.upstream_chunks is not None:  # a recorded stream: find the chunk with the first content
        streamed = True
        proto = rec.upstream_protocol or rec.client_protocol
        body = rec.upstream_body(flow)
        off, response_model = first_content_offset(proto, body, rec.upstream_chunks) if proto and body \
            else (None, None)
        if off is not None and headers is not None:
            first = headers + off / 1000.0
    elif resp is None or resp.status_code >= 400:
        streamed = True  # an error answer has no first token: TTFT stays unknown
    else:
        streamed = False
        response_model = _answered_model(rec.upstream_body(flow))

    usage = rec.usage
    output = usage.output if usage is not None else None
    t = timings(start, headers, first, end, output, streamed=streamed)
    model = response_model or rec.upstream_model or rec.client_model
    c = price(model, getattr(req, "pretty_host", None),
              input_total=usage.input_total if usage is not None else None,
              output=output,
              cache_read=usage.cache_read if usage is not None else None,
              cache_write=usage.cache_write if usage is not None else None)
    if rec.stop is None and usage is None:
        c = type(c)(None, note="no answer")
    return MetricsRecord(start=start, headers_ms=t.headers_ms, ttft_ms=t.ttft_ms, duration_ms=t.duration_ms,
                         output_tps=t.output_tps, response_model=response_model, cost_usd=c.usd,
                         cost_model=c.model, cost_provider=c.provider, cost_note=c.note)


def _answered_model(body: bytes | None) -> str | None:
    if not body or len(body) > _MODEL_SCAN_LIMIT or body[:1] not in (b"{", b" ", b"\n"):
        return None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    m = obj.get("model")
    if not isinstance(m, str) and isinstance(obj.get("response"), dict):
        m = obj["response"].get("model")
    return m if isinstance(m, str) and m else None


def flow_summary(rec: FlowRecord) -> str:
    """``model · stop · in→out tok · TTFT · cost`` for the flow list (control characters escaped)."""
    m = rec.metrics or MetricsRecord()
    u = rec.usage
    model = m.response_model or rec.upstream_model or rec.client_model
    if rec.client_model and model and rec.client_model != model:
        model = f"{rec.client_model} → {model}"
    stop = rec.stop.reason if rec.stop is not None else None
    if rec.stop is not None and rec.stop.category:
        stop = f"{stop} ({rec.stop.category})"
    inp = (u.input_total if u.input_total is not None else u.input) if u is not None else None
    return escape(summary_line(model, stop, inp, u.output if u is not None else None, m.ttft_ms, m.cost_usd))


def measure_row(flow: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """The measures of a flow for a report row: the recorded ones, else measured now from the flow
    (a recording made before the measures existed, or a plain capture: ``summary`` gives its usage)."""
    rec = FlowRecord.of(flow)
    m = rec.metrics if rec is not None else None
    if m is None:
        if rec is None:
            rec = FlowRecord(client_protocol=summary.get("client_protocol"),
                             upstream_protocol=summary.get("upstream_protocol"),
                             client_model=summary.get("model"), usage=summary.get("usage"),
                             stop=summary.get("stop"))
        elif not (rec.client_model or rec.upstream_model) and summary.get("model"):
            rec = rec.model_copy(update={"client_model": summary["model"]})  # schema 1 kept no models
        try:
            m = measure_flow(flow, rec)
        except Exception as e:  # noqa: BLE001 - a report row without measures, not a failed report
            logger.debug("proxai: measuring %s failed: %s", getattr(flow, "id", "?"), e)
            m = MetricsRecord(cost_note=f"not measured: {e}")
    usage = summary.get("usage") or {}
    return {
        "timestamp": m.start or summary.get("timestamp"),
        "headers_ms": m.headers_ms,
        "ttft_ms": m.ttft_ms,
        "duration_ms": m.duration_ms,
        "output_tps": m.output_tps,
        "cache_read_tokens": usage.get("cache_read"),
        "cache_write_tokens": usage.get("cache_write"),
        "reasoning_tokens": usage.get("reasoning"),
        "response_model": m.response_model,
        "cost_usd": m.cost_usd,
        "cost_note": m.cost_note,
    }
