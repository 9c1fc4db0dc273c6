"""The attempts of a route with fallbacks in the report rows, the text table, the HTML report and the
OpenTelemetry span attributes."""

from __future__ import annotations

import orjson
from mitmproxy import http
from mitmproxy.test import tflow, tutils

from proxai_mitm.flow.record import SCHEMA_VERSION, FlowRecord
from proxai_mitm.reporting.htmlreport import render_html
from proxai_mitm.reporting.otel import attributes, span_facts
from proxai_mitm.reporting.report import format_table, rows

ANSWER = {"id": "msg_1", "type": "message", "role": "assistant", "model": "gpt-5", "content": [
    {"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1}}
ATTEMPTS = [
    {"upstream": "claude", "protocol": "anthropic_messages", "host": "api.anthropic.com", "status": 529,
     "reason": "HTTP 529: Overloaded", "duration_ms": 80.0, "retry_after": None},
    {"upstream": "claude#1", "protocol": "openai_responses", "host": "api.openai.com", "status": 200,
     "reason": "answered", "duration_ms": 400.0, "retry_after": None},
]


def fallback_flow():
    req = tutils.treq(method=b"POST", scheme=b"https", host="api.openai.com", port=443, path=b"/v1/responses",
                      headers=http.Headers([(b"content-type", b"application/json")]),
                      content=orjson.dumps({"model": "gpt-5", "input": "hi"}),
                      timestamp_start=1700000000.0, timestamp_end=1700000000.1)
    resp = tutils.tresp(status_code=200, headers=http.Headers([(b"content-type", b"application/json")]),
                        content=orjson.dumps(ANSWER), timestamp_start=1700000000.5, timestamp_end=1700000001.0)
    f = tflow.tflow(req=req, resp=resp)
    f.metadata["proxai"] = {
        "version": SCHEMA_VERSION, "kind": "generate", "client_protocol": "anthropic_messages",
        "upstream_protocol": "openai_responses", "route": "claude", "translation": "json",
        "client_model": "claude-x", "upstream_model": "gpt-5", "stream": False,
        "stop": {"reason": "end_turn", "raw": "completed", "category": None, "message": None,
                 "recommended_model": None, "detail": {"fallback": "claude#1 (openai_responses)"}},
        "usage": {"input": 3, "output": 1, "input_total": 3}, "attempts": ATTEMPTS,
    }
    return f


def test_rows_and_table_show_the_fallback():
    (row,) = rows([fallback_flow()])
    assert row["fallback"] == "claude#1 (openai_responses)"
    assert [a["status"] for a in row["attempts"]] == [529, 200]
    assert "end_turn via claude#1" in format_table([row])  # (the column may cut the rest)


def test_html_report_lists_the_attempts():
    f = fallback_flow()
    html = render_html([f], rows([f]))
    assert "attempts: claude 529 → claude#1 200" in html


def test_span_carries_the_attempts():
    f = fallback_flow()
    a = attributes(span_facts(f, FlowRecord.of(f)))
    assert a["proxai.attempt.upstreams"] == ["claude", "claude#1"]
    assert a["proxai.attempt.statuses"] == [529, 200]
    assert a["proxai.attempt.reasons"] == ["HTTP 529: Overloaded", "answered"]
    assert a["proxai.fallback"] == "claude#1 (openai_responses)"
