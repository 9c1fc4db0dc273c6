"""Unit tests of every hook path of the ProxAI addon with mitmproxy.test.taddons / tflow (no network)."""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import tflow, tutils

from proxai_mitm.record import FlowRecord
from proxai_mitm.state import get_state
from proxai_mitm.streaming import StreamHandler
from tests.fake_upstream import RECORDED, _enc_event

from .chain import chain
from .conftest import needs_codecs

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
PATHS = {CHAT: "/v1/chat/completions", RESP: "/v1/responses", ANTH: "/v1/messages"}
BODIES = {
    CHAT: {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    RESP: {"model": "gpt-5", "input": "hi"},
    ANTH: {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
}


def sse_bytes(proto: str, scenario: str = "text") -> bytes:
    return b"".join(_enc_event(e) for e in RECORDED[proto][scenario]["sse"])


def json_bytes(proto: str, scenario: str = "text") -> bytes:
    return json.dumps(RECORDED[proto][scenario]["json"]).encode()


def make_flow(proto: str, *, stream: bool = False, host: str = "api.example.com", port: int = 443,
              headers: list[tuple[str, str]] | None = None, body: Any = None, path: str | None = None,
              method: str = "POST", http_version: str = "HTTP/1.1") -> http.HTTPFlow:
    b = dict(BODIES[proto]) if body is None else body
    if isinstance(b, dict) and stream:
        b["stream"] = True
    content = b if isinstance(b, bytes) else json.dumps(b).encode()
    hs = [("content-type", "application/json"), ("authorization", "Bearer sk-client-secret-123")]
    hs += headers or []
    req = tutils.treq(method=method.encode(), scheme=b"https", host=host, port=port,
                      path=(path or PATHS[proto]).encode(), content=content, http_version=http_version.encode(),
                      headers=http.Headers([(k.encode(), v.encode()) for k, v in hs]))
    return tflow.tflow(req=req)


def respond(f: http.HTTPFlow, status: int, content: bytes | None, ctype: str,
            extra: list[tuple[str, str]] | None = None) -> None:
    hs = [("content-type", ctype)] + (extra or [])
    if content is not None:
        hs.append(("content-length", str(len(content))))
    f.response = tutils.tresp(status_code=status, headers=http.Headers([(k.encode(), v.encode()) for k, v in hs]),
                              content=content)


def feed(f: http.HTTPFlow, data: bytes, step: int = 7) -> bytes:
    out: list[bytes] = []
    for i in range(0, len(data), step):
        r = f.response.stream(data[i:i + step])
        assert r != b"", "never b'' mid-stream"
        out += [r] if isinstance(r, bytes) else list(r)
    r = f.response.stream(b"")
    out += [r] if isinstance(r, bytes) else list(r)
    return b"".join(out)


def run(tctx: Any, res: Any) -> None:
    if res is not None and hasattr(res, "__await__"):
        tctx.master.event_loop.run_until_complete(res)


@pytest.fixture
def addon():
    with chain() as c:
        yield c


# ----------------------------------------------------------------------------- options
def test_bad_option_logs_error_and_raises(addon, caplog):
    caplog.set_level(logging.ERROR)
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_target="anthropic")
    assert "proxai: invalid option proxai_target" in caplog.text


def test_bad_routes_file_names_route_and_field(addon, tmp_path, caplog):
    p = tmp_path / "r.toml"
    p.write_text('[[routes]]\nname = "x"\ntarget = { protocol = "nope" }\n')
    caplog.set_level(logging.ERROR)
    with pytest.raises(exceptions.OptionsError):
        addon.configure(proxai_config=str(p))
    assert "route 'x' (routes[0]): target.protocol" in caplog.text


def test_retargeting_sets_lazy_connection_strategy(addon):
    from mitmproxy import ctx

    ctx.options.add_option("connection_strategy", str, "eager", "normally declared by proxyserver")
    assert ctx.options.connection_strategy == "eager"
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                         proxai_key_env="PROXAI_TEST_KEY")
    assert ctx.options.connection_strategy == "lazy"


# ----------------------------------------------------------------------------- pass-through
@needs_codecs
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
    assert m["usage"]["output"] == 9 and m["version"] == 2 and m["translation"] == "observe"
    assert f.comment.startswith("refusal (cyber)") and f.marked == ":no_entry:"
    assert json.loads(f.response.content)["stop_reason"] == "refusal"  # untouched
    assert "anthropic_messages → anthropic_messages (pass-through), claude-x → claude-sonnet-4-5-20250929, 200: " \
           "refusal (cyber)" in caplog.text
    json.dumps(f.metadata)  # plain JSON values only
    assert "sk-client-secret-123" not in json.dumps(f.metadata)


def test_non_llm_requests_untouched(addon):
    f = make_flow(CHAT, body={"hello": "world"}, path="/api/other")
    addon.request(f)
    assert get_state(f) is None
    f = make_flow(CHAT, body={"foo": 1})  # right path, not an LLM body
    addon.request(f)
    assert get_state(f) is None


@needs_codecs
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


# ----------------------------------------------------------------------------- request rewrite
@needs_codecs
def test_translated_request_rewrite(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-ant-env-key-456")
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                         proxai_key_env="PROXAI_TEST_KEY", proxai_model="gpt-5*=claude-sonnet-4-5")
    f = make_flow(RESP, host="api.openai.com",
                  headers=[("openai-beta", "responses=experimental"), ("accept-encoding", "gzip, zstd"),
                           ("cookie", "a=b"), ("chatgpt-account-id", "acc")])
    addon.request(f)
    r = f.request
    assert r.url == "https://api.anthropic.com/v1/messages"
    assert r.headers["x-api-key"] == "sk-ant-env-key-456"
    assert "authorization" not in r.headers and "cookie" not in r.headers
    assert "openai-beta" not in r.headers and "chatgpt-account-id" not in r.headers
    assert r.headers["anthropic-version"] == "2023-06-01" and r.headers["accept-encoding"] == "identity"
    body = json.loads(r.content)
    assert body["model"] == "claude-sonnet-4-5" and body["messages"][0]["role"] == "user"
    st = get_state(f)
    assert st.client_text == json.dumps(BODIES[RESP]) and st.route == "default"


@needs_codecs
def test_zstd_request_body_is_decoded(addon):
    from backports import zstd  # mitmproxy's own dependency on 3.12

    addon.configure(proxai_target=ANTH)
    raw = json.dumps(BODIES[RESP]).encode()
    f = make_flow(RESP)
    f.request.headers["content-encoding"] = "zstd"
    f.request.raw_content = zstd.compress(raw)
    addon.request(f)
    assert "content-encoding" not in f.request.headers
    assert json.loads(f.request.raw_content)["messages"][0]["content"] in ("hi", [{"type": "text", "text": "hi"}])
    assert get_state(f).client_text == raw.decode()


@needs_codecs
def test_same_host_moves_client_credentials(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT)
    addon.request(f)
    assert f.request.headers["x-api-key"] == "sk-client-secret-123"
    assert "authorization" not in f.request.headers
    assert f.request.host == "api.example.com" and f.request.path == "/v1/messages"


def test_client_key_never_sent_to_other_host(addon):
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com")
    f = make_flow(CHAT, host="api.openai.com")
    addon.request(f)
    assert f.response is not None and f.response.status_code == 401
    err = json.loads(f.response.content)["error"]
    assert err["type"] == "authentication_error" and "proxai_key_env" in err["message"]
    assert "sk-client-secret-123" not in f.response.text


def test_missing_key_env_is_native_401_naming_the_variable(addon, monkeypatch):
    monkeypatch.delenv("PROXAI_MISSING_KEY", raising=False)
    addon.configure(proxai_target=CHAT, proxai_upstream="https://api.openai.com",
                         proxai_key_env="PROXAI_MISSING_KEY")
    f = make_flow(ANTH, host="api.anthropic.com")
    addon.request(f)
    assert f.response.status_code == 401
    body = json.loads(f.response.content)
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    assert "PROXAI_MISSING_KEY" in body["error"]["message"]
    addon.responseheaders(f)
    addon.response(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"


@pytest.mark.parametrize("proto", [CHAT, RESP, ANTH])
def test_malformed_json_is_native_400(addon, proto):
    addon.configure(proxai_target=CHAT if proto != CHAT else ANTH)
    f = make_flow(proto, body=b'{"model": "x", "messages": [')
    addon.request(f)
    assert f.response.status_code == 400
    body = json.loads(f.response.content)
    if proto == ANTH:
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    else:
        assert body["error"]["type"] == "invalid_request_error"
    assert "not valid JSON" in f.response.text


def test_wrong_protocol_for_path_is_native_400(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, body={"model": "gpt-5", "input": "hi"})
    addon.request(f)
    assert f.response.status_code == 400
    assert json.loads(f.response.content)["error"]["type"] == "invalid_request_error"
    assert "openai_responses" in f.response.text


@needs_codecs
def test_translation_error_is_native_400_never_500(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT, body={"model": "gpt-4o", "messages": "not a list"})
    addon.request(f)
    assert f.response.status_code == 400
    assert json.loads(f.response.content)["error"]["type"] == "invalid_request_error"


def test_websocket_upgrade_refused_with_426(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(RESP, method="GET", body=b"", headers=[("upgrade", "websocket"), ("connection", "Upgrade")])
    addon.requestheaders(f)
    assert f.response.status_code == 426
    assert "WebSocket" in json.loads(f.response.content)["error"]["message"]


def test_websocket_untouched_without_route(addon):
    f = make_flow(RESP, method="GET", body=b"", headers=[("upgrade", "websocket")])
    addon.requestheaders(f)
    assert f.response is None


def test_offline_flows_are_never_rewritten(addon):
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT)
    f.live = False
    addon.requestheaders(f)
    addon.request(f)
    assert f.request.path == "/v1/chat/completions" and f.response is None


# ----------------------------------------------------------------------------- responses
@needs_codecs
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


@needs_codecs
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


@needs_codecs
def test_stream_headers_for_http2_client_have_no_transfer_encoding(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True, http_version="HTTP/2.0")
    addon.request(f)
    respond(f, 200, None, "text/event-stream", [("transfer-encoding", "chunked")])
    addon.responseheaders(f)
    assert "transfer-encoding" not in f.response.headers


@needs_codecs
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


@needs_codecs
def test_exception_in_stream_becomes_native_error_frame(addon, caplog):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, stream=True)
    addon.request(f)
    respond(f, 200, None, "text/event-stream")
    addon.responseheaders(f)
    handler = f.response.stream

    def boom(_chunk: bytes) -> bytes:
        raise RuntimeError("kaputt")

    handler.translator.feed = boom
    caplog.set_level(logging.ERROR)
    out = feed(f, sse_bytes(CHAT))
    assert b"event: error" in out and b"kaputt" in out
    assert out.count(b"event: error") == 1
    addon.response(f)
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "interrupted" and any("kaputt" in w for w in m["warnings"])
    assert "kaputt" in caplog.text


@needs_codecs
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


@needs_codecs
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


@needs_codecs
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


# ----------------------------------------------------------------------------- error hook
@needs_codecs
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


# ----------------------------------------------------------------------------- offline (-nr)
@needs_codecs
def test_offline_annotation_from_stored_sse(addon):
    f = make_flow(RESP, stream=True)
    respond(f, 200, sse_bytes(RESP, "tool"), "text/event-stream")
    f.live = False
    addon.cycle(f)
    assert f.request.path == "/v1/responses"
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "tool_use" and m["route"] is None
    assert f.comment.startswith("tool_use")


@needs_codecs
def test_offline_annotation_from_json_and_errors(addon):
    f = make_flow(CHAT)
    respond(f, 200, json_bytes(CHAT, "max"), "application/json")
    f.live = False
    addon.cycle(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "max_output" and f.marked == ":scissors:"

    f = make_flow(ANTH)
    respond(f, 529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "application/json")
    f.live = False
    addon.cycle(f)
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted"
    assert f.comment.startswith("interrupted")


def test_offline_keeps_recorded_metadata(addon):
    f = make_flow(ANTH)
    respond(f, 200, b"{}", "application/json")
    f.metadata["proxai"] = {"client_protocol": CHAT, "upstream_protocol": ANTH, "route": "r",
                            "stop": {"reason": "refusal", "raw": "refusal", "category": "cyber", "message": None,
                                     "recommended_model": None, "detail": {}},
                            "warnings": [], "client_request": "{}", "upstream_response": "{}", "usage": None}
    before = json.dumps(f.metadata)
    f.live = False
    addon.cycle(f)
    assert json.dumps(f.metadata) == before


def test_offline_stream_without_body(addon):
    f = make_flow(CHAT, stream=True)
    respond(f, 200, None, "text/event-stream")
    f.response.raw_content = None
    f.live = False
    addon.cycle(f)
    m = f.metadata["proxai"]
    assert m["stop"] is None and any("not stored" in w for w in m["warnings"])


# ----------------------------------------------------------------------------- auxiliary endpoints
def test_count_tokens_estimated_for_openai_targets(addon):
    addon.configure(proxai_target=RESP)
    f = make_flow(ANTH, path="/v1/messages/count_tokens",
                  body={"model": "claude-x", "messages": [{"role": "user", "content": "x" * 400}]})
    addon.request(f)
    assert f.response.status_code == 200
    assert 100 <= json.loads(f.response.content)["input_tokens"] <= 105


def test_count_tokens_forwarded_to_anthropic(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-ant-xyz-123456")
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                         proxai_key_env="PROXAI_TEST_KEY", proxai_model="claude-sonnet-4-5")
    f = make_flow(ANTH, path="/v1/messages/count_tokens", host="gateway.local")
    addon.request(f)
    assert f.response is None
    assert f.request.url == "https://api.anthropic.com/v1/messages/count_tokens"
    assert json.loads(f.request.content)["model"] == "claude-sonnet-4-5"


def test_models_list_translated_with_mapped_names(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-ant-xyz-123456")
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                         proxai_key_env="PROXAI_TEST_KEY", proxai_model="gpt-5=claude-sonnet-4-5")
    f = make_flow(RESP, method="GET", path="/v1/models", body=b"", host="api.openai.com")
    addon.request(f)
    assert f.request.url == "https://api.anthropic.com/v1/models"
    assert f.request.headers["x-api-key"] == "sk-ant-xyz-123456"
    upstream = {"data": [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5",
                          "created_at": "2025-09-29T00:00:00Z"}], "has_more": False,
                "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"}
    respond(f, 200, json.dumps(upstream).encode(), "application/json")
    addon.responseheaders(f)
    addon.response(f)
    out = json.loads(f.response.content)
    assert out["object"] == "list" and [m["id"] for m in out["data"]] == ["gpt-5", "claude-sonnet-4-5"]
    assert f.metadata["proxai"]["stop"] is None and f.comment == ""


@needs_codecs
def test_translator_unavailable_sends_one_native_error_frame(addon, monkeypatch):
    import proxai_mitm.translate as mod

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


@needs_codecs
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


def test_tool_schema_deeper_than_orjson_writes_is_translated(addon):
    """A tool schema nested 300 levels (orjson writes 254) is still translated and sent, not refused."""
    deep: Any = {"type": "string"}
    for _ in range(300):
        deep = {"type": "object", "properties": {"p": deep}}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}]}
    addon.configure(proxai_target=ANTH)
    f = make_flow(CHAT, body=body)
    addon.request(f)
    assert f.response is None, f.response and f.response.content[:300]
    sent = json.loads(f.request.content)
    assert sent["tools"][0]["name"] == "f" and sent["tools"][0]["input_schema"] == deep
