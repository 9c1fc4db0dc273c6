"""The codec registry answers every protocol question (get, paths, headers, errors, sniffing, model
lists) so nothing outside ``codecs/`` needs to know a protocol."""

from __future__ import annotations

import dataclasses
import json

import orjson
import pytest

from proxai_core import Protocol
from proxai_core.codecs import (
    Codec,
    all_codecs,
    check_codec,
    client_of_headers,
    foreign_headers,
    get,
    match_path,
    sniff,
    sniff_request,
    sniff_response,
    sniff_stream,
)
from proxai_core.codecs.base import SNIFF_HINT, ErrorFacts
from proxai_core.neutral import Error, ErrorKind
from proxai_core.sse import SSEReader
from tests.conftest import PROTOCOLS, fixture_dir, needs_fixtures
from tests.sdk import is_count_answer

CHAT, RESPONSES, ANTHROPIC = get("chat"), get("responses"), get("anthropic")


def test_every_protocol_has_exactly_one_codec():
    assert [c.protocol for c in all_codecs()] == list(Protocol)
    assert PROTOCOLS == tuple(Protocol)
    for c in all_codecs():
        assert get(c.protocol) is c is get(c.protocol.value) is get(c.name)
    assert len({c.name for c in all_codecs()}) == len(all_codecs())


def test_unknown_protocol_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown protocol 'bedrock'.*openai_chat_completions"):
        get("bedrock")


@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_a_codec_keeps_the_module_attributes(c: Codec):
    for attr in ("decode_request", "encode_request", "decode_response", "encode_response", "StreamDecoder",
                 "StreamEncoder", "error_frame"):
        assert callable(getattr(c, attr))
    assert c.label and c.name
    # a fixed path, or (model and method in the URL) a ":method" read by parse_path
    assert c.wire.endpoints.generate.startswith("/") or (
        c.wire.endpoints.generate.startswith(":") and c.wire.endpoints.parse_path is not None)


def test_there_are_eleven_error_kinds_and_plain_strings_still_compare():
    assert [k.value for k in ErrorKind] == [
        "invalid_request", "authentication", "billing", "permission", "not_found", "request_too_large",
        "rate_limit", "api_error", "timeout", "overloaded", "interrupted"]
    assert ErrorKind.INTERRUPTED == "interrupted" and f"{ErrorKind.API_ERROR}" == "api_error"
    assert orjson.dumps({"k": ErrorKind.TIMEOUT}) == b'{"k":"timeout"}'


@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_every_error_table_speaks_error_kinds(c: Codec):
    assert set(c.errors.statuses) == set(ErrorKind)
    assert all(type(k) is ErrorKind for k in c.errors.statuses)
    assert c.errors.types
    for table in (c.errors.types, c.errors.codes):
        assert all(type(k) is ErrorKind for k in table.values())


@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_the_registry_refuses_a_codec_missing_an_error_kind(c: Codec):
    statuses = {k: v for k, v in c.errors.statuses.items() if k not in (ErrorKind.BILLING, ErrorKind.TIMEOUT)}
    broken = dataclasses.replace(c, errors=dataclasses.replace(c.errors, statuses=statuses))
    with pytest.raises(TypeError, match=f"{c.name}.CODEC: errors.statuses has no status for the error kinds "
                                        "billing, timeout"):
        check_codec(broken, c.protocol)
    names = dataclasses.replace(c.errors, types={**c.errors.types, "odd_error": "api_error"})
    with pytest.raises(TypeError, match="errors.types maps odd_error to no ErrorKind"):
        check_codec(dataclasses.replace(c, errors=names), c.protocol)
    with pytest.raises(TypeError, match="is not the codec of"):
        check_codec(c, next(p for p in Protocol if p is not c.protocol))
    assert check_codec(c, c.protocol) is c
    assert isinstance(c.errors, ErrorFacts)


@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_stream_framing_is_a_wire_fact(c: Codec):
    # a protocol whose streams may come in another framing than SSE has its own reader, and says so
    assert c.wire.sse_only is (c.stream_reader is SSEReader)
    assert [p for p in Protocol if not get(p).wire.sse_only] == [Protocol.GEMINI, Protocol.BEDROCK_CONVERSE,
                                                                 Protocol.BEDROCK_INVOKE]


@pytest.mark.parametrize("path,kind,name,prefix", [
    ("/v1/chat/completions", "generate", "chat", "/v1"),
    ("/api/v1/chat/completions/", "generate", "chat", "/api/v1"),
    ("/openai/deployments/x/chat/completions?api-version=2024", "generate", "chat", "/openai/deployments/x"),
    ("/v1/responses", "generate", "responses", "/v1"),
    ("/v1/messages", "generate", "anthropic", "/v1"),
    ("/v1/messages/count_tokens", "count_tokens", "anthropic", "/v1"),
    ("https://openrouter.ai/api/v1/chat/completions?x=1", "generate", "chat", "/api/v1"),
    ("/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-3-7-sonnet@20250219:rawPredict",
     "generate", "vertex_anthropic", "/v1/projects/p/locations/us-east5"),
    ("/v1beta1/projects/p/locations/global/publishers/anthropic/models/count-tokens:rawPredict",
     "count_tokens", "vertex_anthropic", "/v1beta1/projects/p/locations/global"),
    ("/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke-with-response-stream", "generate",
     "bedrock_invoke", ""),
])
def test_match_path_post(path, kind, name, prefix):
    m = match_path(path)
    assert m is not None and (m.kind, m.codec.name if m.codec else None, m.prefix) == (kind, name, prefix)


def test_a_path_two_protocols_serve_is_told_by_the_body():
    """Amazon Bedrock counts a Converse and an InvokeModel request on one path: the path is read as
    the first codec's, and the router asks the body (``routing.told_by_body``)."""
    from proxai_mitm.wire import routing

    path = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-20250514-v1:0/count-tokens"
    served = [c.name for c in all_codecs() if c.wire.endpoints.parse_path and c.wire.endpoints.parse_path(path)]
    assert served == ["converse", "bedrock_invoke"]
    ep = routing.recognize("POST", path)
    assert ep is not None and ep.protocol is Protocol.BEDROCK_CONVERSE and ep.kind == "count_tokens"
    invoke = {"input": {"invokeModel": {"body": "eyJtZXNzYWdlcyI6W119"}}}
    converse = {"input": {"converse": {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}}}
    assert routing.told_by_body(ep, path, routing.body_protocol(invoke, ep.protocol)).protocol \
        is Protocol.BEDROCK_INVOKE
    assert routing.told_by_body(ep, path, routing.body_protocol(converse, ep.protocol)).protocol \
        is Protocol.BEDROCK_CONVERSE


def test_match_path_get_and_websocket():
    assert match_path("/v1/models", "GET") == match_path("/v1/models/", "GET")
    m = match_path("/v1/models", "GET")
    assert m is not None and (m.kind, m.codec, m.prefix) == ("models", None, "/v1")
    m = match_path("/v1/models/gpt-4o", "GET")
    assert m is not None and (m.kind, m.model_id, m.prefix) == ("model", "gpt-4o", "/v1")
    m = match_path("/v1/responses", "GET", websocket=True)
    assert m is not None and m.codec is RESPONSES
    assert match_path("/v1/chat/completions", "GET", websocket=True) is None
    assert match_path("/v1/responses/resp_1") is None
    assert match_path("/v1/embeddings") is None


def test_headers_and_credentials():
    assert client_of_headers({"x-api-key": "k"}) is ANTHROPIC
    assert client_of_headers({"authorization": "Bearer k"}) is None
    drop = foreign_headers(CHAT, ANTHROPIC)
    assert {"openai-beta", "openai-organization", "openai-project"} <= drop
    assert "anthropic-version" not in drop
    drop = foreign_headers(ANTHROPIC, CHAT)
    assert {"anthropic-version", "anthropic-beta", "openai-beta"} <= drop and "openai-organization" not in drop
    assert "openai-beta" in foreign_headers(RESPONSES, CHAT)
    assert "openai-beta" not in foreign_headers(RESPONSES, RESPONSES)
    assert "anthropic-beta" not in foreign_headers(ANTHROPIC, ANTHROPIC)
    assert "openai-beta" in foreign_headers(None, CHAT)
    # the key's headers are returned, never set: the proxy applies them
    assert CHAT.wire.credentials.auth_headers("k", "api.openai.com") == {"authorization": "Bearer k"}
    assert RESPONSES.wire.credentials.auth_headers("k", "x.openai.azure.com") == {"api-key": "k"}
    assert ANTHROPIC.wire.credentials.auth_headers("k", "api.anthropic.com") == {"x-api-key": "k"}
    assert ANTHROPIC.wire.credentials.default_headers["anthropic-version"]


def test_model_lists():
    a = ANTHROPIC.wire.model_list([ANTHROPIC.wire.model_entry("m1", None)])
    assert a["data"][0]["type"] == "model" and a["first_id"] == "m1" and a["has_more"] is False
    o = CHAT.wire.model_list([CHAT.wire.model_entry("m1", {"created": 5, "owned_by": "x"})])
    assert o == {"object": "list", "data": [{"id": "m1", "object": "model", "created": 5, "owned_by": "x"}]}


@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_error_status_follows_the_kind(c: Codec):
    for kind, status in c.errors.statuses.items():
        assert c.error_status(Error(kind=kind, message="x")) == status
        assert c.error_response(Error(kind=kind, message="x"))[1]
    for st in c.errors.foreign_statuses:
        assert c.error_status(Error(kind=ErrorKind.OVERLOADED, message="x", status=st)) != st


@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_ids_are_deterministic(c: Codec):
    assert c.response_id("abc") == c.response_id("abc") and "abc" in c.response_id("abc")


def test_sniff_hand_written_bodies():
    assert sniff_request({"model": "m", "input": "hi"}) is RESPONSES
    assert sniff_request({"model": "m", "messages": [{"role": "system", "content": "s"}]}) is CHAT
    assert sniff_request({"model": "m", "system": "s", "messages": []}) is ANTHROPIC
    assert sniff_request({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}) is ANTHROPIC
    assert sniff_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}) is CHAT
    assert sniff_request({"model": "m", "thinking": {"type": "enabled"}, "messages": []}) is CHAT
    assert sniff_request({"model": "m"}) is None
    assert sniff_response({"error": {"message": "x"}}) is CHAT
    assert sniff_response({"type": "error", "error": {"type": "x"}}) is ANTHROPIC
    assert sniff_response({"object": "response", "status": "completed", "output": []}) is RESPONSES
    assert sniff_stream(b"event: message_start\ndata: {}\n\n") is ANTHROPIC
    assert sniff_stream(b'data: {"object":"chat.completion.chunk"}\n\n') is CHAT
    assert sniff_stream(b'event: response.created\ndata: {"type":"response.created"}\n\n') is RESPONSES
    assert sniff({"model": "m", "input": "x"}) is RESPONSES
    assert CHAT.is_error_body({"error": {}}) and not CHAT.is_error_body({"choices": [{}], "error": None})
    assert ANTHROPIC.is_error_body({"type": "error", "error": {}})
    assert not RESPONSES.is_error_body({"status": "failed", "output": [], "error": {"code": "x"}})


@needs_fixtures
@pytest.mark.parametrize("c", all_codecs(), ids=lambda c: c.name)
def test_sniff_recognizes_every_recording(c: Codec):
    d = fixture_dir(c.protocol)
    wrong: list[str] = []
    for f in sorted(d.iterdir()):
        raw = f.read_bytes()
        if f.name.endswith(".status.json"):
            continue  # (an error recording's status and type header, not a body)
        if f.name.endswith(".request.json"):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # (a recording that stored a body which is not JSON)
            got = sniff(obj, request=True)
            ev = got.sniff_request(obj) if got is not None else None
            if got is not c and ev is not None and ev[0] <= SNIFF_HINT:
                continue  # plain text messages (+ max_tokens): the shape alone cannot tell
        elif f.suffix in (".sse", ".eventstream"):
            got = sniff_stream(raw[:4000])
        elif f.name.endswith(".status.json"):
            continue
        elif f.suffix == ".json":
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                continue
            got = sniff(obj, request=False)
            if got is not c and is_count_answer(f):
                continue  # {"inputTokens": N}: every Bedrock protocol's count answer
            if got is not c and c.is_error_body(obj):
                continue  # an OpenAI-shaped error reads the same in either OpenAI protocol
        else:
            continue
        if got is not c:
            wrong.append(f"{f.name}: {got}")
    assert not wrong, "\n".join(wrong[:20])
