"""A multi-turn tool loop through a translating proxy keeps reasoning continuity in all six
directions: the upstream's opaque reasoning reaches the client packed into the field that client
echoes back, and the next request gives the upstream back exactly what it issued."""

from __future__ import annotations

import json

import pytest

from proxai_core import Protocol, translate_request, translate_response

from ..sdk import validate_request, validate_response

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES
THOUGHT = "The user wants the weather; call the tool.\n  (exact bytes matter)"
SIG = "EqQBCkgIARABGAIiQL2signature+/=="
ENC = "gAAAAABencrypted_blob=="

TOOLS = {
    C: [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}],
    R: [{"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}],
    A: [{"name": "weather", "input_schema": {"type": "object", "properties": {}}}],
}


def first_request(k):
    if k is C:
        return {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS[C]}
    if k is R:
        return {"model": "m", "input": [{"role": "user", "content": "weather?"}], "tools": TOOLS[R],
                "include": ["reasoning.encrypted_content"], "store": False}
    return {"model": "m", "max_tokens": 2000, "messages": [{"role": "user", "content": "weather?"}],
            "tools": TOOLS[A], "thinking": {"type": "enabled", "budget_tokens": 1024}}


def upstream_response(u):
    if u is A:
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "tool_use",
                "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 5},
                "content": [{"type": "thinking", "thinking": THOUGHT, "signature": SIG},
                            {"type": "redacted_thinking", "data": "REDACTED=="},
                            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]}
    if u is R:
        return {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5", "status": "completed",
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
                "incomplete_details": None, "instructions": None, "metadata": {},
                "output": [{"type": "reasoning", "id": "rs_abc", "encrypted_content": ENC,
                            "summary": [{"type": "summary_text", "text": THOUGHT}]},
                           {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
                            "arguments": '{"city":"Paris"}', "status": "completed"}],
                "usage": {"input_tokens": 5, "output_tokens": 5, "total_tokens": 10,
                          "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 3}}}
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "deepseek-reasoner",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "reasoning_content": THOUGHT,
                "tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}}


def echo_next_request(k, client_body, req1):
    """What a real client of protocol k sends next: its history echoed verbatim + the tool result."""
    if k is C:
        msg = client_body["choices"][0]["message"]
        hist = {"role": "assistant", "content": msg.get("content"), "tool_calls": msg["tool_calls"]}
        if msg.get("reasoning_content") is not None:
            hist["reasoning_content"] = msg["reasoning_content"]
        call_id = msg["tool_calls"][0]["id"]
        return dict(req1, messages=req1["messages"] + [hist, {"role": "tool", "tool_call_id": call_id,
                                                                "content": "sunny"}])
    if k is R:
        items = [dict(it) for it in client_body["output"]]
        call_id = [it for it in items if it["type"] == "function_call"][0]["call_id"]
        return dict(req1, input=req1["input"] + items + [{"type": "function_call_output", "call_id": call_id,
                                                           "output": "sunny"}])
    blocks = client_body["content"]
    call_id = [b for b in blocks if b["type"] == "tool_use"][0]["id"]
    return dict(req1, messages=req1["messages"] + [
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "sunny"}]}])


def issued_back(u, upstream_req):
    """The upstream-native reasoning found in the translated next request."""
    if u is A:
        asst = [m for m in upstream_req["messages"] if m["role"] == "assistant"][-1]["content"]
        return [(b["type"], b.get("thinking"), b.get("signature"), b.get("data")) for b in asst
                if b["type"] in ("thinking", "redacted_thinking")]
    if u is R:
        return [(it["id"], it.get("encrypted_content")) for it in upstream_req["input"]
                if isinstance(it, dict) and it.get("type") == "reasoning"]
    asst = [m for m in upstream_req["messages"] if m["role"] == "assistant"][-1]
    return asst.get("reasoning_content")


EXPECTED = {
    A: [("thinking", THOUGHT, SIG, None), ("redacted_thinking", None, None, "REDACTED==")],
    R: [("rs_abc", ENC)],
    C: THOUGHT,
}

PAIRS = [(u, k) for u in (A, R, C) for k in (A, R, C) if u is not k]


@pytest.mark.parametrize("u,k", PAIRS, ids=[f"upstream {u.name} / client {k.name}" for u, k in PAIRS])
def test_tool_loop_keeps_reasoning(u, k):
    req1 = first_request(k)
    up_req = translate_request(req1, k, u)
    validate_request(u, up_req)
    client_body = translate_response(upstream_response(u), u, k, request=req1)
    validate_response(k, client_body)
    raw = json.dumps(client_body)
    # the opaque payload travels in our versioned envelope, never as plain content
    assert "proxai" in raw and SIG not in raw and ENC not in raw
    req2 = echo_next_request(k, client_body, req1)
    up_req2 = translate_request(req2, k, u)
    validate_request(u, up_req2)
    assert issued_back(u, up_req2) == EXPECTED[u]
    # and nothing of ours leaks to the upstream
    assert "proxai" not in json.dumps(up_req2)


@pytest.mark.parametrize("u,k", PAIRS, ids=[f"upstream {u.name} / client {k.name}" for u, k in PAIRS])
def test_foreign_reasoning_is_never_forwarded(u, k):
    """Reasoning the upstream did not issue (e.g. an Anthropic signature sent to OpenAI) is dropped."""
    other = next(p for p in (A, R, C) if p not in (u, k))
    req1 = first_request(k)
    client_body = translate_response(upstream_response(other), other, k, request=req1)
    req2 = echo_next_request(k, client_body, req1)
    w: list[str] = []
    up_req2 = translate_request(req2, k, u, warnings=w)
    text = json.dumps(up_req2)
    assert SIG not in text and ENC not in text and "proxai" not in text
    if other is not C:
        assert w, "the drop is reported"
