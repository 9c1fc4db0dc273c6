"""annotate.py + translate.py: what a saved flow holds (the record, the client body, pacing, cut flags)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from mitmproxy import flow as mflow
from mitmproxy import http
from mitmproxy import io as mio

from proxai_mitm.flow.record import FlowRecord

from ..helpers import ANTH, BODIES, CHAT, RESP, feed, json_bytes, make_flow, respond, sse_bytes

SECRET = "sk-client-secret-123"  # the Authorization of make_flow


def run(tctx: Any, res: Any) -> Any:
    if res is not None and hasattr(res, "__await__"):
        return tctx.master.event_loop.run_until_complete(res)
    return res


def stored(f: http.HTTPFlow) -> bytes:
    """The bytes `-w` writes for this flow."""
    buf = io.BytesIO()
    mio.FlowWriter(buf).add(f)
    return buf.getvalue()


def reread(f: http.HTTPFlow) -> http.HTTPFlow:
    return next(iter(mio.FlowReader(io.BytesIO(stored(f))).stream()))


def test_translated_stream_saves_client_body_upstream_bytes_and_pacing(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.requestheaders(f)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-length", "999"), ("x-request-id", "req_1")])
    addon.responseheaders(f)
    client = feed(f, sse_bytes(CHAT, "tool"), step=50)
    addon.response(f)
    g = reread(f)
    m = g.metadata["proxai"]
    assert g.response.content == client  # what the client got (mitmproxy itself keeps nothing)
    assert b"event: message_start" in client and b"tool_use" in client
    assert json.loads(m["client_request"]) == {**BODIES[ANTH], "stream": True}
    assert json.loads(g.request.content)["messages"]  # the translated (Chat) request sent upstream
    assert g.request.path == "/v1/chat/completions"
    assert m["upstream_response"] == sse_bytes(CHAT, "tool").decode()
    assert m["upstream_status"] == 200
    assert ["content-length", "999"] in m["upstream_headers"] and ["x-request-id", "req_1"] in m["upstream_headers"]
    assert "content-length" not in g.response.headers  # the client's headers
    chunks = m["upstream_chunks"]
    assert len(chunks) > 1 and sum(nb for _, nb in chunks) == len(m["upstream_response"].encode())
    assert all(b[0] >= a[0] for a, b in zip(chunks, chunks[1:]))
    assert m["stop"]["reason"] == "tool_use" and m["upstream_cut"] is None


def test_translated_json_keeps_upstream_status_and_headers(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(RESP)
    addon.request(f)
    respond(f, 529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "application/json", [("retry-after", "3")])
    addon.responseheaders(f)
    addon.response(f)
    m = reread(f).metadata["proxai"]
    assert f.response.status_code == 503 and m["upstream_status"] == 529
    assert ["retry-after", "3"] in m["upstream_headers"]


@pytest.mark.parametrize("msg, cut", [
    ("HTTP/1 protocol error: peer closed connection without sending complete message body", True),
    ("Client disconnected.", False),
])
def test_disconnect_keeps_partial_client_body_and_cut_flag(addon, msg, cut):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    data = sse_bytes(CHAT)
    out = f.response.stream(data[:400])
    f.error = mflow.Error(msg)
    addon.error(f)
    m = reread(f).metadata["proxai"]
    assert m["upstream_cut"] is cut
    assert f.response.raw_content == b"".join(out) and b"message_start" in f.response.raw_content
    assert m["stop"]["reason"] == "interrupted"


def test_passthrough_stream_keeps_wire_bytes(addon):
    import gzip

    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-encoding", "gzip")])
    addon.responseheaders(f)
    wire = gzip.compress(sse_bytes(ANTH, "refusal"))
    feed(f, wire, step=17)
    addon.response(f)
    assert f.response.raw_content == wire and f.response.headers["content-encoding"] == "gzip"
    assert f.response.get_content() == sse_bytes(ANTH, "refusal")
    # the client got the upstream's bytes: the record keeps no copy and reads them from the flow
    assert f.metadata["proxai"]["upstream_response"] is None
    assert FlowRecord.of(f).upstream_body(f) == sse_bytes(ANTH, "refusal")


# ----------------------------------------------------------------------------- the annotation itself
def _annotated(addon, body: bytes, status: int = 200):
    f = make_flow(ANTH)
    addon.request(f)
    respond(f, status, body, "application/json")
    addon.responseheaders(f)
    addon.run(addon.response(f))
    return f


def test_comment_marker_and_one_log_line(addon, caplog):
    import logging

    from ..helpers import json_bytes

    caplog.set_level(logging.INFO, logger="proxai_mitm.addons.annotate")
    f = _annotated(addon, json_bytes(ANTH, "refusal"))
    assert f.comment.startswith("refusal") and f.marked == ":no_entry:"
    addon.run(addon.response(f))  # a second response hook (e.g. a replayed flow) changes nothing
    assert caplog.text.count("proxai: anthropic_messages → anthropic_messages") == 1
    g = _annotated(addon, json_bytes(ANTH, "text"))
    assert g.marked == "" and g.comment.startswith("end_turn")


def test_control_characters_never_reach_the_terminal(addon, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="proxai_mitm.addons.annotate")
    evil = "m\x1b]8;;http://x\x07\x1b[31m"
    body = {"id": "x", "type": "message", "role": "assistant", "model": evil,
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "refusal", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}
    f = make_flow(ANTH, body={**BODIES[ANTH], "model": evil})
    addon.request(f)
    respond(f, 200, json.dumps(body).encode(), "application/json")
    addon.responseheaders(f)
    addon.run(addon.response(f))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("proxai:"))
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line


def test_non_llm_flows_get_no_record(addon):
    f = make_flow(CHAT, body={"hello": "world"}, path="/api/other")
    addon.request(f)
    respond(f, 200, b"{}", "application/json")
    addon.responseheaders(f)
    addon.run(addon.response(f))
    assert "proxai" not in f.metadata and FlowRecord.of(f) is None


def test_annotator_alone_writes_the_state_it_finds():
    from mitmproxy.test import taddons

    from proxai_core import Protocol, StopInfo, StopReason
    from proxai_mitm.addons.annotate import Annotator
    from proxai_mitm.flow.state import FlowState, set_flow_state

    a = Annotator()
    with taddons.context(a):
        f = make_flow(ANTH)
        respond(f, 200, b"{}", "application/json")
        set_flow_state(f, FlowState("generate", Protocol(ANTH), Protocol(CHAT), "r", translation="json",
                               stop=StopInfo(StopReason.MAX_OUTPUT, raw="length")))
        a.response(f)
        assert f.marked == ":scissors:" and f.comment.startswith("max_output")
        rec = FlowRecord.of(f)
        assert rec.route == "r" and rec.translation == "json" and rec.stop_info().raw == "length"
        f.marked = ":scissors:"
        f.metadata.clear()
        a.error(f)  # once per flow
        assert "proxai" not in f.metadata


def test_log_line_built_only_when_a_handler_shows_info(monkeypatch):
    """termlog_verbosity=warn (every handler above INFO): the line is not even formatted."""
    import logging

    from proxai_mitm.addons import annotate as ann

    lg = logging.getLogger("proxai_test_lazy_log_line")
    lg.propagate, lg.level = False, logging.DEBUG
    handler = logging.NullHandler(logging.WARNING)
    lg.addHandler(handler)
    monkeypatch.setattr(ann, "logger", lg)
    try:
        assert not ann._info_shown()
        handler.setLevel(logging.INFO)
        assert ann._info_shown()
        lg.setLevel(logging.WARNING)
        assert not ann._info_shown()
    finally:
        lg.removeHandler(handler)


# ----------------------------------------------------------------------------- sessions
def test_the_session_header_is_read_before_a_route_rewrites_the_request(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, headers=[("X-Claude-Code-Session-Id", "5f0c9a8e-2d4b-4e1a-9c3f-7b6d1e2a4c80")])
    addon.requestheaders(f)
    addon.request(f)
    f.request.headers.pop("x-claude-code-session-id", None)  # a route toward another host drops it
    respond(f, 200, json_bytes(CHAT), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    s = reread(f).metadata["proxai"]["session"]
    assert s["source"] == "header:x-claude-code-session-id" and len(s["id"]) == 12
    assert s["prefix"]["message_count"] == 1 and len(s["prefix"]["messages"]) == 1
    assert FlowRecord.of(f).session.id == s["id"]
    assert f.comment.endswith(f" · session {s['id']}")  # mitmweb: ~comment <id> lists the session


def test_a_pass_through_generation_gets_a_derived_session_and_no_warning(addon):
    flows = [make_flow(ANTH), make_flow(ANTH, body={**BODIES[ANTH], "messages": [
        *BODIES[ANTH]["messages"], {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]})]
    for f in flows:
        addon.requestheaders(f)
        addon.request(f)
        respond(f, 200, json_bytes(ANTH), "application/json")
        addon.responseheaders(f)
        addon.response(f)
    a, b = (f.metadata["proxai"] for f in flows)
    assert a["session"]["source"] == "prefix" and a["session"]["id"] == b["session"]["id"]
    assert a["warnings"] == [] and a["translation"] == "observe"
    assert b["session"]["prefix"]["messages"][:1] == a["session"]["prefix"]["messages"]


def test_a_big_request_is_fingerprinted_off_the_event_loop(addon, monkeypatch):
    import proxai_mitm.addons.annotate as annotate_mod

    monkeypatch.setattr(annotate_mod, "SESSION_THREAD_BYTES", 10)
    f = make_flow(ANTH)
    addon.requestheaders(f)
    addon.request(f)
    respond(f, 200, json_bytes(ANTH), "application/json")
    addon.responseheaders(f)
    res = addon.response(f)
    assert res is not None and "proxai" not in f.metadata  # the flow waits for its worker, nothing else does
    addon.run(res)
    m = f.metadata["proxai"]
    assert m["session"]["source"] == "prefix" and f.comment.endswith(f" · session {m['session']['id']}")


def test_other_kinds_get_no_session(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, path="/v1/models", method="GET", body=b"", headers=[("session_id", "s-1")])
    addon.requestheaders(f)
    addon.request(f)
    addon.response(f)
    m = f.metadata.get("proxai")
    assert m is not None and m["kind"] != "generate" and m["session"] is None
