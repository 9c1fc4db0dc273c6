"""The Gemini ``generateContent`` codec: endpoints and credentials, requests both ways, the cases no
real recording has (written from the documented shapes), errors, streams in both framings, ids,
thought signatures and usage. Every body is judged by google-genai's types (tests/sdk_gemini.py) and,
on the other side, by the openai / anthropic SDKs (tests/sdk.py)."""

from __future__ import annotations

import json

import pytest

from proxai_core import (
    StopReason,
    StreamTranslator,
    TranslationError,
    decode_request,
    stop_info,
    stream_from_response,
    translate_error,
    translate_request,
    translate_response_result,
)
from proxai_core.codecs import client_of_headers, get, match_path
from proxai_core.codecs._gemini_common import (
    MINTED_PREFIX,
    SKIP_SIGNATURE,
    JsonArrayReader,
    is_packed_signature,
    pack_signature,
    unpack_signature,
    usage_from_wire,
    usage_to_wire,
)
from proxai_core.neutral import Error, Usage

from ..sdk import (
    A,
    C,
    G,
    R,
    StreamError,
    accumulate_stream,
    summarize_response,
    validate_request,
    validate_response,
)
from ..sdk_gemini import chunks_of_stream

OTHERS = (C, R, A)
SSE_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
ARRAY_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
JSON_PATH = "/v1beta/models/gemini-2.5-flash:generateContent"


def _frame(chunks: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)


def _array(chunks: list[dict]) -> bytes:
    return ("[" + "\n,\r\n".join(json.dumps(c, indent=2) for c in chunks) + "]").encode()


def _body(parts: list[dict], finish: str | None = "STOP", **extra) -> dict:
    cand: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    cand.update(extra.pop("cand", {}))
    body = {"candidates": [cand], "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                                    "totalTokenCount": 15},
            "modelVersion": "gemini-2.5-flash", "responseId": "resp-1"}
    body.update(extra)
    return body


# ============================================================================= endpoints, credentials
def test_the_url_names_model_method_and_framing():
    m = match_path(SSE_PATH)
    assert (m.kind, m.codec.name, m.prefix, m.model_id, m.stream, m.sse) == (
        "generate", "gemini", "/v1beta", "gemini-2.5-flash", True, True)
    m = match_path(ARRAY_PATH)
    assert (m.stream, m.sse) == (True, False)
    m = match_path(JSON_PATH)
    assert (m.kind, m.stream) == ("generate", False)
    m = match_path("/v1beta/models/gemini-2.5-flash:countTokens")
    assert (m.kind, m.codec.name) == ("count_tokens", "gemini")
    m = match_path("/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-3-pro-preview:"
                   "streamGenerateContent?alt=sse")
    assert (m.codec.name, m.prefix, m.model_id, m.stream) == (
        "gemini", "/v1/projects/p1/locations/us-central1/publishers/google", "gemini-3-pro-preview", True)
    m = match_path("https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent?key=x")
    assert (m.codec.name, m.prefix, m.model_id, m.stream) == ("gemini", "/v1beta", "gemini-2.5-flash", False)
    assert match_path("/v1beta/models", "GET").kind == "models"
    assert match_path("/v1beta/models/gemini-2.5-flash", "GET").model_id == "gemini-2.5-flash"
    # the other protocols still match by their fixed paths
    assert match_path("/v1/messages").codec.name == "anthropic"


def test_path_facts_do_not_depend_on_the_query_key():
    from proxai_core.codecs import _gemini_common as gc

    keyed = "/v1beta/models/gemini-cache-probe:streamGenerateContent?alt=sse&key=SECRET-1"
    plain = "/v1beta/models/gemini-cache-probe:streamGenerateContent?alt=sse"
    assert gc.parse_endpoint(keyed) == gc.parse_endpoint(plain)
    assert (gc.parse_endpoint(plain).model, gc.parse_endpoint(plain).sse) == ("gemini-cache-probe", True)
    assert gc.parse_endpoint(plain + "&alt=json").sse is True  # (parse_qsl: any alt=sse counts)


def test_upstream_path_and_credentials():
    g = get(G)
    assert g.wire.endpoints.path_for("gemini-2.5-flash", True) == "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert g.wire.endpoints.path_for("models/gemini-2.5-flash", False) == "/models/gemini-2.5-flash:generateContent"
    assert g.wire.credentials.key_query == ("key",)
    assert "x-goog-api-key" in g.wire.credentials.key_headers
    assert g.wire.credentials.auth_headers("secret", "generativelanguage.googleapis.com") == {
        "x-goog-api-key": "secret"}
    assert client_of_headers({"x-goog-api-key": "k"}) is g


def test_model_list_in_gemini_format():
    g = get(G)
    body = g.wire.model_list([g.wire.model_entry("gemini-2.5-flash", None)])
    assert body["models"][0]["name"] == "models/gemini-2.5-flash"
    from google.genai import models as gm
    from google.genai import types as gt

    # the SDK's own path from the developer API's model list
    listed = gt.ListModelsResponse._from_response(response=gm._ListModelsResponse_from_mldev(body), kwargs={})
    assert listed.models[0].name == "models/gemini-2.5-flash"
    assert "generateContent" in listed.models[0].supported_actions


# ============================================================================= requests
REQ = {
    "systemInstruction": {"parts": [{"text": "Be brief."}]},
    "contents": [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"},
                                   {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnMQ=="},
            {"functionCall": {"name": "weather", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "weather", "response": {"output": "sunny"}}},
            {"functionResponse": {"name": "weather", "response": {"output": "rain"}}}]},
    ],
    "tools": [{"functionDeclarations": [{"name": "weather", "description": "Weather",
                                         "parameters": {"type": "OBJECT", "properties": {
                                             "city": {"type": "STRING", "nullable": True}},
                                             "required": ["city"]}}]}],
    "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}},
    "generationConfig": {"maxOutputTokens": 200, "temperature": 0.2, "topP": 0.9, "topK": 20,
                         "stopSequences": ["END"], "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": True}},
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
}


def test_request_reads_into_neutral():
    validate_request(G, REQ)
    req = decode_request(REQ, G, path=JSON_PATH)
    assert req.model == "gemini-2.5-flash" and req.stream is False
    assert [t.text for t in req.system] == ["Be brief."]
    assert req.tools[0].parameters == {"type": "object", "properties": {"city": {"type": ["string", "null"]}},
                                       "required": ["city"]}
    assert (req.tool_choice.mode, req.tool_choice.name) == ("tool", "weather")
    assert (req.max_output_tokens, req.temperature, req.top_p, req.top_k, req.stop) == (200, 0.2, 0.9, 20, ["END"])
    assert req.reasoning.budget_tokens == 2048 and req.reasoning.summary == "auto"
    # calls without ids get stable minted ids; responses match them by name and order
    calls = [p for m in req.messages for p in m.parts if type(p).__name__ == "ToolCall"]
    results = [p for m in req.messages for p in m.parts if type(p).__name__ == "ToolResult"]
    assert [c.id for c in calls] == [r.call_id for r in results]
    assert all(c.id.startswith(MINTED_PREFIX) for c in calls) and calls[0].id != calls[1].id
    assert decode_request(REQ, G).messages[1].parts[1].id == calls[0].id  # deterministic
    assert [r.content[0].text for r in results] == ["sunny", "rain"]


@pytest.mark.parametrize("target", OTHERS)
def test_request_into_every_protocol_and_back(target):
    w: list[str] = []
    out = translate_request(REQ, G, target, warnings=w, path=SSE_PATH)
    validate_request(target, out)
    if target is not R:
        assert out["model"] == "gemini-2.5-flash"
    assert any("safety_settings" in x for x in w), w  # kept only for a Gemini upstream, named elsewhere
    back = translate_request(out, target, G)
    validate_request(G, back)
    # the functions, their arguments and results survive; minted ids never reach Gemini
    model_turn = back["contents"][1]["parts"]
    assert [p["functionCall"]["args"] for p in model_turn if "functionCall" in p] == [{"city": "Paris"},
                                                                                     {"city": "Rome"}]
    assert all("id" not in p["functionCall"] for p in model_turn if "functionCall" in p)
    assert [p["functionResponse"]["response"] for p in back["contents"][2]["parts"]] == [
        {"output": "sunny"}, {"output": "rain"}]
    assert back["generationConfig"]["maxOutputTokens"] == 200
    assert back["systemInstruction"] == {"parts": [{"text": "Be brief."}]}


def test_request_from_gemini_to_gemini_keeps_safety_settings_and_signatures():
    g = get(G)
    w: list[str] = []
    out = g.encode_request(g.decode_request(REQ, w), w)
    validate_request(G, out)
    assert out["safetySettings"] == REQ["safetySettings"]
    assert out["contents"][1]["parts"][0]["thoughtSignature"] == "c2lnMQ=="


def test_history_from_another_provider_gets_the_documented_skip_signature():
    body = {"model": "m", "max_tokens": 100, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]}
    out = translate_request(body, A, G)
    validate_request(G, out)
    call = out["contents"][1]["parts"][0]
    assert call["thoughtSignature"] == SKIP_SIGNATURE and call["functionCall"]["id"] == "toolu_1"
    assert out["contents"][2]["parts"][0]["functionResponse"] == {"name": "f", "response": {"output": "ok"},
                                                                  "id": "toolu_1"}


@pytest.mark.parametrize("mode,names,want", [
    ("AUTO", None, ("auto", None)), ("NONE", None, ("none", None)), ("ANY", None, ("required", None)),
    ("ANY", ["a"], ("tool", "a")), ("ANY", ["a", "b"], ("allowed", None)), ("AUTO", ["a", "b"], ("allowed", None)),
])
def test_function_calling_config_to_tool_choice_and_back(mode, names, want):
    fcc: dict = {"mode": mode}
    if names:
        fcc["allowedFunctionNames"] = names
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}],
            "toolConfig": {"functionCallingConfig": fcc}}
    req = decode_request(body, G)
    assert (req.tool_choice.mode, req.tool_choice.name) == want
    out = get(G).encode_request(req, [])
    assert out["toolConfig"]["functionCallingConfig"] == fcc


@pytest.mark.parametrize("effort,model,want", [
    ("low", "gemini-2.5-flash", {"thinkingBudget": 1024, "includeThoughts": True}),
    ("high", "gemini-3-pro-preview", {"thinkingLevel": "HIGH", "includeThoughts": True}),
    ("none", "gemini-2.5-flash", {"thinkingBudget": 0}),
])
def test_reasoning_effort_to_thinking_config(effort, model, want):
    body = {"model": model, "messages": [{"role": "user", "content": "x"}], "reasoning_effort": effort}
    out = translate_request(body, C, G)
    assert out["generationConfig"]["thinkingConfig"] == want
    validate_request(G, out)


def test_thinking_level_and_structured_output_to_other_protocols():
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW"}, "responseMimeType": "application/json",
                                 "responseJsonSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}}
    out = translate_request(body, G, C, path=JSON_PATH)
    assert out["reasoning_effort"] == "low"
    assert out["response_format"]["type"] == "json_schema"
    assert out["response_format"]["json_schema"]["schema"]["properties"] == {"a": {"type": "string"}}
    back = translate_request(out, C, G)
    assert back["generationConfig"]["responseMimeType"] == "application/json"
    assert back["generationConfig"]["responseJsonSchema"]["properties"] == {"a": {"type": "string"}}


@pytest.mark.parametrize("body,field", [
    ({"contents": [], "generationConfig": {"candidateCount": 2}}, "generationConfig.candidateCount"),
    ({"contents": [], "cachedContent": "cachedContents/abc"}, "cachedContent"),
    ({"contents": [{"role": "user", "parts": [{"bogus": 1}]}]}, "contents[0].parts[0]"),
    ({"contents": [{"role": "tool", "parts": []}]}, "contents[0].role"),
    ({"contents": "x"}, "contents"),
])
def test_rejections_name_the_field(body, field):
    with pytest.raises(TranslationError) as e:
        translate_request(body, G, A)
    assert str(e.value).startswith(field + ":"), str(e.value)


def test_n_greater_than_one_toward_gemini_is_rejected():
    with pytest.raises(TranslationError, match="^n:"):
        get(G).encode_request(decode_request({"model": "m", "messages": [{"role": "user", "content": "x"}]}, C)
                              .__class__(extra={"n": 2}), [])


def test_snake_case_request_fields_are_read():
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]},
                         {"role": "model", "parts": [{"function_call": {"name": "f", "args": {"a_b": 1}},
                                                      "thought_signature": "c2ln"}]}],
            "system_instruction": {"parts": [{"text": "sys"}]},
            "generation_config": {"max_output_tokens": 5}}
    req = decode_request(body, G)
    assert req.max_output_tokens == 5 and req.system[0].text == "sys"
    call = req.messages[1].parts[-1]
    assert json.loads(call.arguments) == {"a_b": 1}  # user data is never renamed


# ============================================================================= stops (documented-only cases)
FINISHES = [("RECITATION", StopReason.REFUSAL), ("BLOCKLIST", StopReason.REFUSAL),
            ("PROHIBITED_CONTENT", StopReason.REFUSAL), ("SPII", StopReason.REFUSAL),
            ("SAFETY", StopReason.REFUSAL), ("OTHER", StopReason.OTHER),
            ("MALFORMED_FUNCTION_CALL", StopReason.OTHER), ("MAX_TOKENS", StopReason.MAX_OUTPUT),
            ("LANGUAGE", StopReason.OTHER)]


@pytest.mark.parametrize("finish,reason", FINISHES)
def test_documented_finish_reasons_classify_and_translate(finish, reason):
    body = _body([{"text": "Partial"}], finish, cand={"finishMessage": f"stopped: {finish}"})
    validate_response(G, body)
    s = stop_info(body, G)
    assert s.reason is reason and s.raw == finish
    if reason is StopReason.REFUSAL:
        assert s.category == finish and s.message == f"stopped: {finish}"
    if finish == "MALFORMED_FUNCTION_CALL":
        assert s.category == "malformed-output"
    for target in OTHERS:
        res = translate_response_result(body, G, target)
        validate_response(target, res.body)
        summ = summarize_response(target, res.body)
        assert "Partial" in (summ.text + (summ.refusal or ""))
        got = stop_info(res.body, target).reason
        if reason is StopReason.REFUSAL:
            assert got is StopReason.REFUSAL, (target, res.body)
        # the same as a stream, judged by the SDK accumulators
        t = StreamTranslator(G, target)
        out = t.feed(_frame([body])) + t.close()
        acc = accumulate_stream(target, out)
        assert "Partial" in acc.text + (acc.refusal or "")
        assert t.stop.reason is reason


@pytest.mark.parametrize("block", ["SAFETY", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT"])
def test_prompt_blocked_is_a_refusal_of_the_input_everywhere(block):
    body = {"promptFeedback": {"blockReason": block, "safetyRatings": [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7}, "modelVersion": "gemini-2.5-flash"}
    validate_response(G, body)
    s = stop_info(body, G)
    assert s.reason is StopReason.REFUSAL and s.raw == block and s.detail["input_blocked"] is True
    for target in OTHERS:
        res = translate_response_result(body, G, target)
        validate_response(target, res.body)
        assert stop_info(res.body, target).reason is StopReason.REFUSAL
        summ = summarize_response(target, res.body)
        assert summ.text or summ.refusal
        t = StreamTranslator(G, target)
        out = t.feed(_frame([body])) + t.close()
        acc = accumulate_stream(target, out)
        assert acc.text or acc.refusal
    # and back to a Gemini client: the block, with no candidates
    g = get(G)
    resp = g.decode_response(body, [])
    again = g.encode_response(resp, None, [])
    assert again["promptFeedback"]["blockReason"] == block and "candidates" not in again
    validate_response(G, again)


@pytest.mark.parametrize("source", OTHERS)
def test_refusals_of_other_providers_reach_gemini_as_safety_with_their_text(source):
    bodies = {
        A: {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [],
            "stop_reason": "refusal", "stop_sequence": None,
            "stop_details": {"type": "refusal", "category": "cyber", "explanation": "Not allowed."},
            "usage": {"input_tokens": 3, "output_tokens": 0}},
        C: {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": None, "refusal": "Not allowed."},
             "finish_reason": "stop"}]},
        R: {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt", "status": "completed",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "refusal", "refusal": "Not allowed."}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []},
    }
    res = translate_response_result(bodies[source], source, G)
    validate_response(G, res.body)
    cand = res.body["candidates"][0]
    assert cand["finishReason"] == "SAFETY"
    assert "Not allowed." in json.dumps(cand["content"]) and cand["finishMessage"]
    assert stop_info(res.body, G).reason is StopReason.REFUSAL


# ============================================================================= errors
@pytest.mark.parametrize("status,gstatus,kinds", [
    (403, "PERMISSION_DENIED", {A: (403, "permission_error"), C: (403, "permission_error")}),
    (500, "INTERNAL", {A: (500, "api_error"), C: (500, "server_error")}),
    (503, "UNAVAILABLE", {A: (529, "overloaded_error"), C: (503, None)}),
    (429, "RESOURCE_EXHAUSTED", {A: (429, "rate_limit_error"), C: (429, "rate_limit_error")}),
    (401, "UNAUTHENTICATED", {A: (401, "authentication_error"), C: (401, None)}),
    (504, "DEADLINE_EXCEEDED", {A: (504, "timeout_error"), C: (504, None)}),
])
def test_google_error_bodies_into_every_protocol(status, gstatus, kinds):
    body = {"error": {"code": status, "message": f"{gstatus} happened", "status": gstatus}}
    for target, (want_status, want_type) in kinds.items():
        st, out = translate_error(status, json.dumps(body).encode(), G, target)
        assert st == want_status, (target, st, out)
        if target is A:
            assert out["error"]["type"] == want_type
        elif want_type:
            assert out["error"]["type"] == want_type
        assert out["error"]["message"] == f"{gstatus} happened"
    # Gemini to Gemini keeps the status name
    st, out = translate_error(status, json.dumps(body).encode(), G, G)
    assert st == status and out == {"error": {"code": status, "message": f"{gstatus} happened", "status": gstatus}}


@pytest.mark.parametrize("kind,want", [
    ("invalid_request", (400, "INVALID_ARGUMENT")), ("authentication", (401, "UNAUTHENTICATED")),
    ("permission", (403, "PERMISSION_DENIED")), ("not_found", (404, "NOT_FOUND")),
    ("rate_limit", (429, "RESOURCE_EXHAUSTED")), ("api_error", (500, "INTERNAL")),
    ("overloaded", (503, "UNAVAILABLE")), ("timeout", (504, "DEADLINE_EXCEEDED")),
])
def test_every_error_kind_reaches_a_gemini_client_with_its_google_status(kind, want):
    st, body = get(G).error_response(Error(kind=kind, message="m"))
    assert (st, body["error"]["status"], body["error"]["code"]) == (want[0], want[1], want[0])


def test_anthropic_overloaded_reaches_gemini_as_503_unavailable():
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    st, out = translate_error(529, json.dumps(body).encode(), A, G)
    assert st == 503 and out["error"]["status"] == "UNAVAILABLE"


@pytest.mark.parametrize("target", OTHERS + (G,))
def test_an_error_inside_a_200_stream(target):
    chunks = [_body([{"text": "Hel"}], None),
              {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}]
    t = StreamTranslator(G, target)
    out = t.feed(_frame(chunks)) + t.close()
    assert t.error is not None and t.error.kind == "overloaded"
    assert t.stop.reason is StopReason.INTERRUPTED
    if target is not G:
        with pytest.raises(StreamError):
            accumulate_stream(target, out)


@pytest.mark.parametrize("source", OTHERS)
def test_errors_mid_stream_reach_a_gemini_client_as_a_google_error(source):
    t = StreamTranslator(source, G)
    out = t.feed(b"") + t.abort("connection reset")
    obj = json.loads(out.split(b"data: ", 1)[1])
    assert obj["error"]["status"] == "UNAVAILABLE" and obj["error"]["message"] == "connection reset"


# ============================================================================= streams
STREAM = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "thinking…", "thought": True}]}}],
     "responseId": "r1", "modelVersion": "gemini-3-pro-preview"},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me "}]}}], "responseId": "r1"},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "check."}]}}], "responseId": "r1"},
    {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2lnLWE="},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]}, "finishReason": "STOP"}],
     "responseId": "r1", "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 12,
                                           "thoughtsTokenCount": 8, "cachedContentTokenCount": 10,
                                           "totalTokenCount": 50}},
]


@pytest.mark.parametrize("framing", ["sse", "array"])
@pytest.mark.parametrize("target", OTHERS)
def test_a_tool_stream_into_every_protocol(framing, target):
    raw = _frame(STREAM) if framing == "sse" else _array(STREAM)
    t = StreamTranslator(G, target)
    out = t.feed(raw) + t.close()
    acc = accumulate_stream(target, out)
    assert acc.text == "Let me check." and acc.reasoning
    assert acc.tool_calls == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert t.stop.reason is StopReason.TOOL_USE
    assert (t.usage.input, t.usage.cache_read, t.usage.output, t.usage.reasoning) == (20, 10, 20, 8)


def test_minted_call_ids_are_the_same_streamed_and_complete():
    t = StreamTranslator(G, C)
    streamed = accumulate_stream(C, t.feed(_frame(STREAM)) + t.close())
    assert streamed.tool_calls
    from proxai_core.api import response_from_stream

    res = response_from_stream(_frame(STREAM), G, C)
    ids = [tc["id"] for tc in res.body["choices"][0]["message"]["tool_calls"]]
    t2 = StreamTranslator(G, C)
    out = t2.feed(_frame(STREAM)) + t2.close()
    sids = [json.loads(d)["choices"][0]["delta"]["tool_calls"][0]["id"]
            for d in out.decode().split("data: ")[1:] if '"id":"gcall_' in d]
    assert ids == sids and len(set(ids)) == 2 and all(i.startswith(MINTED_PREFIX) for i in ids)


@pytest.mark.parametrize("framing", ["sse", "array"])
@pytest.mark.parametrize("target", OTHERS + (G,))
def test_every_cut_before_the_finish_reason_is_interrupted(framing, target):
    raw = _frame(STREAM) if framing == "sse" else _array(STREAM)
    finish_at = raw.index(b"finishReason")
    for cut in range(0, len(raw), max(1, len(raw) // 60)):
        t = StreamTranslator(G, target)
        out = t.feed(raw[:cut]) + t.close()
        if cut <= finish_at:
            assert t.stop.reason is StopReason.INTERRUPTED, (cut, t.stop)
            assert b'"finishReason":"STOP"' not in out or target is G
        else:
            assert t.stop.reason in (StopReason.TOOL_USE, StopReason.INTERRUPTED)


@pytest.mark.parametrize("framing", ["sse", "array"])
def test_chunking_does_not_change_the_output(framing):
    raw = _frame(STREAM) if framing == "sse" else _array(STREAM)
    for target in OTHERS:
        t = StreamTranslator(G, target)
        whole = t.feed(raw) + t.close()
        for size in (1, 7, 64):
            t = StreamTranslator(G, target)
            parts = b"".join(t.feed(raw[i:i + size]) for i in range(0, len(raw), size)) + t.close()
            assert parts == whole, (target, size)


@pytest.mark.parametrize("source", OTHERS)
@pytest.mark.parametrize("path", [SSE_PATH, ARRAY_PATH])
def test_gemini_clients_get_their_framing(source, path):
    bodies = {
        A: {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig-A"},
                        {"type": "text", "text": "Hi"},
                        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"x": 1}}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 4}},
        C: {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
             "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                                         "total_tokens": 7}},
        R: {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt", "status": "completed",
            "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
                       {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                        "arguments": "{\"x\":1}", "status": "completed"}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []},
    }
    out, stop, _ = stream_from_response(bodies[source], source, G, {"contents": []}, path=path)
    if path == ARRAY_PATH:
        assert out.startswith(b"[") and out.endswith(b"]")
        json.loads(out)
    else:
        assert out.startswith(b"data: ") and out.endswith(b"\r\n\r\n")
    acc = accumulate_stream(G, out)
    assert acc.text == "Hi" and acc.tool_calls == [("f", {"x": 1})] and acc.stop == "STOP"
    for c in chunks_of_stream(out):
        validate_response(G, c)


# ============================================================================= partial arguments (Vertex)
def test_partial_args_build_nested_objects_and_continued_strings():
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "cook", "willContinue": True}, "thoughtSignature": "c2ln"}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"partialArgs": [
            {"jsonPath": "$.recipe.steps[0]", "stringValue": "Preheat ", "willContinue": True}],
            "willContinue": True}}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"partialArgs": [
            {"jsonPath": "$.recipe.steps[0]", "stringValue": "the oven."}], "willContinue": True}}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"partialArgs": [
            {"jsonPath": "$.recipe.items[1].qty", "numberValue": 2},
            {"jsonPath": "$.recipe.vegan", "boolValue": True},
            {"jsonPath": "$['recipe']['note']", "nullValue": None}], "willContinue": True}}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {}}]}, "finishReason": "STOP"}]},
    ]
    for target in OTHERS:
        t = StreamTranslator(G, target)
        acc = accumulate_stream(target, t.feed(_frame(chunks)) + t.close())
        assert acc.tool_calls == [("cook", {"recipe": {"steps": ["Preheat the oven."],
                                                        "items": [None, {"qty": 2}], "vegan": True,
                                                        "note": None}})], target
        assert t.stop.reason is StopReason.TOOL_USE


# ============================================================================= thought signatures
def test_gemini_signatures_survive_a_tool_loop_through_an_anthropic_client():
    body = _body([{"text": "ok", "thought": True, "thoughtSignature": "dGhvdWdodA=="},
                  {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "Y2FsbA=="}])
    res = translate_response_result(body, G, A)
    msg = res.body
    validate_response(A, msg)
    history = {"model": "claude", "max_tokens": 100, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": msg["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": msg["content"][-1]["id"],
                                      "content": "done"}]}]}
    out = translate_request(history, A, G)
    validate_request(G, out)
    parts = out["contents"][1]["parts"]
    assert parts[0] == {"text": "ok", "thought": True, "thoughtSignature": "dGhvdWdodA=="}
    assert parts[1]["thoughtSignature"] == "Y2FsbA==" and parts[1]["functionCall"]["name"] == "f"
    assert "id" not in parts[1]["functionCall"]  # a minted id is never sent to Gemini
    assert out["contents"][2]["parts"][0]["functionResponse"]["name"] == "f"


def test_anthropic_thinking_survives_a_tool_loop_through_a_gemini_client():
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "thinking", "thinking": "plan", "signature": "SIG-anthropic"},
                        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"x": 1}}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 4}}
    res = translate_response_result(body, A, G)
    validate_response(G, res.body)
    parts = res.body["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "plan", "thought": True}
    assert is_packed_signature(parts[1]["thoughtSignature"]) and parts[1]["functionCall"]["id"] == "toolu_1"
    # the SDK holds signatures as bytes: what it sends back is what we sent
    from google.genai import types as gt

    sdk_part = gt.Part.model_validate(parts[1])
    echoed = sdk_part.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert echoed["thoughtSignature"] == parts[1]["thoughtSignature"]
    # the client echoes the model turn without the thought part (as Gemini CLI does)
    history = {"contents": [{"role": "user", "parts": [{"text": "go"}]},
                            {"role": "model", "parts": [echoed]},
                            {"role": "user", "parts": [{"functionResponse": {"id": "toolu_1", "name": "f",
                                                                             "response": {"output": "ok"}}}]}],
               "generationConfig": {"thinkingConfig": {"thinkingBudget": 2048}}}
    out = translate_request(history, G, A, path="/v1beta/models/claude:generateContent")
    validate_request(A, out)
    assistant = out["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "plan", "signature": "SIG-anthropic"}
    assert assistant[1]["type"] == "tool_use" and assistant[1]["id"] == "toolu_1"
    assert out["messages"][2]["content"][0]["tool_use_id"] == "toolu_1"


def test_signature_envelope_is_canonical_base64():
    sig = pack_signature({"protocol": "anthropic_messages", "signature": "s", "text": "t"})
    import base64

    assert base64.b64encode(base64.b64decode(sig)).decode() == sig
    assert unpack_signature(sig)["signature"] == "s"
    assert not is_packed_signature("CiQB4/H/XtVjZNFEr20gDeWSWnqDUnYcqQFS")


# ============================================================================= usage, JSON-array reader
def test_usage_is_converted_not_copied():
    u = usage_from_wire({"promptTokenCount": 100, "cachedContentTokenCount": 40, "candidatesTokenCount": 30,
                         "thoughtsTokenCount": 20, "toolUsePromptTokenCount": 5, "totalTokenCount": 155})
    assert (u.input, u.cache_read, u.output, u.reasoning) == (65, 40, 50, 20)
    w = usage_to_wire(Usage(input=60, cache_read=40, cache_write=None, output=50, reasoning=20))
    assert w == {"promptTokenCount": 100, "candidatesTokenCount": 30, "cachedContentTokenCount": 40,
                 "thoughtsTokenCount": 20, "totalTokenCount": 150}


def test_json_array_reader_is_incremental_and_linear():
    import time

    big = {"candidates": [{"content": {"parts": [{"text": "x\\\"]}[" * 50_000}]}}]}
    raw = _array([big, big])
    r = JsonArrayReader()
    assert r.feed_bytes(raw[:10]) == [] and r.pending()
    t0 = time.perf_counter()
    r = JsonArrayReader()
    one = r.feed_bytes(raw) + r.feed_bytes(b"", True)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = JsonArrayReader()
    many = [e for i in range(0, len(raw), 1024) for e in r.feed_bytes(raw[i:i + 1024])]
    t_many = time.perf_counter() - t0
    assert one == many and [json.loads(e) for e in one] == [big, big] and r.closed
    assert t_many < 5 * t_one + 0.05, (t_one, t_many)


def test_count_tokens_body_wrapping_a_request_is_read():
    body = {"generateContentRequest": {"model": "models/gemini-2.5-flash",
                                       "contents": [{"role": "user", "parts": [{"text": "count me"}]}]}}
    req = decode_request(body, G, path="/v1beta/models/gemini-2.5-flash:countTokens")
    assert req.model == "gemini-2.5-flash" and req.messages[0].parts[0].text == "count me"


def test_final_text_of_a_block_without_deltas_reaches_a_gemini_client():
    from proxai_core.context import ClientContext
    from proxai_core.neutral import BlockEnd, BlockStart, End, Start, Stop, Text
    from proxai_core.stop import StopInfo

    enc = get(G).StreamEncoder(ClientContext(G), [])
    out = b"".join(enc.encode(ev) for ev in [
        Start("r", "m"), BlockStart(0, Text("")), n_delta(0, "first"), BlockEnd(0),
        BlockStart(1, Text("")), BlockEnd(1, Text("second")), Stop(StopInfo(StopReason.END_TURN)), End()])
    assert accumulate_stream(G, out).text == "firstsecond"


def n_delta(i, v):
    from proxai_core.neutral import Delta

    return Delta(i, "text", v)
