"""The "LLM" contentview renders every real recording in ../shared/fixtures as a conversation."""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path

import pytest
from mitmproxy import contentviews, http
from mitmproxy.test import tflow, tutils

from proxai_mitm.reporting.contentview import LLMContentview, register

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}

def _body(out: str) -> str:
    """The rendering after the summary header (views.py), when the flow has a record."""
    return out.split("─" * 72 + "\n\n", 1)[-1]

VIEW = LLMContentview()


def _index() -> dict[str, set[str]]:
    idx = FIXTURES / "INDEX.tsv"
    if not idx.is_file():
        return {}
    with open(idx, newline="") as fh:
        return {r["file"]: set(r["features"].split(",")) for r in csv.DictReader(fh, delimiter="\t")}


FEATURES = _index()


def _files():
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".json", ".sse") and p.parent.name in PATHS)


def _flow(path: str, req_body: bytes = b"{}", resp_body: bytes | None = None, ctype="application/json",
          status=200):
    req = tutils.treq(method=b"POST", path=path.encode(), content=req_body,
                      headers=http.Headers([(b"content-type", b"application/json")]))
    resp = tutils.tresp(status_code=status, content=resp_body,
                        headers=http.Headers([(b"content-type", ctype.encode())]))
    return tflow.tflow(req=req, resp=resp)


def _meta(path: Path, with_flow: bool) -> contentviews.Metadata:
    ctype = "text/event-stream" if path.suffix == ".sse" else "application/json"
    if not with_flow:
        return contentviews.Metadata(content_type=ctype)
    f = _flow(PATHS[path.parent.name], ctype=ctype)
    is_req = path.name.endswith(".request.json")
    return contentviews.Metadata(flow=f, content_type=ctype, http_message=f.request if is_req else f.response)


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures absent")
@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.name[:80]}")
def test_every_fixture_renders(path: Path):
    data = path.read_bytes()
    rel = f"{path.parent.name}/{path.name}"
    feats = FEATURES.get(rel, set())
    for with_flow in (True, False):
        out = VIEW.prettify(data, _meta(path, with_flow))
        assert isinstance(out, str) and out.strip()
        assert not out.startswith("[LLM view: could not"), out[:500]
        lines = out.splitlines()
        if path.name.endswith(".request.json"):
            assert " request — " in lines[0]
            assert any(ln.startswith("── ") and ln.endswith(" ──") for ln in lines), out[:800]
            continue
        assert any(ln.startswith("stop: ") for ln in lines), out[-800:]
        if with_flow:  # the path names the protocol: the title is the directory's protocol
            title = {"chat": "OpenAI Chat Completions", "responses": "OpenAI Responses",
                     "anthropic": "Anthropic Messages"}[path.parent.name]
            assert lines[0].startswith(title), lines[0]
        if "refusal" in feats or "stop:refusal" in feats:
            assert "⛔ REFUSAL: " in out
        if feats & {"signature"}:
            assert "[signature " in out and " chars elided]" in out
        if feats & {"encrypted_content"}:
            assert "[encrypted_content " in out
        if feats & {"tool_use", "tool_calls", "function_call"}:
            assert "→ tool call " in out
        if path.suffix == ".sse":
            assert " events" in lines[0]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures absent")
def test_signatures_and_encrypted_blobs_are_not_shown():
    checked = 0
    for path in _files():
        if path.suffix != ".json" or path.name.endswith(".request.json"):
            continue
        text = path.read_text()
        if '"signature"' not in text and '"encrypted_content"' not in text:
            continue
        blobs: list[str] = []

        def walk(o, blobs=blobs):
            if isinstance(o, dict):
                for k, v in o.items():
                    if k in ("signature", "encrypted_content", "data") and isinstance(v, str) and len(v) > 40:
                        blobs.append(v)
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)

        walk(json.loads(text))
        out = VIEW.prettify(path.read_bytes(), _meta(path, True))
        for b in blobs:
            assert b[:40] not in out
        checked += 1
    assert checked


def test_request_placeholders_tools_and_results():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 3000).decode()
    body = {
        "model": "claude-sonnet-4-5", "max_tokens": 100, "system": "Be brief.",
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": png}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Need a tool.", "signature": "S" * 344},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C sunny"}]},
        ],
    }
    f = _flow("/v1/messages", json.dumps(body).encode())
    out = VIEW.prettify(f.request.content, contentviews.Metadata(flow=f, http_message=f.request,
                                                                 content_type="application/json"))
    assert _body(out).startswith("Anthropic Messages request — model claude-sonnet-4-5")
    assert "tools (1): get_weather" in out and "reasoning: budget 2048 tokens" in out
    assert "── system ──\n  Be brief." in out
    assert "[image: base64 image/png, " in out and png[:50] not in out
    assert "[signature 344 chars elided]" in out and "S" * 100 not in out
    assert '→ tool call get_weather (toolu_1)\n      {\n        "city": "Paris"\n      }' in out
    assert "── user (tool results) ──\n  ← tool result toolu_1:\n      18C sunny" in out


def test_chat_request_with_data_url_image():
    body = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "what is this"},
                                     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + "A" * 4000}}]}]}
    out = VIEW.prettify(json.dumps(body).encode(), contentviews.Metadata(content_type="application/json"))
    assert _body(out).startswith("OpenAI Chat Completions request")
    assert "[image: base64 image/jpeg, " in out and "A" * 100 not in out


def test_translated_flow_uses_metadata():
    chat_resp = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-5",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                      "refusal": "I can't help with that."},
                              "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    f = _flow("/v1/messages", resp_body=json.dumps(chat_resp).encode())
    f.metadata["proxai"] = {
        "client_protocol": "openai_chat_completions", "upstream_protocol": "anthropic_messages",
        "route": "chat-on-claude",
        "stop": {"reason": "refusal", "raw": "refusal", "category": "cyber", "message": "I can't help with that.",
                 "recommended_model": None, "detail": {}},
        "warnings": ["dropped logit_bias"],
    }
    md = contentviews.Metadata(flow=f, http_message=f.response, content_type="application/json")
    assert VIEW.render_priority(f.response.content, md) > 1
    out = VIEW.prettify(f.response.content, md)
    assert _body(out).startswith("OpenAI Chat Completions response")  # the body is what the client got
    assert "⛔ REFUSAL: I can't help with that." in out
    assert "stop: refusal (output-refusal): I can't help with that." in out
    assert "upstream stop: refusal (cyber): I can't help with that." in out
    assert "proxai: client openai_chat_completions ← upstream anthropic_messages · route chat-on-claude" in out
    assert "proxai warnings: dropped logit_bias" in out
    assert "usage: input 10 · output 5" in out
    # the saved request is the upstream request
    f.request.content = json.dumps({"model": "claude-x", "max_tokens": 5,
                                    "messages": [{"role": "user", "content": "hi"}]}).encode()
    out = VIEW.prettify(f.request.content, contentviews.Metadata(flow=f, http_message=f.request))
    assert _body(out).startswith("Anthropic Messages request")
    assert "translated from the client's OpenAI Chat Completions request" in out


def test_render_priority_and_registration():
    json_view = contentviews.registry["json"]
    data = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    llm = _flow("/v1/chat/completions", data)
    md = contentviews.Metadata(flow=llm, http_message=llm.request, content_type="application/json")
    assert VIEW.render_priority(data, md) > json_view.render_priority(data, md)
    other = _flow("/api/things", data)
    assert VIEW.render_priority(data, contentviews.Metadata(flow=other, http_message=other.request,
                                                            content_type="application/json")) < 0
    get_models = _flow("/v1/models", b"")
    get_models.request.method = "GET"
    assert VIEW.render_priority(b'{"data":[]}', contentviews.Metadata(flow=get_models)) < 0
    assert VIEW.render_priority(data, contentviews.Metadata(content_type="application/json")) < 0
    sse = b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n'
    assert VIEW.render_priority(sse, contentviews.Metadata(content_type="text/event-stream")) > 1
    view = register()
    assert register() is view
    assert contentviews.registry["llm"] is view
    assert contentviews.registry.get_view(data, md) is view


@pytest.mark.parametrize("data", [b"", b"\x00\xff garbage", b"not json", b"[1,2,3]", b'{"x":1}',
                                  b"data: {broken\n\n", b'{"messages": "nope", "model": 3}'])
def test_never_raises(data):
    f = _flow("/v1/responses", data)
    for md in (contentviews.Metadata(), contentviews.Metadata(flow=f, http_message=f.request),
               contentviews.Metadata(flow=f, http_message=f.response, content_type="text/event-stream")):
        assert isinstance(VIEW.prettify(data, md), str)
        assert isinstance(VIEW.render_priority(data, md), (int, float))
