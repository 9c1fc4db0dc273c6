"""End to end, reverse mode: a real mitmdump with the addon in front of the fake upstream, driven by
the official openai and anthropic SDKs in all six directions, streaming and not."""

from __future__ import annotations

import json
import time

import anthropic
import httpx2
import openai
import pytest

from proxai_mitm.flow.record import SCHEMA_VERSION, FlowRecord
from tests.fake_upstream import RECORDED, Reply

from .e2e_util import (
    ANTH,
    CHAT,
    CLIENT_KEY,
    DIRECTIONS,
    ENV_KEY_VALUE,
    RESP,
    SHORT,
    UPSTREAM_PATH,
    call,
    check,
    serve,
    wait_flows,
)

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("scenario", ["text", "tool", "refusal"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("client, upstream_proto", DIRECTIONS)
def test_six_directions(proxy, up, clients, client, upstream_proto, stream, scenario):
    serve(up, upstream_proto, scenario, delay=0.005)
    s = call(clients, client, f"to-{SHORT[upstream_proto]}-x", scenario, stream)
    check(s, client, scenario)
    rec = up.last(UPSTREAM_PATH[upstream_proto])
    sent = rec.json()
    assert sent["model"] in ("gpt-4o", "gpt-5", "claude-sonnet-4-5")
    assert bool(sent.get("stream")) == stream
    assert CLIENT_KEY not in json.dumps(rec.headers)  # the env key went instead
    assert rec.header("accept-encoding") == "identity"


@pytest.mark.parametrize("client, upstream_proto", [(ANTH, CHAT), (RESP, ANTH), (CHAT, RESP)])
def test_first_translated_event_before_upstream_finished(proxy, up, clients, client, upstream_proto):
    serve(up, upstream_proto, "text", delay=0.01, last_delay=1.0)
    first: list[float] = []
    s = call(clients, client, f"to-{SHORT[upstream_proto]}-x", "text", True,
             on_first=lambda: first.append(time.time()))
    check(s, client, "text")
    done = up.last(UPSTREAM_PATH[upstream_proto]).done_at
    assert first and done and done - first[0] > 0.7, (first, done)


def test_saved_flow_holds_metadata(proxy, up, clients):
    n0 = len(proxy.flows())
    serve(up, CHAT, "refusal")
    s = call(clients, ANTH, "to-chat-x", "refusal", True)
    assert s.refusal
    flows = wait_flows(proxy, n0 + 1)
    f = flows[-1]
    m = f.metadata["proxai"]
    assert set(m) == set(FlowRecord.model_fields) and m["version"] == SCHEMA_VERSION  # the one typed record
    assert m["translation"] == "stream" and m["upstream_cut"] is None and m["replay"] is None
    assert sum(nb for _, nb in m["upstream_chunks"]) == len(m["upstream_response"].encode())
    assert f.response.content.startswith(b"event: message_start")  # the body the client received
    assert (m["client_protocol"], m["upstream_protocol"], m["route"]) == (ANTH, CHAT, "to-chat")
    assert m["stop"]["reason"] == "refusal"
    assert json.loads(m["client_request"])["model"] == "to-chat-x"
    assert "chat.completion.chunk" in m["upstream_response"] and "[DONE]" in m["upstream_response"]
    assert f.request.path == "/v1/chat/completions"  # what went upstream
    assert json.loads(f.request.content)["model"] == "gpt-4o"
    assert f.comment.startswith("refusal") and f.marked == ":no_entry:"
    assert m["usage"]["output"] == 9
    assert CLIENT_KEY not in json.dumps(f.metadata) and ENV_KEY_VALUE not in json.dumps(f.metadata)
    proxy.wait_for_log(r"proxai: anthropic_messages → openai_chat_completions \(route to-chat\), "
                       r"to-chat-x → .*: refusal")


def test_passthrough_is_annotated(proxy, up):
    # a model no route matches: untouched, annotated
    serve(up, ANTH, "tool")
    c = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
    m = c.messages.create(model="claude-plain", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert m.stop_reason == "tool_use"
    rec = up.last("/v1/messages")
    assert rec.json()["model"] == "claude-plain"
    assert rec.header("x-api-key") == CLIENT_KEY or rec.header("authorization") == f"Bearer {CLIENT_KEY}"
    f = wait_flows(proxy, 1)[-1]
    assert f.metadata["proxai"]["route"] is None and f.metadata["proxai"]["stop"]["reason"] == "tool_use"


# ----------------------------------------------------------------------------- errors
def test_malformed_json_and_wrong_protocol_are_native_400(proxy, up):
    with httpx2.Client(base_url=proxy.url) as h:
        r = h.post("/strict/v1/messages", content=b'{"model": "x", "messages": [',
                   headers={"content-type": "application/json", "x-api-key": CLIENT_KEY})
        assert r.status_code == 400
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
        r = h.post("/strict/v1/chat/completions", json={"model": "x", "input": "hi"},
                   headers={"authorization": f"Bearer {CLIENT_KEY}"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        assert "openai_responses" in r.json()["error"]["message"]
    assert not up.requests
    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="to-anthropic-x", messages="nope")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "client, upstream_proto, status, body, ctype, exc",
    [
        (ANTH, CHAT, 429, {"error": {"message": "Rate limit reached for gpt-4o", "type": "requests",
                                     "code": "rate_limit_exceeded"}}, "application/json",
         anthropic.RateLimitError),
        (CHAT, ANTH, 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
         "application/json", openai.InternalServerError),
        (ANTH, RESP, 529, b"", "", anthropic.APIStatusError),
        (RESP, CHAT, 502, b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
         "text/html", openai.InternalServerError),
    ],
)
def test_upstream_errors_are_native(proxy, up, clients, client, upstream_proto, status, body, ctype, exc):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    up.on(UPSTREAM_PATH[upstream_proto], Reply.error(status, content, ctype, headers=[("retry-after", "13")]))
    with pytest.raises(exc) as e:
        call(clients, client, f"to-{SHORT[upstream_proto]}-x", "text", True)
    r = e.value.response
    expect = {429: 429, 529: 529 if client == ANTH else 503, 502: 502}[status]
    assert r.status_code == expect
    assert r.headers["retry-after"] == "13"
    native = r.json()
    if client == ANTH:
        assert native["type"] == "error" and native["error"]["type"] in ("rate_limit_error", "overloaded_error")
    else:
        assert "message" in native["error"]
        if status == 502:
            assert "502 Bad Gateway" in native["error"]["message"]


def test_upstream_clean_cut_mid_stream_is_native_error_event(proxy, up, clients):
    n0 = len(proxy.flows())
    serve(up, CHAT, "text", delay=0.01, cut_after=3, cut="clean")
    with pytest.raises(anthropic.APIStatusError) as e:
        call(clients, ANTH, "to-chat-x", "text", True)
    assert "interrupt" in str(e.value).lower() or "ended" in str(e.value).lower()
    f = wait_flows(proxy, n0 + 1)[-1]
    assert f.metadata["proxai"]["stop"]["reason"] == "interrupted" and f.marked == ":electric_plug:"


def test_upstream_reset_mid_stream_recorded_as_interrupted(proxy, up, clients):
    n0 = len(proxy.flows())
    serve(up, ANTH, "text", delay=0.01, cut_after=4, cut="reset")
    with pytest.raises(Exception):  # noqa: B017 - a transport error: mitmproxy closes the client's stream
        call(clients, CHAT, "to-anthropic-x", "text", True)
    f = wait_flows(proxy, n0 + 1)[-1]
    m = f.metadata["proxai"]
    assert m["stop"]["reason"] == "interrupted"
    assert "message_start" in m["upstream_response"]


def test_client_key_not_sent_to_other_host(proxy, up):
    serve(up, ANTH, "text")
    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    r = c.chat.completions.create(model="remote-x", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "Hello! The weather is sunny."
    rec = up.last("/v1/messages")
    assert rec.header("host") == f"localhost:{up.port}"
    assert rec.header("x-api-key") == ENV_KEY_VALUE
    assert CLIENT_KEY not in json.dumps(rec.headers)


def test_no_key_for_other_host_is_native_401(proxy, up):
    c = anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        c.messages.create(model="nokey-x", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert "api_key_env" in str(e.value)
    o = openai.OpenAI(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e2:
        o.responses.create(model="missingenv-x", input="hi")
    assert "PROXAI_E2E_UNSET" in str(e2.value)
    assert not up.requests


def test_unreachable_upstream(proxy, up):
    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError) as e:  # mitmproxy's own 502 page
        c.chat.completions.create(model="dead-x", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 502
    with pytest.raises(openai.InternalServerError) as e:  # the retry: a native 502 from the addon
        c.chat.completions.create(model="dead-x", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 502
    assert "unreachable" in e.value.response.json()["error"]["message"]


def test_websocket_upgrade_refused_fast(proxy):
    with httpx2.Client(base_url=proxy.url, timeout=5) as h:
        r = h.get("/v1/responses", headers={"upgrade": "websocket", "connection": "Upgrade",
                                            "sec-websocket-version": "13",
                                            "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert r.status_code == 426
    assert "WebSocket" in r.json()["error"]["message"]


def test_models_list_of_a_route(proxy, up):
    up.on("/v1/models", Reply.json({"data": [{"type": "model", "id": "claude-sonnet-4-5",
                                              "display_name": "Claude Sonnet 4.5",
                                              "created_at": "2025-09-29T00:00:00Z"}],
                                    "has_more": False, "first_id": "claude-sonnet-4-5",
                                    "last_id": "claude-sonnet-4-5"}))
    with httpx2.Client(base_url=proxy.url) as h:
        r = h.get("/v1/models", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    assert r.status_code == 200
    ids = [m["id"] for m in r.json()["data"]]
    assert "claude-sonnet-4-5" in ids and r.json()["object"] == "list"


def test_upstream_json_to_streaming_client_and_back(proxy, up, clients):
    # the upstream ignores stream: true and answers JSON (and vice versa)
    path = UPSTREAM_PATH[ANTH]
    up.on(path, Reply.json(RECORDED[ANTH]["tool"]["json"]))
    s = call(clients, RESP, "to-anthropic-x", "tool", True)
    check(s, RESP, "tool")
    up.reset()
    up.on(UPSTREAM_PATH[CHAT], Reply.sse(RECORDED[CHAT]["text"]["sse"]))
    s = call(clients, ANTH, "to-chat-x", "text", False)
    check(s, ANTH, "text")
