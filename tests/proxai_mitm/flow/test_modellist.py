"""modellist.py: token estimates and model lists of a route."""

from __future__ import annotations

import json

from ..helpers import ANTH, RESP, make_flow, respond


def test_count_tokens_estimated_for_chat_targets(addon):
    addon.configure(proxai_target="openai_chat_completions")
    f = make_flow(ANTH, path="/v1/messages/count_tokens",
                  body={"model": "claude-x", "messages": [{"role": "user", "content": "x" * 400}]})
    addon.request(f)
    assert f.response.status_code == 200
    assert 100 <= json.loads(f.response.content)["input_tokens"] <= 105


def test_count_tokens_toward_responses_go_to_its_counter(addon):
    addon.configure(proxai_target=RESP)
    f = make_flow(ANTH, path="/v1/messages/count_tokens",
                  body={"model": "claude-x", "messages": [{"role": "user", "content": "x" * 400}]})
    addon.request(f)
    assert f.response is None and f.request.path == "/v1/responses/input_tokens"
    assert json.loads(f.request.content) == {"model": "claude-x", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 400}]}]}


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
