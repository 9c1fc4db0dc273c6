"""All six request directions on one feature-rich request per protocol: every produced body is
validated with the SDK's request types, and every feature is checked on the wire of the target."""

from __future__ import annotations

import base64
import json

import pytest

from proxai_core import Protocol, TranslationError, decode_request, translate_request
from proxai_core import neutral as n
from tests.conftest import DIRECTIONS as ALL_DIRECTIONS

from ..sdk import ANTHROPIC_BODIES, EVENTSTREAM, HOSTED, HOSTED_PATHS, hosted_request, validate_request

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
B = Protocol.BEDROCK_CONVERSE
URL = "https://example.com/cat.png"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 32).decode()
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OUT_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
              "additionalProperties": False}

CHAT_REQ = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [
            {"type": "text", "text": "Look at this"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"}},
        ]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Rome"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
        {"role": "user", "content": "Summarize."},
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "Get weather",
                                                "parameters": SCHEMA}}],
    "tool_choice": {"type": "function", "function": {"name": "weather"}},
    "parallel_tool_calls": False,
    "max_completion_tokens": 900,
    "temperature": 0.5,
    "top_p": 0.9,
    "stop": ["END"],
    "reasoning_effort": "medium",
    "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": OUT_SCHEMA, "strict": True}},
    "user": "user-42",
    "stream": True,
    "stream_options": {"include_usage": True},
}

RESPONSES_REQ = {
    "model": "gpt-5",
    "instructions": "You are terse.",
    "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "Look at this"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
            {"type": "input_file", "file_data": f"data:application/pdf;base64,{PDF}", "filename": "a.pdf"},
        ]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.",
                                                              "annotations": []}]},
        {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": "call_b", "name": "weather", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_b", "output": "rain"},
        {"role": "user", "content": "Summarize."},
    ],
    "tools": [{"type": "function", "name": "weather", "description": "Get weather", "parameters": SCHEMA,
               "strict": False},
              {"type": "custom", "name": "apply_patch", "description": "Apply a patch",
               "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}],
    "tool_choice": {"type": "function", "name": "weather"},
    "parallel_tool_calls": False,
    "max_output_tokens": 900,
    "temperature": 0.5,
    "top_p": 0.9,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": OUT_SCHEMA, "strict": True}},
    "safety_identifier": "user-42",
    "stream": True,
}

ANTHROPIC_REQ = {
    "model": "claude-sonnet-4-5",
    "system": [{"type": "text", "text": "You are terse."}],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "Look at this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
             "title": "a.pdf"},
        ]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_a", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_b", "name": "weather", "input": {"city": "Rome"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "call_b", "content": "rain", "is_error": True},
            {"type": "text", "text": "Summarize."},
        ]},
    ],
    "tools": [{"name": "weather", "description": "Get weather", "input_schema": SCHEMA}],
    "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
    "max_tokens": 900,
    "temperature": 0.5,
    "top_k": 40,
    "stop_sequences": ["END"],
    "output_config": {"format": {"type": "json_schema", "schema": OUT_SCHEMA}},
    "metadata": {"user_id": "user-42"},
    "stream": True,
}

GEMINI_REQ = {  # model and stream live in the URL (PATHS)
    "systemInstruction": {"parts": [{"text": "You are terse."}]},
    "contents": [
        {"role": "user", "parts": [
            {"text": "Look at this"},
            {"inlineData": {"mimeType": "image/png", "data": PNG}},
            {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/cat.png"}},
            {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
        ]},
        {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"id": "call_a", "name": "weather", "args": {"city": "Paris"}}},
            {"functionCall": {"id": "call_b", "name": "weather", "args": {"city": "Rome"}}},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "call_a", "name": "weather", "response": {"output": "sunny"}}},
            {"functionResponse": {"id": "call_b", "name": "weather", "response": {"output": "rain"}}},
            {"text": "Summarize."},
        ]},
    ],
    "tools": [{"functionDeclarations": [{"name": "weather", "description": "Get weather",
                                         "parametersJsonSchema": SCHEMA}]}],
    "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}},
    "generationConfig": {"maxOutputTokens": 900, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"],
                         "responseMimeType": "application/json", "responseJsonSchema": OUT_SCHEMA},
}

CONVERSE_REQ = {  # model and stream live in the URL (PATHS); images by S3 location, never by URL
    "system": [{"text": "You are terse."}],
    "messages": [
        {"role": "user", "content": [
            {"text": "Look at this"},
            {"image": {"format": "png", "source": {"bytes": PNG}}},
            {"image": {"format": "png", "source": {"s3Location": {"uri": "s3://bucket/cat.png"}}}},
            {"document": {"format": "pdf", "name": "a", "source": {"bytes": PDF}}},
        ]},
        {"role": "assistant", "content": [
            {"text": "Checking."},
            {"toolUse": {"toolUseId": "call_a", "name": "weather", "input": {"city": "Paris"}}},
            {"toolUse": {"toolUseId": "call_b", "name": "weather", "input": {"city": "Rome"}}},
        ]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "call_a", "content": [{"text": "sunny"}]}},
            {"toolResult": {"toolUseId": "call_b", "content": [{"text": "rain"}], "status": "error"}},
            {"text": "Summarize."},
        ]},
    ],
    "toolConfig": {"tools": [{"toolSpec": {"name": "weather", "description": "Get weather",
                                           "inputSchema": {"json": SCHEMA}}}],
                   "toolChoice": {"tool": {"name": "weather"}}},
    "inferenceConfig": {"maxTokens": 900, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
    "outputConfig": {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
        "name": "out", "schema": json.dumps(OUT_SCHEMA)}}}},
}

REQS = {C: CHAT_REQ, R: RESPONSES_REQ, A: ANTHROPIC_REQ, G: GEMINI_REQ, B: CONVERSE_REQ}
PATHS = {G: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
         B: "/model/anthropic.claude-sonnet-4-5/converse-stream"}
for _p in HOSTED:  # Claude hosted by a cloud: the Anthropic request, the model in the URL
    REQS[_p] = hosted_request(_p, ANTHROPIC_REQ)
    PATHS[_p] = HOSTED_PATHS[_p.value]
AB = ANTHROPIC_BODIES
#: protocols with no end-user id and no parallel-calls switch (dropped with a warning)
NO_USER = (G, B)


def _without_url_image(v):
    """A request without its image given by URL (Bedrock Converse takes images as bytes or S3)."""
    if isinstance(v, list):  # (innermost first: the part that names the URL goes, its message stays)
        kept = [_without_url_image(x) for x in v]
        return [x for x in kept if not (isinstance(x, dict) and URL in json.dumps(x))]
    if isinstance(v, dict):
        return {k: _without_url_image(x) for k, x in v.items()}
    return v
DIRECTIONS = list(ALL_DIRECTIONS)


def _parts(req: n.Request, kind):
    return [p for m in req.messages for p in m.parts if isinstance(p, kind)]


@pytest.mark.parametrize("src,dst", DIRECTIONS, ids=[f"{s.name}->{t.name}" for s, t in DIRECTIONS])
def test_feature_rich_request(src, dst):
    w: list[str] = []
    body = REQS[src]
    if dst is B and src is not B:  # an image by URL is rejected, naming it
        with pytest.raises(TranslationError, match="not a URL"):
            translate_request(body, src, dst, path=PATHS.get(src))
        body = _without_url_image(body)
    out = translate_request(body, src, dst, warnings=w, path=PATHS.get(src))
    validate_request(dst, out)
    got = decode_request(out, dst)
    want = decode_request(body, src, path=PATHS.get(src))
    # system / instructions placement
    assert " ".join(t.text for t in got.system) == "You are terse."
    if dst is R:
        assert out["instructions"] == "You are terse."
    elif dst in AB:
        assert out["system"] in ("You are terse.", [{"type": "text", "text": "You are terse."}])
    elif dst is G:
        assert out["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    elif dst is B:
        assert out["system"] == [{"text": "You are terse."}]
    else:
        assert out["messages"][0]["role"] in ("system", "developer")
    # multi-part user content: text + base64 image + URL image + PDF
    imgs = _parts(got, n.Image)
    assert any(i.data == PNG or (i.url or "").endswith(PNG) for i in imgs)
    if dst is not B:
        assert [i.source for i in imgs] == ["base64", "url"] or [i.url is not None for i in imgs] == [True, True]
        assert any((i.url or "") in (URL, "s3://bucket/cat.png") for i in imgs)
    docs = _parts(got, n.Document)
    assert docs and (docs[0].data == PDF or PDF in (docs[0].url or "") or PDF in (docs[0].data or ""))
    # tools and JSON schema kept
    fn = [t for t in got.tools if t.name == "weather"][0]
    assert fn.parameters == SCHEMA
    # tool choice named, parallel tool calls off
    assert got.tool_choice is not None and got.tool_choice.mode == "tool" and got.tool_choice.name == "weather"
    if not {src, dst} & set(NO_USER):  # (Gemini and Converse have no parallel-calls switch: a warning says so)
        assert got.parallel_tool_calls is False
    elif dst in NO_USER and src not in NO_USER:
        assert any("parallel_tool_calls" in x for x in w)
    if dst in AB and src not in NO_USER:
        assert out["tool_choice"]["disable_parallel_tool_use"] is True
    # assistant tool calls and results in order; consecutive results in ONE Anthropic user turn
    calls = _parts(got, n.ToolCall)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_a", "weather", {"city": "Paris"}), ("call_b", "weather", {"city": "Rome"})]
    results = _parts(got, n.ToolResult)
    assert [r.call_id for r in results] == ["call_a", "call_b"]
    assert [r.content[0].text for r in results] == ["sunny", "rain"]
    if dst in AB:
        user_turns = [m for m in out["messages"] if m["role"] == "user"]
        kinds = [[b["type"] for b in (m["content"] if isinstance(m["content"], list) else [])] for m in user_turns]
        assert ["tool_result", "tool_result", "text"] in kinds
    if src in AB and dst is G:  # Gemini carries the error flag: {"error": ...}
        assert out["contents"][2]["parts"][1]["functionResponse"]["response"] == {"error": "rain"}
    elif src in AB and dst is B:  # and Converse: a result's status
        assert out["messages"][2]["content"][1]["toolResult"]["status"] == "error"
    elif src in AB and dst not in AB:
        assert any("is_error" in x for x in w), "is_error loss is reported"
    # max tokens, sampling, stop sequences (an array stays an array)
    assert got.max_output_tokens == 900
    assert got.temperature == 0.5 or (dst in AB and "temperature" in " ".join(w))
    if dst is C:
        assert out["max_completion_tokens"] == 900
        if want.stop:
            assert out["stop"] == ["END"]
        assert out["stream_options"] == {"include_usage": True}
    if dst in AB:
        assert out["max_tokens"] == 900
        if want.stop:
            assert out["stop_sequences"] == ["END"]
    if dst is R and want.stop:
        assert any("stop" in x for x in w), "Responses has no stop parameter: reported"
    # structured output
    assert got.output_format is not None and got.output_format.type == "json_schema"
    assert got.output_format.schema == OUT_SCHEMA
    # user / safety identifier (Gemini has none: dropped with a warning)
    if not {src, dst} & set(NO_USER):
        assert got.user == "user-42"
    elif dst in NO_USER and src not in NO_USER:
        assert any("user" in x for x in w)
    # stream (a Gemini, Converse or Bedrock InvokeModel upstream's is in its path)
    if dst in (G, B) or dst in EVENTSTREAM:
        assert "stream" not in out
    else:
        assert out["stream"] is True
    # custom tool (Codex apply_patch) carried as a function with one string input
    if src is R:
        names = [t.name for t in got.tools]
        assert "apply_patch" in names
        if dst is not R:
            t = [t for t in got.tools if t.name == "apply_patch"][0]
            assert t.parameters["properties"]["input"]["type"] == "string"


def test_reasoning_effort_to_thinking_budget_and_back():
    simple = {"model": "gpt-4o", "messages": [{"role": "user", "content": "think"}], "reasoning_effort": "medium"}
    out = translate_request(simple, C, A)
    assert out["thinking"]["type"] == "enabled" and out["thinking"]["budget_tokens"] > 0
    assert out["max_tokens"] > out["thinking"]["budget_tokens"]
    back = translate_request(out, A, C)
    assert back["reasoning_effort"] == "medium"
    r = translate_request(out, A, R)
    assert r["reasoning"]["effort"] == "medium"


def test_n_greater_than_one_is_rejected_naming_the_field():
    with pytest.raises(TranslationError, match=r"\bn\b"):
        translate_request(dict(CHAT_REQ, n=2), C, A)


def test_previous_response_id_is_rejected_for_stateless_targets():
    body = {"model": "gpt-5", "input": "hi", "previous_response_id": "resp_1"}
    for dst in (C, A):
        with pytest.raises(TranslationError, match="previous_response_id"):
            translate_request(body, R, dst)


def test_long_tool_names_are_shortened_reversibly():
    long = "mcp__some_server__" + "x" * 80
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": long, "parameters": SCHEMA}}]}
    for dst in (A, R):
        out = translate_request(body, C, dst)
        name = out["tools"][0]["name"]
        assert len(name) <= 64 and name != long
    # the client's name comes back in the response
    from proxai_core import translate_response

    a_resp = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "tool_use",
              "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
              "content": [{"type": "tool_use", "id": "toolu_1", "name": translate_request(body, C, A)["tools"][0]["name"],
                           "input": {"city": "x"}}]}
    chat = translate_response(a_resp, A, C, request=body)
    assert chat["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == long


def test_refusal_in_assistant_history():
    body = {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "bad"}, {"role": "assistant", "content": None, "refusal": "I can't."},
        {"role": "user", "content": "ok then"}]}
    for dst in (A, R):
        out = translate_request(body, C, dst)
        validate_request(dst, out)
        back = decode_request(out, dst)
        texts = [p for m in back.messages if m.role == "assistant" for p in m.parts]
        assert texts and ("I can't." in getattr(texts[0], "text", ""))


def test_chat_upstream_always_gets_include_usage_when_streaming():
    out = translate_request(dict(ANTHROPIC_REQ), A, C)
    assert out["stream_options"] == {"include_usage": True}
