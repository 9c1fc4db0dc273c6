"""The measuring addons: timings and cost into each LLM flow's record, and the one-line comment.

:class:`Measure` runs just before the annotation addon (which writes ``state.metrics`` into the
record), :class:`Summary` just after it (the comment). Live flows get their time to first token from the stream handler
(streaming.py notes the first content event); flows read from a file keep the measures they were
recorded with, or get them from their timestamps and recorded chunk times.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from mitmproxy import http
from mitmproxy.net.http import url

from proxai_core.codecs import get
from proxai_core.neutral import Usage

from ..wire.bodies import BodyError, decode
from ..wire.escape import escape
from .cost import Cost, price, prices_ready, start_loading
from .metrics import first_content_offset, summary_line, timings
from .record import FlowRecord, MetricsRecord
from .state import flow_state, scrub

logger = logging.getLogger(__name__)

__all__ = ["Measure", "flow_summary", "measure_flow"]

#: complete bodies larger than this are not parsed again for the answering model's name
_MODEL_SCAN_LIMIT = 256 << 10


class Measure:
    """Measures each live LLM flow into its state (``state.metrics``), just before the annotation
    addon writes the record."""

    def request(self, flow: Any) -> None:
        # the price database (~4 MB, ~0.2 s) loads in a worker thread when the first LLM flow
        # arrives, not at start-up: an idle proxy does not hold it
        if not prices_ready() and flow_state(flow) is not None:
            start_loading()

    def response(self, flow: Any) -> Any:
        return self._measure(flow)

    def error(self, flow: Any) -> Any:
        return self._measure(flow)

    @staticmethod
    def _measure(flow: Any) -> Any:
        state = flow_state(flow)
        if state is None or not flow.live or state.kind != "generate" or state.metrics is not None \
                or state.annotated:
            return None
        if not prices_ready():
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass  # no event loop (a direct call): price() loads the database itself
            else:  # a flow that ends while the database loads waits for it, not the event loop
                start_loading()
                return _measure_when_ready(flow, state)
        _measure_now(flow, state)
        return None


def _measure_now(flow: Any, state: Any, *, priced: bool = True) -> None:
    try:
        state.metrics = measure_live(flow, state, priced=priced)
    except Exception:  # noqa: BLE001 - measuring must never break a flow
        logger.debug("proxai: measuring failed", exc_info=True)


#: how long a flow waits for the price database before it is measured without a price
PRICE_WAIT_S = 30.0


async def _measure_when_ready(flow: Any, state: Any) -> None:
    deadline = time.monotonic() + PRICE_WAIT_S
    while not prices_ready() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    _measure_now(flow, state, priced=prices_ready())


class Summary:
    """The one-line summary as ``flow.comment`` (after the annotation addon), live or read from a file."""

    def response(self, flow: Any) -> None:
        self._comment(flow)

    def error(self, flow: Any) -> None:
        self._comment(flow)

    @staticmethod
    def _comment(flow: Any) -> None:
        try:
            state = flow_state(flow)
            if flow.live and state is not None:
                if state.kind == "generate":
                    flow.comment = state_summary(state)
                return
            rec = FlowRecord.of(flow)
            if rec is None or rec.kind != "generate":
                return
            if rec.metrics is None:  # a flow read from a file keeps its record as recorded
                rec = rec.model_copy(update={"metrics": measure_flow(flow, rec)})
            flow.comment = flow_summary(rec)
        except Exception:  # noqa: BLE001
            logger.debug("proxai: summary failed", exc_info=True)


def measure_live(flow: Any, state: Any, *, priced: bool = True) -> dict[str, Any]:
    """The measures of a live flow from its working state (plain values, as the record stores them)."""
    usage = state.usage.to_dict() if isinstance(state.usage, Usage) else (state.usage or None)
    handler = state.handler
    if handler is not None and hasattr(handler, "first_content"):
        facts = _Facts(True, handler.first_content, getattr(handler.exchange, "model", None))
    elif flow.response is None or flow.response.status_code >= 400:
        facts = _Facts(True, None, None)
    else:
        text = state.upstream_text
        if text is not None:
            body = text.encode() if len(text) <= _MODEL_SCAN_LIMIT else None
        else:
            body = _small_body(flow.response)
        facts = _Facts(False, None, _answered_model(body))
    return _measures(flow, facts, usage, state.upstream_model or state.client_model,
                     answered=state.stop is not None or usage is not None, priced=priced,
                     protocol=state.upstream_protocol)


def _small_body(resp: Any) -> bytes | None:
    """A complete body decoded only up to the scan limit (this runs on the event loop): a small
    compressed body that inflates further (a bomb passed through) is not read."""
    raw = resp.raw_content
    if raw is None or len(raw) > _MODEL_SCAN_LIMIT:
        return None
    try:
        return decode(raw, resp.headers.get("content-encoding"), _MODEL_SCAN_LIMIT)
    except BodyError:
        return None


def state_summary(state: Any) -> str:
    m = state.metrics or {}
    usage = state.usage.to_dict() if isinstance(state.usage, Usage) else (state.usage or {})
    inp = usage.get("input_total")
    stop = state.stop
    return scrub(escape(summary_line(
        _model_label(state.client_model, m.get("response_model") or state.upstream_model),
        _stop_label(stop.reason.value if stop else None, stop.category if stop else None),
        inp if inp is not None else usage.get("input"), usage.get("output"), m.get("ttft_ms"), m.get("cost_usd"),
        (*_session_note(state.session["id"] if state.session else None),
         *(_notes(stop.reason.value, stop.message, stop.detail) if stop else ())))), state.secrets) or ""


@dataclass(slots=True)
class _Facts:
    streamed: bool  # TTFT is the first content event (unknown when none came)
    first_content: float | None
    response_model: str | None


def _measures(flow: Any, facts: _Facts, usage: dict[str, Any] | None, model: str | None, *,
              answered: bool, priced: bool = True, protocol: Any = None) -> dict[str, Any]:
    req, resp = flow.request, getattr(flow, "response", None)
    start = getattr(req, "timestamp_start", None)
    headers = getattr(resp, "timestamp_start", None) if resp is not None else None
    end = getattr(resp, "timestamp_end", None) if resp is not None else None
    err = getattr(flow, "error", None)
    if end is None and err is not None:
        end = getattr(err, "timestamp", None)
    if end is None and getattr(flow, "live", False):
        end = time.time()
    usage = usage or {}
    output = usage.get("output")
    t = timings(start, headers, facts.first_content, end, output, streamed=facts.streamed)
    if not answered:
        c = Cost(None, note="no answer")
    elif not priced:
        c = Cost(None, note="price database not loaded")
    else:
        c = price(facts.response_model or model, _pretty_host(req),
                  input_total=usage.get("input_total"), output=output,
                  cache_read=usage.get("cache_read"), cache_write=usage.get("cache_write"),
                  vendor=get(protocol).wire.credentials.vendor if protocol is not None else None)
    return {"start": start, "headers_ms": t.headers_ms, "ttft_ms": t.ttft_ms, "duration_ms": t.duration_ms,
            "output_tps": t.output_tps, "response_model": facts.response_model, "cost_usd": c.usd,
            "cost_model": c.model, "cost_provider": c.provider, "cost_note": c.note}


def _pretty_host(req: Any) -> str | None:
    """``req.pretty_host``: the Host header's host, else the request's (the header read without the
    validation mitmproxy's property repeats on every read)."""
    if not isinstance(req, http.Request):
        return getattr(req, "pretty_host", None)
    authority = req.host_header
    return url.parse_authority(authority, check=False)[0] if authority else req.host


def measure_flow(flow: Any, rec: FlowRecord) -> MetricsRecord:
    """The measures of a finished flow from its record (a recording without them, or a plain capture)."""
    resp = getattr(flow, "response", None)
    if rec.upstream_chunks is not None:  # a recorded stream: find the chunk with the first content
        proto = rec.upstream_protocol or rec.client_protocol
        body = rec.upstream_body(flow)
        off, model = first_content_offset(proto, body, rec.upstream_chunks) if proto and body else (None, None)
        headers = getattr(resp, "timestamp_start", None) if resp is not None else None
        first = headers + off / 1000.0 if off is not None and headers is not None else None
        facts = _Facts(True, first, model)
    elif resp is None or resp.status_code >= 400:
        facts = _Facts(True, None, None)  # an error answer has no first token: TTFT stays unknown
    else:
        facts = _Facts(False, None, _answered_model(rec.upstream_body(flow)))
    usage = rec.usage.model_dump() if rec.usage is not None else None
    return MetricsRecord.model_validate(_measures(flow, facts, usage, rec.upstream_model or rec.client_model,
                                                  answered=rec.stop is not None or usage is not None,
                                                  protocol=rec.upstream_protocol))


def _model_label(asked: str | None, answered: str | None) -> str | None:
    if asked and answered and asked != answered:
        return f"{asked}→{answered}"
    return answered or asked


#: longest error message the comment repeats (the record and the log line keep it whole)
_NOTE_CHARS = 160


def _notes(reason: str, message: str | None, detail: Any) -> tuple[str, ...]:
    """What the comment adds for an HTTP error: when to retry (the upstream's ``retry-after``), and
    for a rejected request the provider's message (why it was refused, where the key came from)."""
    out = []
    d = detail if isinstance(detail, dict) else {}
    if d.get("retry_after_ms"):
        out.append(f"retry after {d['retry_after_ms']} ms")
    elif d.get("retry_after"):
        after = str(d["retry_after"])
        out.append(f"retry after {after} s" if after.isdigit() else f"retry after {after}")
    if message and (reason == "rejected" or (reason == "interrupted" and "status" in d)):
        out.append(message if len(message) <= _NOTE_CHARS else message[:_NOTE_CHARS - 1] + "…")
    return tuple(out)


def _session_note(session: str | None) -> tuple[str, ...]:
    """The session id in the comment: mitmweb's ``~comment <id>`` finds a session's flows."""
    return (f"session {session}",) if session else ()


def _stop_label(reason: str | None, category: str | None) -> str | None:
    return f"{reason} ({category})" if reason and category and category != reason else reason


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
    """``stop · in→out tok · TTFT · cost · model`` (and the notes of an HTTP error) for the flow list
    (control characters escaped)."""
    m = rec.metrics or MetricsRecord()
    u = rec.usage
    stop = rec.stop
    inp = (u.input_total if u.input_total is not None else u.input) if u is not None else None
    return escape(summary_line(_model_label(rec.client_model, m.response_model or rec.upstream_model),
                               _stop_label(stop.reason if stop else None, stop.category if stop else None),
                               inp, u.output if u is not None else None, m.ttft_ms, m.cost_usd,
                               (*_session_note(rec.session.id if rec.session else None),
                                *(_notes(stop.reason, stop.message, stop.detail) if stop else ()))))


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
