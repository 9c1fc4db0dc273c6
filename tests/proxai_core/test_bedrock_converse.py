"""The Bedrock Converse codec: paths, errors both ways (botocore reads our error as the right
exception), every recording and documented case read and written back, streams judged by botocore's
own event-stream parser, exception frames, cut streams."""

from __future__ import annotations

import json

import pytest

from proxai_core import Protocol, StopReason, StreamTranslator, translate_error
from proxai_core.codecs import get, match_path, sniff_request, sniff_response, sniff_stream
from proxai_core.errors import parse_error
from proxai_core.eventstream import EventStreamReader, frame
from proxai_core.exchange import Exchange, Plan
from proxai_core.neutral import Error, ErrorKind
from tests import sdk_converse
from tests.conftest import DOCUMENTED, PROTOCOLS, fixture_dir

B = Protocol.BEDROCK_CONVERSE
CODEC = get(B)
FIX = fixture_dir(B)
DOC = DOCUMENTED / "bedrock-converse"
FOLDERS = [d for d in (FIX, DOC) if d.is_dir()]


def _files(suffix: str):
    out = []
    for d in FOLDERS:
        out += [f for f in sorted(d.glob(f"*{suffix}"))
                if suffix != ".json" or not f.name.endswith((".request.json", ".status.json"))]
    return out


def _id(f):
    return f"{f.parent.name}/{f.name[:80]}"


JSON_FILES = _files(".json")
REQUEST_FILES = _files(".request.json")
STREAM_FILES = _files(".eventstream")


# ----------------------------------------------------------------------------- paths
@pytest.mark.parametrize("path,kind,model,stream", [
    ("/model/us.anthropic.claude-sonnet-4-6/converse", "generate", "us.anthropic.claude-sonnet-4-6", False),
    ("/model/us.amazon.nova-micro-v1%3A0/converse-stream", "generate", "us.amazon.nova-micro-v1:0", True),
    ("/model/anthropic.claude-3-haiku/count-tokens", "count_tokens", "anthropic.claude-3-haiku", False),
    ("https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse?x=1", "generate", "m", False),
    ("/proxy/base/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fp/converse", "generate",
     "arn:aws:bedrock:us-east-1:1:inference-profile/p", False),
])
def test_paths_name_the_model_and_the_stream(path, kind, model, stream):
    facts = CODEC.wire.endpoints.parse_path(path)
    assert facts is not None and (facts.kind, facts.model, facts.stream, facts.sse) == (kind, model, stream, False)
    m = match_path(path)
    assert m is not None and m.codec is CODEC and m.model_id == model
    back = CODEC.wire.endpoints.path_for(model, stream)
    if kind == "generate" and "%2F" not in path:
        assert path.partition("?")[0].endswith(back)


@pytest.mark.parametrize("path", ["/model/m/invoke", "/model/m/invoke-with-response-stream", "/model//converse",
                                  "/models/m/converse", "/model/a/b/converse"])
def test_other_paths_are_not_converse(path):
    assert CODEC.wire.endpoints.parse_path(path) is None


def test_recorded_urls_all_parse():
    urls = sorted(FIX.glob("*.url.txt")) if FIX.is_dir() else []
    for u in urls:
        facts = CODEC.wire.endpoints.parse_path(u.read_text().strip())
        assert facts is not None, u.name
        req = u.with_name(u.name.replace(".url.txt", ".request.json"))
        if facts.kind == "count_tokens":
            assert "input" in json.loads(req.read_text())


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("kind,status,etype", [
    ("invalid_request", 400, "ValidationException"), ("permission", 403, "AccessDeniedException"),
    ("not_found", 404, "ResourceNotFoundException"), ("rate_limit", 429, "ThrottlingException"),
    ("timeout", 408, "ModelTimeoutException"), ("api_error", 500, "InternalServerException"),
    ("overloaded", 503, "ServiceUnavailableException"), ("interrupted", 500, "InternalServerException"),
])
def test_our_error_is_read_by_botocore_as_that_exception(kind, status, etype):
    err = Error(kind=ErrorKind(kind), message="boom")
    st, body = CODEC.error_response(err)
    headers = CODEC.errors.headers(err)
    assert st == status and body == {"message": "boom"}
    assert sdk_converse.validate_error(st, body, headers) == etype
    # and read back by us (the header names the type)
    back = parse_error(st, json.dumps(body).encode(), headers)
    assert back.kind == err.kind or kind == "interrupted"
    assert back.code == etype


def test_upstream_error_type_kept_for_a_converse_client():
    h = {"x-amzn-errortype": "ModelNotReadyException:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    err = parse_error(429, b'{"message":"not ready"}', h)
    assert err.code == "ModelNotReadyException" and err.kind is ErrorKind.RATE_LIMIT
    assert CODEC.errors.headers(err)["x-amzn-errortype"].startswith("ModelNotReadyException:")


def _status_of(f):
    s = f.with_name(f.name[:-5] + ".status.json")
    return json.loads(s.read_text()) if s.is_file() else None


@pytest.mark.parametrize("path", [f for f in JSON_FILES if _status_of(f)], ids=_id)
def test_error_bodies_reach_every_client(path):
    meta = _status_of(path)
    status = meta["status"]
    headers = {"x-amzn-errortype": meta["x-amzn-errortype"]} if "x-amzn-errortype" in meta else None
    body = path.read_bytes()
    assert CODEC.is_error_body(json.loads(body))
    err = parse_error(status, body, headers)
    if headers:
        assert err.code == meta["x-amzn-errortype"].partition(":")[0]
        assert err.kind is CODEC.errors.types[err.code] or status in (429, 503, 408, 403, 404)
    for target in PROTOCOLS:
        st, out = translate_error(status, body, B, target)
        assert 400 <= st < 600 and out
    x = Exchange(B, {"messages": []}, path="/model/m/converse")
    x.respond(B, status, "application/json", headers=headers)
    x.complete(body)
    assert x.plan is Plan.OBSERVE and x.error is not None and x.stop is not None
    if headers:
        st, native = CODEC.error_response(x.error)
        assert sdk_converse.validate_error(st, native, CODEC.errors.headers(x.error)) == err.code or st != status


# ----------------------------------------------------------------------------- complete bodies
@pytest.mark.parametrize("path", [f for f in JSON_FILES if not _status_of(f)], ids=_id)
def test_responses_decode_and_encode_back(path):
    body = json.loads(path.read_text())
    if "output" not in body:  # (a count-tokens answer)
        assert set(body) == {"inputTokens"}
        return
    sdk_converse.validate_response(body, exact=path.parent == DOC)
    w: list[str] = []
    resp = CODEC.decode_response(body, w)
    out = CODEC.encode_response(resp, None, w)
    sdk_converse.validate_response(out)
    s_in = sdk_converse.summarize(body, sdk_converse_summary())
    s_out = sdk_converse.summarize(out, sdk_converse_summary())
    if body["stopReason"] == "content_filtered" and not s_in.text:  # withheld: a generic refusal text
        assert s_out.text and s_out.refusal == s_out.text
        s_out.text, s_out.refusal = s_in.text, s_in.refusal
    assert (s_out.text, s_out.tool_calls, s_out.reasoning, s_out.usage) == (s_in.text, s_in.tool_calls, s_in.reasoning,
                                                                            s_in.usage)
    assert out["stopReason"] == body["stopReason"]
    if body["stopReason"] == "guardrail_intervened":
        assert resp.stop.reason is StopReason.REFUSAL and resp.stop.detail["guardrail"]
        assert out["trace"] == {"guardrail": body["trace"]["guardrail"]}
    assert CODEC.sniff_response(body) is not None and sniff_response(body) is CODEC


def sdk_converse_summary():
    from tests.sdk import Summary

    return Summary()


@pytest.mark.parametrize("path", REQUEST_FILES, ids=_id)
def test_requests_decode_encode_and_validate(path):
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError:  # (one recording stored a body that is not JSON)
        with pytest.raises(json.JSONDecodeError):
            json.loads(path.read_bytes())
        return
    w: list[str] = []
    req = CODEC.decode_request(body, w)
    out = CODEC.encode_request(req, w)
    op = "CountTokens" if "input" in body else "Converse"
    sdk_converse.validate_request(body if op == "CountTokens" else out, op)
    inner = body["input"]["converse"] if "input" in body else body
    # the conversation survives: texts, tool calls and results in order
    def convo(b):
        return [(m["role"], k, json.dumps(v, sort_keys=True)[:200]) for m in b.get("messages", [])
                for blk in m["content"] for k, v in blk.items() if k in ("text", "toolUse") and v != ""]
    assert convo(out) == convo(inner)
    assert sniff_request(inner) is CODEC


# ----------------------------------------------------------------------------- streams
@pytest.mark.parametrize("path", STREAM_FILES, ids=_id)
def test_streams_read_by_botocore_and_written_back(path):
    data = path.read_bytes()
    assert sniff_stream(data[:512]) is CODEC
    t = StreamTranslator(B, B)
    out = t.feed(data) + t.close()
    exceptional = "mid-stream" in path.name or path.name.startswith("cut-")
    if exceptional:
        assert t.stop.reason is StopReason.INTERRUPTED and t.error is not None
        with pytest.raises(sdk_converse.ConverseStreamError):
            sdk_converse.accumulate(out)
    else:
        assert out == data and t.error is None and t.stop is not None
        body = sdk_converse.accumulate(data, exact=path.parent == DOC)
        sdk_converse.validate_response(body, exact=path.parent == DOC)
    # through the neutral model and back: our own Converse encoder (a translation from itself)
    from proxai_core.context import ClientContext

    w: list[str] = []
    dec = CODEC.StreamDecoder(w)
    enc = CODEC.StreamEncoder(ClientContext(B), w)
    r = EventStreamReader()
    again = b"".join(enc.encode(ev) for name, d in r.feed(data) + r.close() for ev in dec.feed(name, d))
    again += b"".join(enc.encode(ev) for ev in dec.finish())
    if exceptional:
        with pytest.raises(sdk_converse.ConverseStreamError):
            sdk_converse.accumulate(again)
    else:
        a, b = sdk_converse.accumulate(data, exact=False), sdk_converse.accumulate(again)
        for x in (a, b):  # (an empty text block is never written; a withheld answer gets a generic text)
            x["output"]["message"]["content"] = [c for c in x["output"]["message"]["content"]
                                                 if c.get("text", 1) and x["stopReason"] != "content_filtered"]
            for c in x["output"]["message"]["content"]:  # (a client tool's type is implied)
                if c.get("toolUse", {}).get("type") == "tool_use":
                    del c["toolUse"]["type"]
        assert a["output"] == b["output"] and a["stopReason"] == b["stopReason"]
        assert a["usage"]["inputTokens"] == b["usage"]["inputTokens"]


@pytest.mark.parametrize("name,kind", [("throttlingException", "rate_limit"),
                                       ("modelStreamErrorException", "api_error"),
                                       ("validationException", "invalid_request"),
                                       ("internalServerException", "api_error"),
                                       ("serviceUnavailableException", "overloaded")])
def test_exception_frames_are_error_events_and_ours_raise_in_botocore(name, kind):
    data = frame("messageStart", b'{"role":"assistant"}') + frame(name, b'{"message":"m"}', "exception")
    for target in PROTOCOLS:
        t = StreamTranslator(B, target)
        out = t.feed(data) + t.close()
        assert t.error is not None and t.error.kind == kind and t.error.message == "m"
        assert t.stop.reason is StopReason.INTERRUPTED
        if target is B:
            assert out == data
    ours = {"rate_limit": "throttlingException", "api_error": "internalServerException",
            "invalid_request": "validationException", "overloaded": "serviceUnavailableException",
            "interrupted": "modelStreamErrorException"}
    for k in (kind, "interrupted"):
        with pytest.raises(sdk_converse.ConverseStreamError, match=ours[k]):
            sdk_converse.events_of_stream(CODEC.error_frame(Error(kind=ErrorKind(k), message="m")))


def test_a_stream_cut_before_metadata_never_looks_finished():
    data = (DOC / "cut-after-message-stop.eventstream").read_bytes() if DOC.is_dir() else None
    if data is None:
        pytest.skip("documented cases absent")
    for cut in range(len(data) + 1):
        t = StreamTranslator(B, Protocol.ANTHROPIC)
        t.feed(data[:cut])
        t.close()
        assert t.stop is None or t.stop.reason is StopReason.INTERRUPTED, cut


def test_a_corrupt_frame_ends_the_stream_with_an_error_for_every_client():
    good = frame("messageStart", b'{"role":"assistant"}') + frame(
        "contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"hi"}}')
    bad = good[:-1] + bytes((good[-1] ^ 1,))
    for target in PROTOCOLS:
        t = StreamTranslator(B, target)
        t.feed(bad)
        t.close()
        assert t.error is not None and "CRC" in t.error.message and t.stop.reason is StopReason.INTERRUPTED


# ----------------------------------------------------------------------------- the wire face
def test_model_list_and_count_tokens_shapes_are_botocore_s():
    import botocore.session

    control = botocore.session.get_session().get_service_model("bedrock")
    body = CODEC.wire.model_list([CODEC.wire.model_entry("anthropic.claude-sonnet-4-5-20250929-v1:0", None),
                                  CODEC.wire.model_entry("amazon.nova-micro-v1:0", {"modelName": "Nova Micro"})])
    sdk_converse.walk(control.operation_model("ListFoundationModels").output_shape, body, "ListFoundationModels")
    assert [m["providerName"] for m in body["modelSummaries"]] == ["Anthropic", "Amazon"]
    assert CODEC.wire.counter is not None
    count = CODEC.wire.counter.answer(42)
    sdk_converse.walk(sdk_converse.operation("CountTokens").output_shape, count, "CountTokens")
    assert count == {"inputTokens": 42}


def test_credentials_keep_a_signature_on_its_host():
    cr = CODEC.wire.credentials
    assert {"authorization", "x-amz-security-token", "x-amz-date", "x-amz-content-sha256"} <= set(cr.key_headers)
    assert "x-amz-security-token" in cr.account_headers and cr.vendor == "aws"
    assert cr.auth_headers("ABSK-key", "bedrock-runtime.us-east-1.amazonaws.com") == {"authorization": "Bearer ABSK-key"}


def test_count_tokens_body_reads_the_converse_request_inside():
    body = {"input": {"converse": {"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                                   "system": [{"text": "be brief"}]}}}
    req = CODEC.decode_request(body, [])
    assert [t.text for t in req.system] == ["be brief"] and req.messages[0].parts[0].text == "hi"
    sdk_converse.validate_request(body, "CountTokens")


def test_cache_points_are_the_neutral_cache_hints_both_ways():
    body = {"system": [{"text": "sys"}, {"cachePoint": {"type": "default"}}],
            "messages": [{"role": "user", "content": [{"text": "a"}, {"cachePoint": {"type": "default"}}, {"text": "b"}]}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}},
                                     {"cachePoint": {"type": "default"}}]}}
    req = CODEC.decode_request(body, [])
    assert req.system[0].cache_control and req.messages[0].parts[0].cache_control
    assert req.messages[0].parts[1].cache_control is None and req.tools[0].cache_control
    assert CODEC.encode_request(req, []) == body
    anth = get(Protocol.ANTHROPIC).encode_request(req, [])
    assert anth["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_guardrail_and_service_fields_are_kept_for_converse_and_named_when_dropped():
    body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}],
            "guardrailConfig": {"guardrailIdentifier": "g", "guardrailVersion": "1"},
            "performanceConfig": {"latency": "optimized"}, "serviceTier": {"type": "priority"}}
    w: list[str] = []
    req = CODEC.decode_request(body, w)
    assert [x.split()[0] for x in w] == ["guardrailConfig", "performanceConfig", "serviceTier"]
    w2: list[str] = []
    from proxai_core import translate_request

    translate_request(body, B, Protocol.CHAT, warnings=w2, path="/model/m/converse")
    assert any("guardrailConfig" in x and "dropped" in x for x in w2)
    out = CODEC.encode_request(req, [])
    assert {k: out[k] for k in ("guardrailConfig", "performanceConfig", "serviceTier")} == \
        {k: body[k] for k in ("guardrailConfig", "performanceConfig", "serviceTier")}
    sdk_converse.validate_request(out)


def test_exchange_streams_to_a_converse_client_in_its_framing():
    from tests.conftest import sse

    body = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    x = Exchange(B, body, path="/model/anthropic.claude-sonnet-4-5/converse-stream")
    up = x.request_for(Protocol.ANTHROPIC)
    assert x.stream and up["messages"][0]["content"] in ("hi", [{"type": "text", "text": "hi"}])
    assert x.respond(Protocol.ANTHROPIC, 200, "text/event-stream") is Plan.STREAM
    assert x.client_content_type == "application/vnd.amazon.eventstream"
    out = x.feed(sse([
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hello"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"})])) + x.close()
    got = sdk_converse.accumulate(out)
    assert got["output"]["message"]["content"] == [{"text": "Hello"}] and got["stopReason"] == "end_turn"
    assert got["usage"]["inputTokens"] == 5 and got["usage"]["outputTokens"] == 2
    # a Converse upstream's whole stream observed untouched
    y = Exchange(B, body, path="/model/m/converse-stream")
    y.respond(B, 200, "application/vnd.amazon.eventstream")
    y.complete(out)
    assert y.stop is not None and y.stop.reason is StopReason.END_TURN and y.usage.output == 2
