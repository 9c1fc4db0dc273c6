"""Reports and exports: from the addon's metadata, or derived on the fly from plain captures."""

from __future__ import annotations

import json

import orjson
from mitmproxy import http
from mitmproxy import io as mio
from mitmproxy.test import tflow, tutils

from proxai_mitm.__main__ import main
from proxai_mitm.reporting.report import (
    export_command,
    export_jsonl,
    format_table,
    protocol_from_path,
    read_flows,
    report_command,
    rows,
)

REFUSAL_SSE = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"refusal",'
    b'"stop_sequence":null},"usage":{"output_tokens":0}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
CHAT_LENGTH = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-2024",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "Alabama, Alaska"},
                            "finish_reason": "length"}],
               "usage": {"prompt_tokens": 20, "completion_tokens": 50, "total_tokens": 70}}
CHAT_TOOL_REQ = {"model": "gpt-4o", "messages": [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}


def flow(path, req_body, resp_body=None, *, status=200, ctype="application/json", meta=None, host="api.x.com",
         err=False, method=b"POST"):
    req = tutils.treq(method=method, scheme=b"https", host=host, port=443, path=path.encode(),
                      headers=http.Headers([(b"content-type", b"application/json")]),
                      content=req_body if isinstance(req_body, bytes) else orjson.dumps(req_body),
                      timestamp_start=1700000000.0, timestamp_end=1700000000.1)
    resp = False
    if resp_body is not False:
        resp = tutils.tresp(status_code=status, headers=http.Headers([(b"content-type", ctype.encode())]),
                            content=resp_body, timestamp_start=1700000000.5, timestamp_end=1700000001.5)
    f = tflow.tflow(req=req, resp=resp, err=err)
    if meta is not None:
        f.metadata["proxai"] = meta
    return f


def sample_flows():
    annotated = flow(
        "/v1/messages",
        {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
        b'{"id":"chatcmpl-x","object":"chat.completion","choices":[]}',
        meta={"client_protocol": "openai_chat_completions", "upstream_protocol": "anthropic_messages",
              "route": "chat-on-claude",
              "client_request": json.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}),
              "upstream_response": REFUSAL_SSE.decode(),
              "stop": {"reason": "refusal", "raw": "refusal", "category": "cyber", "message": "no",
                       "recommended_model": None, "detail": {}},
              "usage": {"input": 12, "cache_read": None, "cache_write": None, "output": 0, "reasoning": None,
                        "input_total": 12},
              "warnings": ["w1"]},
    )
    plain_sse = flow("/v1/messages", {"model": "claude-x", "max_tokens": 10, "stream": True,
                                      "messages": [{"role": "user", "content": "do it"}]},
                     REFUSAL_SSE, ctype="text/event-stream")
    plain_chat = flow("/openai/deployments/gpt4/chat/completions?api-version=2024-10-21", CHAT_TOOL_REQ,
                      orjson.dumps(CHAT_LENGTH))
    rate_limited = flow("/v1/responses", {"model": "gpt-5", "input": "hi"},
                        b'{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}',
                        status=429)
    cut = flow("/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
               False, err=True)
    not_llm = flow("/v1/models", b"", b'{"data":[]}', method=b"GET")
    other = flow("/index.html", b"", b"<html></html>", ctype="text/html")
    missing_body = flow("/v1/messages", {"model": "claude-x", "max_tokens": 5, "stream": True,
                                         "messages": [{"role": "user", "content": "x"}]}, None,
                        ctype="text/event-stream")
    return [annotated, plain_sse, plain_chat, rate_limited, cut, not_llm, other, missing_body]


def test_protocol_from_path():
    assert protocol_from_path("/v1/chat/completions").value == "openai_chat_completions"
    assert protocol_from_path("/api/v1/chat/completions?x=1").value == "openai_chat_completions"
    assert protocol_from_path("/v1/responses").value == "openai_responses"
    assert protocol_from_path("/v1/messages").value == "anthropic_messages"
    assert protocol_from_path("/v1/messages/count_tokens") is None
    assert protocol_from_path("/v1/responses/resp_123") is None
    assert protocol_from_path("/v1/models") is None


def test_rows_from_metadata_and_derived():
    rs = rows(sample_flows())
    assert len(rs) == 6  # /v1/models GET and the HTML page are not LLM exchanges
    a, s, c, r, cut, miss = rs
    assert (a["client_protocol"], a["upstream_protocol"], a["route"]) == (
        "openai_chat_completions", "anthropic_messages", "chat-on-claude")
    assert (a["model"], a["reason"], a["category"], a["input_tokens"], a["output_tokens"]) == (
        "gpt-5 → claude-sonnet-4-5", "refusal", "cyber", 12, 0)
    assert (s["client_protocol"], s["reason"], s["category"], s["input_tokens"]) == (
        "anthropic_messages", "refusal", "refusal", 12)
    assert (c["client_protocol"], c["model"], c["reason"], c["input_tokens"], c["output_tokens"]) == (
        "openai_chat_completions", "gpt-4o", "max_output", 20, 50)
    assert c["path"] == "/openai/deployments/gpt4/chat/completions"
    assert (r["status"], r["reason"], r["category"]) == (429, "interrupted", "rate_limit_exceeded")
    assert cut["reason"] == "interrupted" and cut["status"] is None
    assert miss["reason"] is None  # a streamed body that was not stored
    assert a["time"].startswith("20")


def test_format_table_is_aligned():
    table = format_table(rows(sample_flows()))
    lines = table.splitlines()
    assert lines[0].split() == ["time", "api", "model", "HTTP", "stop", "in→out", "TTFT", "duration", "cost"]
    assert set(lines[1]) <= {"-", " "}
    assert "chat→anth" in table and "refusal" in table and "max_output" in table
    col = lines[0].index("stop")
    assert all(ln[col:].startswith(("refusal", "max_output", "interrupted", "?", "stop"))
               for ln in lines[2:8])
    assert lines[8].startswith("6 exchange(s): ") and "totals per model" in lines
    assert format_table([]) == "no LLM flows"
    assert report_command(sample_flows()) == table


def test_export_jsonl(tmp_path):
    out = tmp_path / "x.jsonl"
    assert export_jsonl(sample_flows(), out) == 6
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    a, s, c, r, cut, _missing = recs
    assert a["client_protocol"] == "openai_chat_completions" and a["upstream_protocol"] == "anthropic_messages"
    assert a["request"]["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert a["stop"]["reason"] == "refusal" and a["usage"]["input"] == 12 and a["warnings"] == ["w1"]
    assert a["timing"]["first_byte_ms"] == 500.0 and a["timing"]["duration_ms"] == 1500.0
    assert c["request"]["system"] == "sys" and c["request"]["tools"] == ["get_weather"]
    roles = [m["role"] for m in c["request"]["messages"]]
    assert roles[0] == "user" and "assistant" in roles
    calls = [p for m in c["request"]["messages"] for p in m["content"] if p["type"] == "tool_call"]
    results = [p for m in c["request"]["messages"] for p in m["content"] if p["type"] == "tool_result"]
    assert calls == [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert results[0]["call_id"] == "call_1" and results[0]["content"] == [{"type": "text", "text": "18C"}]
    assert c["response"]["parts"] == [{"type": "text", "text": "Alabama, Alaska"}]
    assert c["stop"]["reason"] == "max_output" and c["usage"]["output"] == 50
    assert r["response"]["error"]["kind"] == "rate_limit"
    assert cut["stop"]["reason"] == "interrupted" and cut["response"] is None
    assert s["stream"] is True and s["stop"]["reason"] == "refusal"
    msg = export_command(sample_flows(), str(tmp_path / "y.jsonl"))
    assert msg == f"exported 6 LLM exchange(s) to {tmp_path / 'y.jsonl'}"


def test_cli_report_and_export(tmp_path, capsys):
    path = tmp_path / "rec.mitm"
    with open(path, "wb") as fh:
        w = mio.FlowWriter(fh)
        for f in sample_flows():
            w.add(f)
    assert len(read_flows(path)) == 8
    assert main(["report", str(path)]) == 0
    assert "6 exchange(s)" in capsys.readouterr().out
    assert main(["export", str(tmp_path), str(tmp_path / "out.jsonl")]) == 0  # a folder works too
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 6
    assert main(["report", str(tmp_path / "nope.mitm")]) == 1


def test_documented_filters_work():
    """The filter table of docs/recording.md, on flows annotated the way the addon annotates them."""
    from mitmproxy import flowfilter

    from proxai_core import classify_stop
    from proxai_mitm.flow.metrics import summary_line

    def annotated(raw, category=None, marker="", route=None, path="/v1/messages", status=200):
        f = flow(path, {"model": "m", "messages": []}, b"{}", status=status)
        st = classify_stop(raw, category=category, message="msg")
        f.metadata["proxai"] = {"client_protocol": "openai_chat_completions",
                                "upstream_protocol": "anthropic_messages", "route": route,
                                "stop": st.to_dict(), "usage": None, "warnings": []}
        stop = st.reason.value + (f" ({st.category})" if st.category and st.category != st.reason.value else "")
        f.comment = summary_line("m", stop, 10, 2, 120.0, None)  # as the addon writes it (measure.py)
        f.marked = marker
        return f

    flows = [annotated("refusal", "cyber", ":no_entry:", "codex-on-claude"),
             annotated("max_tokens", None, ":scissors:"),
             annotated("model_context_window_exceeded", None, ":package:"),
             annotated("end_turn"),
             annotated("tool_use", path="/v1/chat/completions"),
             annotated("error", "rate_limit", ":electric_plug:", status=429),
             flow("/index.html", b"", b"<html/>")]
    expect = {
        '~comment ^refusal': [0],
        '~comment "^(max_output|context_full)"': [1, 2],
        '!~comment "^(end_turn|tool_use)" & ~meta proxai': [0, 1, 2, 5],
        "~comment cyber": [0],
        "~marked": [0, 1, 2, 5],
        "~marker :no_entry:": [0],
        "~meta proxai": [0, 1, 2, 3, 4, 5],
        '~meta "reason.: .max_output"': [1],
        '~meta "category.: .cyber"': [0],
        '~meta "route.: .codex-on-claude"': [0],
        '~u /v1/messages & ~comment ^refusal': [0],
        '~comment "cost unknown"': [0, 1, 2, 3, 4, 5],
        "~c 429": [5],
    }
    for expr, want in expect.items():
        flt = flowfilter.parse(expr)
        assert flt is not None, expr
        assert [i for i, f in enumerate(flows) if flt(f)] == want, expr


# ----------------------------------------------------------------------------- hostile values
def _hostile_recording(tmp_path, model, message):
    """A recording whose model name and stop message come from a hostile upstream."""
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": message},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    f = flow("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "x"}]},
             orjson.dumps(body))
    path = tmp_path / "hostile.mitm"
    with open(path, "wb") as fh:
        mio.FlowWriter(fh).add(f)
    return path


def test_csv_cells_never_run_as_spreadsheet_formulas(tmp_path, capsys):
    import csv
    import io

    starts = ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(A1:A9)", "+cmd|' /C calc'!A0", "-2+3", "\t=1+1",
              "\r=1+1", "  =1+1"]
    for model in starts:
        path = _hostile_recording(tmp_path, model, "=cmd|' /C calc'!A0")
        assert main(["report", str(path), "-f", "csv"]) == 0
        row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
        for key in ("model", "message"):
            cell = row[key]
            assert cell.startswith("'"), (key, cell)
        assert row["input_tokens"] == "3" and row["status"] == "200"  # numbers stay numbers
    from proxai_mitm.reporting.reportfmt import to_csv

    out = to_csv([{"model": "gpt-4o", "message": "-", "input_tokens": -1, "route": "a=b"}])
    row = next(csv.DictReader(io.StringIO(out)))
    assert row["model"] == "gpt-4o" and row["route"] == "a=b" and row["input_tokens"] == "-1"
    assert row["message"] == "'-"


def test_markdown_escapes_html(tmp_path, capsys):
    path = _hostile_recording(tmp_path, "<script>alert(1)</script>&amp;", "<img src=x onerror=alert(1)>")
    assert main(["report", str(path), "-f", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "<" not in md and ">" not in md.replace("→", "")  # no tag can open
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp;" in md
    assert len(md.splitlines()[2].split(" | ")) == 9  # the row keeps its 9 cells


def test_export_upstream_model_is_the_answered_model(tmp_path):
    """``upstream_model``: the model the upstream answered with, else the one sent to it; never null
    when either is known (it was null whenever no route mapped the model)."""
    from pathlib import Path

    flows_dir = Path(__file__).resolve().parents[3] / "flows"
    out = tmp_path / "x.jsonl"
    assert export_jsonl(read_flows(flows_dir), out) == 16
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    for ex in recs:
        answered = ex["metrics"]["response_model"] or (ex["response"] or {}).get("model")
        assert ex["upstream_model"] == (answered or ex["model"]), ex["id"]
    assert {ex["upstream_model"] for ex in recs} >= {"gpt-4o-2024-08-06", "claude-sonnet-4-5-20250929"}
    export_jsonl(sample_flows(), out)
    a, s, c, r, cut, _missing = [json.loads(line) for line in out.read_text().splitlines()]
    assert a["model"] == "gpt-5" and a["upstream_model"] == "claude-x"  # asked gpt-5, sent sonnet, answered x
    assert c["upstream_model"] == "gpt-4o-2024" and r["upstream_model"] == "gpt-5"
    assert cut["upstream_model"] == "gpt-4o"
    assert [x["model"] for x in rows(sample_flows()) if x["route"]] == ["gpt-5 → claude-sonnet-4-5"]
