"""router.py: recognition, routing, request rewrite and credentials, native answers to bad requests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxai_mitm.flow.state import flow_state

from ..helpers import ANTH, BODIES, CHAT, ENCODINGS, RESP, bomb, compress, make_flow


def test_non_llm_requests_untouched(addon):
    f = make_flow(CHAT, body={"hello": "world"}, path="/api/other")
    addon.request(f)
    assert flow_state(f) is None
    f = make_flow(CHAT, body={"foo": 1})  # right path, not an LLM body
    addon.request(f)
    assert flow_state(f) is None


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
    st = flow_state(f)
    assert st.client_text == json.dumps(BODIES[RESP]) and st.route == "default"


def test_zstd_request_body_is_decoded(addon):
    from backports import zstd  # mitmproxy's own dependency on 3.12

    addon.configure(proxai_target=ANTH)
    raw = json.dumps(BODIES[RESP]).encode()
    f = make_flow(RESP)
    f.request.headers["content-encoding"] = "zstd"
    f.request.raw_content = zstd.compress(raw)
    addon.run(addon.request(f))
    assert "content-encoding" not in f.request.headers
    assert json.loads(f.request.raw_content)["messages"][0]["content"] in ("hi", [{"type": "text", "text": "hi"}])
    assert flow_state(f).client_text == raw.decode()


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
    stop = f.metadata["proxai"]["stop"]
    assert (stop["reason"], stop["category"]) == ("rejected", "authentication") and f.marked == ":x:"


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


# ----------------------------------------------------------------------------- bounded bodies
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("target", [CHAT, None])
def test_request_bomb_gets_native_413_and_is_never_inflated(addon, encoding, target):
    """A compressed request body that inflates past the cap (here 1 MiB) is answered with the
    client's native 413, routed or not, decoded in a worker thread and only up to the cap."""
    addon.configure(proxai_body_limit=1024 * 1024, **({"proxai_target": target} if target else {}))
    f = make_flow(ANTH, headers=[("content-encoding", encoding)])
    raw = bomb(encoding)
    f.request.raw_content = raw
    res = addon.request(f)
    assert res is not None  # compressed: decoded off the event loop
    addon.run(res)
    assert f.response is not None and f.response.status_code == 413
    err = json.loads(f.response.content)
    assert err["type"] == "error" and err["error"]["type"] == "request_too_large"
    assert "too large" in err["error"]["message"]
    assert f.request.raw_content == raw  # left as it was
    st = flow_state(f)
    assert st.synthetic and st.stop.reason.value != "end_turn" and "not read" in st.warnings[0]
    addon.response(f)
    assert f.metadata["proxai"]["translation"] == "synthetic"


def test_corrupt_request_encoding_is_native_400(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, headers=[("content-encoding", "gzip")])
    f.request.raw_content = b"\x1f\x8b not gzip at all"
    addon.run(addon.request(f))
    assert f.response.status_code == 400
    assert json.loads(f.response.content)["type"] == "error"


def test_compressed_request_is_translated_after_decoding_off_the_loop(addon):
    addon.configure(proxai_target=CHAT)
    f = make_flow(ANTH, headers=[("content-encoding", "br")])
    f.request.raw_content = compress(json.dumps(BODIES[ANTH]).encode(), "br")
    addon.run(addon.request(f))
    assert "content-encoding" not in f.request.headers
    assert f.request.path == "/v1/chat/completions" and json.loads(f.request.content)["messages"]


def test_one_retarget_sequence_for_every_endpoint_kind(addon, monkeypatch):
    """generate, count_tokens and models go through Router.forward: same key rule, same URL rewrite."""
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-ant-env-key-456")
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com:8443/x",
                    proxai_key_env="PROXAI_TEST_KEY")
    calls = []
    real = addon.router.forward
    monkeypatch.setattr(addon.router, "forward", lambda *a, **k: calls.append(a[2].kind) or real(*a, **k))
    for path, body in (("/v1/messages", BODIES[ANTH]),
                       ("/v1/messages/count_tokens", BODIES[ANTH]), ("/v1/models", None)):
        f = make_flow(ANTH, path=path, body=body or b"", method="POST" if body else "GET",
                      headers=[("anthropic-version", "2023-06-01")])
        addon.request(f)
        assert f.request.host == "api.anthropic.com" and f.request.port == 8443
        assert f.request.path.startswith("/x/v1/") and f.request.headers["x-api-key"] == "sk-ant-env-key-456"
    assert calls == ["generate", "count_tokens", "models"]


def test_big_plain_body_passes_untouched_without_routes(addon):
    """Over the cap but not compressed: nothing would be inflated, and without routes nothing is
    translated, so the request goes on as it is (a route would need the body: native 413)."""
    addon.configure(proxai_body_limit=1024)
    f = make_flow(ANTH, body={**BODIES[ANTH], "pad": "x" * 4096})
    addon.run(addon.request(f))
    assert f.response is None and flow_state(f) is None
    addon.configure(proxai_target=CHAT)
    g = make_flow(ANTH, body={**BODIES[ANTH], "pad": "x" * 4096})
    addon.run(addon.request(g))
    assert g.response.status_code == 413


LONG_SYSTEM = "You are a careful agent. " * 400


def test_the_cache_key_uses_the_session_header_as_it_arrived(addon, monkeypatch):
    """The client's session header is noted once when the request's headers arrive; the router's cache
    key reads that note, not the headers as later rewritten (a script, a route, a fallback's copy)."""
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-env-key-456")
    addon.configure(proxai_target=RESP, proxai_upstream="https://api.openai.com", proxai_key_env="PROXAI_TEST_KEY")
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": LONG_SYSTEM,
            "messages": [{"role": "user", "content": "Fix the failing test."}]}
    keys = []
    for drop in (False, True):
        f = make_flow(ANTH, body=dict(body), headers=[("x-claude-code-session-id", "a1b2")])
        addon.requestheaders(f)
        if drop:
            f.request.headers.pop("x-claude-code-session-id")
        addon.request(f)
        keys.append(json.loads(f.request.content)["prompt_cache_key"])
    plain = make_flow(ANTH, body=dict(body))
    addon.requestheaders(plain)
    addon.request(plain)
    assert keys[0] == keys[1] != json.loads(plain.request.content)["prompt_cache_key"]


def test_translated_requests_carry_the_targets_cache_hints(addon, monkeypatch, tmp_path):
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-env-key-456")
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "system": LONG_SYSTEM,
            "messages": [{"role": "user", "content": "Fix the failing test."}]}
    # toward Responses: a prompt_cache_key, the client's session id where it sends one
    addon.configure(proxai_target=RESP, proxai_upstream="https://api.openai.com", proxai_key_env="PROXAI_TEST_KEY")
    keys = []
    for session in ("a1b2", "a1b2", "c3d4", None):
        headers = [("x-claude-code-session-id", session)] if session else []
        f = make_flow(ANTH, body=dict(body), headers=headers)
        addon.request(f)
        keys.append(json.loads(f.request.content)["prompt_cache_key"])
    assert keys[0] == keys[1] != keys[2] and keys[3] != keys[0]
    assert all(k.startswith("proxai-") for k in keys)
    # toward Anthropic: breakpoints; a route's cache_hints = false sends none
    chat = {"model": "gpt-5", "messages": [{"role": "system", "content": LONG_SYSTEM},
                                           {"role": "user", "content": "Fix the failing test."}]}
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com", proxai_key_env="PROXAI_TEST_KEY")
    f = make_flow(CHAT, body=dict(chat))
    addon.request(f)
    sent = json.loads(f.request.content)
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    routes = tmp_path / "routes.toml"
    routes.write_text('[[routes]]\nname = "plain"\ncache_hints = false\n'
                      'target = { protocol = "anthropic_messages", base_url = "https://api.anthropic.com", '
                      'api_key_env = "PROXAI_TEST_KEY" }\n')
    addon.configure(proxai_target="", proxai_config=str(routes))
    f = make_flow(CHAT, body=dict(chat))
    addon.request(f)
    assert "cache_control" not in f.request.content.decode()
