"""translate.py: the planned response translation (streams, bodies, errors) of every flow kind."""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import tutils

from proxai_mitm.flow.record import SCHEMA_VERSION, FlowRecord
from proxai_mitm.flow.state import flow_state
from proxai_mitm.wire.streaming import StreamHandler
from tests.fake_upstream import RECORDED, _enc_event

from ..helpers import (
    ANTH,
    BODIES,
    CHAT,
    ENCODINGS,
    RESP,
    bomb,
    feed,
    json_bytes,
    make_flow,
    respond,
    run,
    sse_bytes,
)


def test_passthrough_json_is_annotated_not_rewritten(addon, caplog):
    caplog.set_level(logging.INFO)
    f = make_flow(ANTH)
    addon.request(f)
    assert f.request.path == "/v1/messages" and f.request.headers["authorization"].startswith("Bearer")
    respond(f, 200, json_bytes(ANTH, "refusal"), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    m = f.metadata["proxai"]
    assert m["client_protocol"] == m["upstream_protocol"] == ANTH and m["route"] is None
    assert m["stop"]["reason"] == "refusal" and m["stop"]["category"] == "cyber"
    # pass-through: the flow shows both bodies, the record keeps no copy and reads them from the flow
    assert m["client_request"] is None and m["upstream_response"] is None
    rec = FlowRecord.of(f)
    assert json.loads(rec.client_body(f)) == BODIES[ANTH]
    assert json.loads(rec.upstream_body(f))["stop_reason"] == "refusal"
    assert m["usage"]["output"] == 9 and m["version"] == SCHEMA_VERSION and m["translation"] == "observe"
    assert f.comment.startswith("refusal (cyber)") and f.marked == ":no_entry:"
    assert json.loads(f.response.content)["stop_reason"] == "refusal"  # untouched
    assert "anthropic_messages → anthropic_messages (pass-through), claude-x → claude-sonnet-4-5-20250929, 200: " \
           "refusal (cyber)" in caplog.text
    json.dumps(f.metadata)  # plain JSON values only
    assert "sk-client-secret-123" not in json.dumps(f.metadata)


def test_passthrough_stream_forwards_bytes_unchanged_and_observes(addon):
    f = make_flow(CHAT, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    assert isinstance(f.response.stream, StreamHandler)
    data = sse_bytes(CHAT, "max")
    assert feed(f, data) == data
    addon.response(f)
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "max_output" and f.marked == ":scissors:"
    assert m["upstream_response"] is None and FlowRecord.of(f).upstream_body(f) == data


@pytest.mark.parametrize("client, upstream", [(CHAT, ANTH), (ANTH, RESP), (RESP, CHAT)])
def test_translated_json_response(addon, client, upstream):
    addon.configure(proxai_target=upstream)
    f = make_flow(client)
    addon.request(f)
    respond(f, 200, json_bytes(upstream, "tool"), "application/json")
    addon.responseheaders(f)
    assert f.response.stream is False or f.response.stream is None
    addon.response(f)
    out = json.loads(f.response.content)
    if client == CHAT:
        call = out["choices"][0]["message"]["tool_calls"][0]
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    elif client == ANTH:
        assert out["content"][0]["type"] == "tool_use" and out["stop_reason"] == "tool_use"
    else:
        assert [o["type"] for o in out["output"]] == ["function_call"]
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "tool_use" and f.marked == ""
    assert (m["client_protocol"], m["upstream_protocol"]) == (client, upstream)
    assert json.loads(m["upstream_response"]) == RECORDED[upstream]["tool"]["json"]


@pytest.mark.parametrize("client, upstream", [(ANTH, CHAT), (CHAT, RESP), (RESP, ANTH)])
def test_translated_stream(addon, client, upstream):
    addon.configure(proxai_target=upstream)
    f = make_flow(client, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-length", "999"), ("content-encoding", "identity")])
    addon.responseheaders(f)
    h = f.response.headers
    assert "content-length" not in h and h["transfer-encoding"] == "chunked"
    assert h["content-type"].startswith("text/event-stream")
    out = feed(f, sse_bytes(upstream, "text"))
    text = out.decode()
    if client == ANTH:
        assert "message_start" in text and "message_stop" in text
    elif client == CHAT:
        assert text.rstrip().endswith("data: [DONE]")
    else:
        assert "response.completed" in text
    addon.response(f)
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "end_turn" and m["upstream_response"] == sse_bytes(upstream).decode()
    assert f.comment.startswith("end_turn")


def test_stream_headers_for_http2_client_have_no_transfer_encoding(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True, http_version="HTTP/2.0")
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("transfer-encoding", "chunked")])
    addon.responseheaders(f)
    assert "transfer-encoding" not in f.response.headers


def test_gzip_stream_is_decoded_defensively(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-encoding", "gzip")])
    addon.responseheaders(f)
    assert "content-encoding" not in f.response.headers
    out = feed(f, gzip.compress(sse_bytes(CHAT)), step=13)
    assert b"message_stop" in out
    addon.response(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "end_turn"


def test_exception_in_stream_becomes_native_error_frame(addon, caplog):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    handler = f.response.stream

    def boom(_chunk: bytes) -> bytes:
        raise RuntimeError("kaputt")

    handler.exchange.feed = boom
    caplog.set_level(logging.ERROR)
    out = feed(f, sse_bytes(CHAT))
    assert b"event: error" in out and b"kaputt" in out
    assert out.count(b"event: error") == 1
    addon.response(f)
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "interrupted" and any("kaputt" in w for w in m["warnings"])
    assert "kaputt" in caplog.text


def test_upstream_eof_before_terminal_is_native_error_event(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    events = RECORDED[CHAT]["text"]["sse"]
    out = feed(f, b"".join(_enc_event(e) for e in events[:3]))
    assert b"event: error" in out and b"message_stop" not in out
    addon.response(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted" and f.marked == ":electric_plug:"


def test_json_answer_to_streaming_client_becomes_sse(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, json_bytes(CHAT), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    assert f.response.headers["content-type"].startswith("text/event-stream")
    assert b"event: message_start" in f.response.content and b"message_stop" in f.response.content
    assert f.metadata["proxai"]["stop"]["reason"] == "end_turn"


def test_sse_answer_to_non_streaming_client_becomes_json(addon):
    addon.configure(proxai_target=RESP)
    f = make_flow(CHAT)
    addon.request(f)
    respond(f, 200, sse_bytes(RESP, "refusal"), "text/event-stream")
    addon.responseheaders(f)
    assert not callable(f.response.stream)
    addon.response(f)
    out = json.loads(f.response.content)
    assert out["choices"][0]["message"]["refusal"]
    assert f.metadata["proxai"]["stop"]["reason"] == "refusal" and f.marked == ":no_entry:"


@pytest.mark.parametrize(
    "status, body, ctype, expect_status",
    [
        (429, {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
         "application/json", 429),
        (529, b"", "", 529),
        (502, b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>", "text/html", 502),
    ],
)
def test_upstream_errors_become_native_errors(addon, status, body, ctype, expect_status):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    respond(f, status, content, ctype, [("retry-after", "7")])
    addon.responseheaders(f)
    addon.response(f)
    assert f.response.status_code == expect_status
    assert f.response.headers["retry-after"] == "7"
    out = json.loads(f.response.content)
    assert out["type"] == "error" and "type" in out["error"]
    if status == 429:
        assert out["error"]["type"] == "rate_limit_error"
    if status == 529:
        assert out["error"]["type"] == "overloaded_error"
    if status == 502:
        assert "502 Bad Gateway" in out["error"]["message"]
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"
    assert f.metadata["proxai"]["upstream_response"] == content.decode()


def test_passthrough_upstream_error_untouched(addon):
    f = make_flow(CHAT)
    addon.request(f)
    respond(f, 502, b"<html>bad</html>", "text/html")
    addon.response(f)
    assert f.response.content == b"<html>bad</html>"
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"


def test_disconnect_mid_stream_recorded_as_interrupted(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    data = sse_bytes(CHAT)
    f.response.stream(data[:150])
    from mitmproxy import flow as mflow

    f.error = mflow.Error("Client disconnected.")
    addon.error(f)
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "interrupted" and "disconnected" in (m["stop"]["message"] or "")
    assert m["upstream_response"] == data[:150].decode()
    assert f.marked == ":electric_plug:"


def test_unreachable_upstream_then_native_502(addon):
    from mitmproxy import flow as mflow

    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, host="127.0.0.1", port=9)
    addon.request(f)
    f.error = mflow.Error("[Errno 111] Connect call failed ('127.0.0.1', 9)")
    addon.error(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"
    # the next request to the dead host is probed and answered natively
    f2 = make_flow(ANTH, host="127.0.0.1", port=9)
    run(addon.tctx, addon.request(f2))
    assert f2.response is not None and f2.response.status_code == 502
    body = json.loads(f2.response.content)
    assert body["type"] == "error" and "unreachable" in body["error"]["message"]


def test_translator_unavailable_sends_one_native_error_frame(addon, monkeypatch):
    import proxai_core.exchange as mod

    def broken(*_a: Any, **_k: Any) -> None:
        raise ImportError("codec missing")

    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    monkeypatch.setattr(mod, "StreamTranslator", broken)
    addon.responseheaders(f)
    out = feed(f, sse_bytes(CHAT))
    assert out.count(b"event: error") == 1 and b"codec missing" in out
    addon.response(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"


def test_passthrough_gzip_stream_forwarded_raw_and_observed(addon):
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("content-encoding", "gzip")])
    addon.responseheaders(f)
    wire = gzip.compress(sse_bytes(ANTH, "tool"))
    assert feed(f, wire, step=11) == wire  # the client gets the upstream bytes as they were
    assert f.response.headers["content-encoding"] == "gzip"
    addon.response(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "tool_use"


# ----------------------------------------------------------------------------- the one decision
@pytest.mark.parametrize("client, upstream, stream, status, ctype, length, expect", [
    (ANTH, CHAT, True, 200, "text/event-stream", None, "stream"),
    (ANTH, CHAT, True, 200, "text/event-stream", "0", "stream_whole"),
    (ANTH, CHAT, False, 200, "text/event-stream", None, "collect"),
    (ANTH, CHAT, True, 200, "application/json", None, "to_stream"),
    (ANTH, CHAT, False, 200, "application/json", None, "json"),
    (ANTH, CHAT, False, 429, "application/json", None, "error"),
    (ANTH, ANTH, True, 200, "text/event-stream", None, "observe"),
    (ANTH, ANTH, False, 200, "application/json", None, "observe"),
])
def test_plan_decides_from_the_head(client, upstream, stream, status, ctype, length, expect):
    from proxai_core import Protocol
    from proxai_mitm.addons.translate import plan
    from proxai_mitm.flow.state import FlowState

    st = FlowState("generate", Protocol(client), Protocol(upstream), "r", client_stream=stream)
    hs = [("content-type", ctype)] + ([("content-length", length)] if length else [])
    resp = tutils.tresp(status_code=status, headers=http.Headers([(k.encode(), v.encode()) for k, v in hs]))
    assert plan(st, resp) == expect
    assert plan(FlowState("models", None, Protocol(upstream), "r"), resp) == "models"
    assert plan(FlowState("generate", Protocol(client), Protocol(client), None, synthetic=True), resp) == "synthetic"


def test_translation_is_decided_once_and_recorded(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH)
    addon.request(f)
    respond(f, 200, json_bytes(CHAT), "application/json")
    addon.responseheaders(f)
    assert flow_state(f).translation == "json"
    f.response.headers["content-type"] = "text/event-stream"  # a later change does not re-decide
    addon.response(f)
    assert f.metadata["proxai"]["translation"] == "json"


# ----------------------------------------------------------------------------- bounded bodies
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_translated_response_bomb_is_native_502(addon, encoding):
    addon.configure(proxai_target=CHAT, proxai_body_limit=1024 * 1024)
    f = make_flow(ANTH)
    addon.request(f)
    respond(f, 200, None, "application/json", [("content-encoding", encoding)])
    f.response.raw_content = bomb(encoding)
    addon.responseheaders(f)
    res = addon.response(f)
    assert res is not None  # compressed: decoded off the event loop
    addon.run(res)
    assert f.response.status_code == 502
    assert json.loads(f.response.content)["type"] == "error"
    m = f.metadata["proxai"]
    assert m["translation"] == "error" and m["stop"]["reason"] != "end_turn"
    assert any("not read" in w for w in m["warnings"])


def test_passthrough_response_bomb_is_left_untouched(addon):
    addon.configure(proxai_body_limit=1024 * 1024)
    f = make_flow(ANTH)
    addon.request(f)
    raw = bomb("gzip")
    respond(f, 200, None, "application/json", [("content-encoding", "gzip")])
    f.response.raw_content = raw
    addon.responseheaders(f)
    addon.run(addon.response(f))
    assert f.response.status_code == 200 and f.response.raw_content == raw
    m = f.metadata["proxai"]
    assert m["translation"] == "observe" and any("not read" in w for w in m["warnings"])
