"""Router with Gemini clients and upstreams: model and stream from the URL, the key= query credential,
token counts across protocols."""

from __future__ import annotations

import json

from proxai_mitm.flow.state import flow_state

from ..helpers import ANTH, BODIES, make_flow

GEM = "gemini_generate_content"
GEM_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_gemini_client_to_anthropic_model_and_stream_from_the_url(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-ant-env-key-456")
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                    proxai_key_env="PROXAI_TEST_KEY", proxai_model="gemini-*=claude-sonnet-4-5")
    f = make_flow(ANTH, body=GEM_BODY, path="/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=AIzaCLIENTKEY99",
                  headers=[("x-goog-api-key", "AIzaCLIENTKEY99")])
    addon.request(f)
    r = f.request
    assert r.url == "https://api.anthropic.com/v1/messages"  # the key= query does not travel
    assert r.headers["x-api-key"] == "sk-ant-env-key-456" and "x-goog-api-key" not in r.headers
    body = json.loads(r.content)
    assert body["model"] == "claude-sonnet-4-5" and body["stream"] is True
    st = flow_state(f)
    assert st.client_model == "gemini-2.5-flash" and st.client_stream is True and not st.client_sse
    assert "AIzaCLIENTKEY99" in st.secrets  # redacted wherever the flow is written


def test_anthropic_client_to_gemini_model_in_the_url(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "AIza-env-key-456")
    addon.configure(proxai_target=GEM, proxai_upstream="https://generativelanguage.googleapis.com",
                    proxai_key_env="PROXAI_TEST_KEY", proxai_model="gemini-2.5-pro")
    f = make_flow(ANTH, stream=True, headers=[("x-api-key", "sk-ant-client")])
    addon.request(f)
    r = f.request
    assert r.url == ("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:"
                     "streamGenerateContent?alt=sse")
    assert r.headers["x-goog-api-key"] == "AIza-env-key-456" and "x-api-key" not in r.headers
    assert "anthropic-version" not in r.headers
    body = json.loads(r.content)
    assert "model" not in body and body["contents"]
    assert flow_state(f).upstream_model == "gemini-2.5-pro"


def test_token_count_across_protocols_goes_to_the_targets_counter(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "sk-ant-env-key-456")
    addon.configure(proxai_target=ANTH, proxai_upstream="https://api.anthropic.com",
                    proxai_key_env="PROXAI_TEST_KEY", proxai_model="*=claude-sonnet-4-5")
    f = make_flow(ANTH, body=GEM_BODY, path="/v1beta/models/gemini-2.5-flash:countTokens",
                  headers=[("x-goog-api-key", "AIzaCLIENT")])
    addon.request(f)
    assert f.response is None  # sent upstream: Anthropic has a counter
    assert f.request.url == "https://api.anthropic.com/v1/messages/count_tokens"
    assert json.loads(f.request.content) == {"model": "claude-sonnet-4-5",
                                             "messages": [{"role": "user", "content": "hi"}]}
    st = flow_state(f)
    assert st.kind == "count_tokens" and not st.estimate and not st.synthetic


def test_token_count_toward_a_target_without_a_counter_is_an_estimate_in_the_clients_shape(addon):
    addon.configure(proxai_target="openai_chat_completions", proxai_upstream="https://api.openai.com")
    f = make_flow(ANTH, body=GEM_BODY, path="/v1beta/models/gemini-2.5-flash:countTokens",
                  headers=[("x-goog-api-key", "AIzaCLIENT")])
    addon.request(f)
    assert f.response is not None and f.response.status_code == 200
    out = json.loads(f.response.content)
    assert set(out) == {"totalTokens"} and out["totalTokens"] >= 1
    assert f.response.headers["x-proxai-estimate"] == "chars/4"
    st = flow_state(f)
    assert st.estimate and st.count_tokens == out["totalTokens"]
    assert "has no token counting endpoint" in " ".join(st.warnings)
    f = make_flow(ANTH, body=dict(BODIES[ANTH]), path="/v1/messages/count_tokens")
    addon.request(f)
    assert set(json.loads(f.response.content)) == {"input_tokens"}


def test_gemini_token_count_to_gemini_keeps_the_model_in_the_url(addon, monkeypatch):
    monkeypatch.setenv("PROXAI_TEST_KEY", "AIza-env-key-456")
    addon.configure(proxai_target=GEM, proxai_upstream="https://generativelanguage.googleapis.com",
                    proxai_key_env="PROXAI_TEST_KEY", proxai_model="gemini-2.5-pro")
    f = make_flow(ANTH, body=GEM_BODY, path="/v1beta/models/gemini-2.5-flash:countTokens",
                  headers=[("x-goog-api-key", "AIzaCLIENT")])
    addon.request(f)
    assert f.response is None
    assert f.request.url == "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:countTokens"
    assert json.loads(f.request.content) == GEM_BODY and f.request.headers["x-goog-api-key"] == "AIza-env-key-456"
