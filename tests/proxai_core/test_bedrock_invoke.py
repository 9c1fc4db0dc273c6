"""Claude on Amazon Bedrock InvokeModel (``bedrock_invoke``): paths, hosted and count-tokens request
bodies, event-stream chunk frames both ways (judged by the anthropic SDK's Bedrock stream decoder
over botocore's parser), invocation metrics, exception frames and errors named by
``x-amzn-errortype``. The sweeps over every protocol cover the translations, chunking and cuts."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from botocore.eventstream import EventStreamBuffer

from proxai_core import Exchange, Protocol, StopReason, StreamTranslator, TranslationError, translate_error
from proxai_core import neutral as n
from proxai_core.codecs import get, sniff_request, sniff_stream
from proxai_core.codecs.bedrock_invoke import VERSION, count_tokens_request, parse_path, path_for
from proxai_core.context import ClientContext
from proxai_core.errors import parse_error
from proxai_core.eventstream import frame
from proxai_core.stop import classify_stop
from tests.conftest import DOCUMENTED, fixture_dir, needs_fixtures
from tests.sdk import StreamError, accumulate_stream, chunk_events, fixture_files, validate_request

B, A, C = Protocol.BEDROCK_INVOKE, Protocol.ANTHROPIC, Protocol.CHAT
CODEC = get(B)
MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
DOC = DOCUMENTED / "bedrock-invoke"


def _url(f: Path) -> str:
    return f.with_name(f.name.split(".")[0] + ".url.txt").read_text().strip()


def _chunk(obj: dict) -> bytes:
    return frame("chunk", json.dumps({"bytes": base64.b64encode(json.dumps(obj).encode()).decode()}).encode())


# ----------------------------------------------------------------------------- paths
@pytest.mark.parametrize("op,kind,stream", [("invoke", "generate", False),
                                            ("invoke-with-response-stream", "generate", True),
                                            ("count-tokens", "count_tokens", False)])
def test_paths_name_the_model_and_the_operation(op, kind, stream):
    for seg in ("us.anthropic.claude-haiku-4-5-20251001-v1%3A0", "us.anthropic.claude-haiku-4-5-20251001-v1:0"):
        f = parse_path(f"/model/{seg}/{op}")
        assert f is not None and (f.kind, f.prefix, f.model, f.stream, f.sse) == (kind, "", MODEL, stream, False)
    assert path_for(MODEL, True) == "/model/us.anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke-with-response-stream"
    assert parse_path(path_for(MODEL, stream)).model == MODEL
    assert parse_path(f"/model/{MODEL}/converse") is None  # Bedrock Converse: another protocol


# ----------------------------------------------------------------------------- requests
def test_a_hosted_request_reads_its_model_and_stream_from_the_url():
    body = {"anthropic_version": VERSION, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    ex = Exchange(B, body, path=f"/model/{MODEL}/invoke-with-response-stream")
    assert (ex.request.model, ex.request.stream, ex.stream) == (MODEL, True, True)
    assert ex.warnings == [] and ex.context.model == MODEL and not ex.context.sse


def test_a_request_for_bedrock_names_the_version_and_neither_model_nor_stream():
    chat = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    out = Exchange(C, chat).request_for(B)
    assert list(out)[0] == "anthropic_version" and out["anthropic_version"] == VERSION
    assert "model" not in out and "stream" not in out
    validate_request(B, out)
    assert sniff_request(out) is CODEC


def test_a_count_tokens_body_is_the_request_it_wraps():
    inner = {"anthropic_version": VERSION, "max_tokens": 10, "system": "Be brief.",
             "messages": [{"role": "user", "content": "How many tokens?"}]}
    wrapped = count_tokens_request(inner)
    assert CODEC.decode_request(wrapped, []) == CODEC.decode_request(inner, [])
    assert sniff_request(wrapped) is CODEC
    with pytest.raises(TranslationError, match=r"input\.invokeModel\.body"):
        CODEC.decode_request({"input": {"invokeModel": {"body": "not base64 of JSON!"}}}, [])


@needs_fixtures
def test_recorded_requests_decode_and_validate():
    files = fixture_files(B, ".request.json")
    assert len(files) >= 24
    for f in files:
        body = json.loads(f.read_text())
        try:
            req = Exchange(B, body, path=_url(f)).request
        except TranslationError as e:  # a system turn inside messages: the Anthropic codec's rule
            assert "role" in str(e), f.name
            continue
        assert req.messages and req.model, f.name
        if "input" not in body:
            validate_request(B, body)


# ----------------------------------------------------------------------------- streams
@needs_fixtures
def test_every_recorded_answer_is_annotated():
    answers = [f for f in sorted(fixture_dir(B).iterdir())
               if f.suffix in (".json", ".eventstream") and not f.name.endswith((".request.json", ".status.json"))
               and "count-tokens" not in _url(f)]
    assert len(answers) == 21
    for f in answers:
        raw = f.read_bytes()
        ex = Exchange(B, json.loads(f.with_name(f.name.split(".")[0] + ".request.json").read_text()), path=_url(f))
        if f.suffix == ".eventstream":
            ex.respond(B, 200, "application/vnd.amazon.eventstream")
            assert ex.feed(raw[:100]) + ex.feed(raw[100:]) + ex.close() == raw  # passed through, observed
            accumulate_stream(B, raw)
        else:
            ex.respond(B, 200, "application/json")
            ex.complete(raw)
        assert ex.stop is not None and ex.stop.reason in (StopReason.END_TURN, StopReason.TOOL_USE), f.name
        assert ex.usage is not None and ex.usage.input is not None and ex.usage.output, f.name
        assert ex.model and ex.model.startswith("claude-"), f.name


@needs_fixtures
def test_cache_usage_is_read():
    f = next(fixture_dir(B).glob("*cache_bedrock_real_api__i1.json"))
    ex = Exchange(B, None, path=_url(f))
    ex.respond(B, 200, "application/json")
    ex.complete(f.read_bytes())
    assert ex.usage.cache_read == 9511 and ex.usage.cache_write == 1956 and ex.usage.input == 3


def test_our_stream_is_what_the_bedrock_sdk_reads():
    """A stream written for a Bedrock client: chunk frames botocore and the anthropic SDK read; read
    back one byte at a time or whole, the same."""
    neutral = [n.Start("msg_1", "claude"), n.BlockStart(0, n.Text("")), n.Delta(0, "text", "Hi "),
               n.Delta(0, "text", "there"), n.BlockEnd(0), n.UsageEvent(n.Usage(input=5, output=2)),
               n.Stop(classify_stop("end_turn")), n.End()]
    enc = CODEC.StreamEncoder(ClientContext(B, model=MODEL), [])
    out = b"".join(enc.encode(e) for e in neutral)
    events = chunk_events(out)
    assert [e for e, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    s = accumulate_stream(B, out)
    assert (s.text, s.stop, s.usage) == ("Hi there", "end_turn", {"input": 5, "output": 2})
    assert sniff_stream(out[:200]) is CODEC
    one = StreamTranslator(B, A)
    byte_by_byte = b"".join(one.feed(out[i:i + 1]) for i in range(len(out))) + one.close()
    whole = StreamTranslator(B, A)
    assert byte_by_byte == whole.feed(out) + whole.close()


def test_invocation_metrics_give_the_usage_a_stream_left_out():
    raw = b"".join(_chunk(o) for o in [
        {"type": "message_start", "message": {"id": "msg_bdrk_1", "type": "message", "role": "assistant",
                                              "model": "claude", "content": [], "stop_reason": None}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 7, "outputTokenCount": 3,
                                                                      "invocationLatency": 10, "firstByteLatency": 5}}])
    t = StreamTranslator(B, C)
    t.feed(raw)
    t.close()
    assert (t.usage.input, t.usage.output) == (7, 3) and t.stop.reason is StopReason.END_TURN


@pytest.mark.parametrize("stem,kind,etype", [
    ("bedrock_stream_throttling_exception", "rate_limit", "throttlingException"),
    ("bedrock_stream_model_stream_error_exception", "api_error", "modelStreamErrorException"),
    ("bedrock_stream_internal_server_exception", "api_error", "internalServerException"),
    ("bedrock_stream_service_unavailable_exception", "overloaded", "serviceUnavailableException"),
    ("bedrock_stream_validation_exception", "invalid_request", "validationException"),
])
def test_an_exception_frame_in_a_200_stream_is_the_error_of_its_kind(stem, kind, etype):
    raw = (DOC / f"{stem}.eventstream").read_bytes()
    for target in (A, C, B):
        t = StreamTranslator(B, target)
        out = t.feed(raw) + t.close()
        assert t.error is not None and t.error.kind == kind, target
        assert t.stop.reason is StopReason.INTERRUPTED
        with pytest.raises(StreamError):
            accumulate_stream(target, out)
    last = list(_frames(out))[-1]  # a Bedrock client gets the upstream's exception frame
    assert (last.headers[":message-type"], last.headers[":exception-type"]) == ("exception", etype)
    # our own exception frame for an error of this kind (from another upstream)
    ours = list(_frames(CODEC.error_frame(t.error)))[0]
    assert CODEC.errors.types[ours.headers[":exception-type"]] == kind


def _frames(raw: bytes):
    buf = EventStreamBuffer()
    buf.add_data(raw)
    return iter(buf)


def test_a_corrupt_stream_ends_as_an_interruption():
    raw = bytearray((DOC / "bedrock_thinking_streaming.eventstream").read_bytes())
    raw[40] ^= 0xFF  # inside the first frame's headers: its CRC no longer matches
    t = StreamTranslator(B, A)
    out = t.feed(bytes(raw)) + t.close()
    assert t.stop.reason is StopReason.INTERRUPTED and b"event: error" in out


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("stem", sorted(p.name.removesuffix(".status.json") for p in DOC.glob("*.status.json")))
def test_documented_http_errors_take_their_kind_from_the_header(stem):
    meta = json.loads((DOC / f"{stem}.status.json").read_text())
    body = (DOC / f"{stem}.json").read_bytes()
    headers = {"x-amzn-errortype": meta["x-amzn-errortype"]}
    err = parse_error(meta["status"], body, headers)
    etype = meta["x-amzn-errortype"].split(":")[0]
    assert err.kind == CODEC.errors.types[etype] and err.message == json.loads(body)["message"]
    st, out = CODEC.error_response(err)
    assert st == meta["status"] and out == json.loads(body)
    assert CODEC.errors.headers(err)["x-amzn-errortype"] == etype  # the same type back to a Bedrock client


def test_the_header_decides_where_the_status_does_not():
    err = parse_error(400, b'{"message": "quota"}', {"x-amzn-errortype": "ServiceQuotaExceededException:http://x"})
    assert err.kind == "rate_limit"
    st, out = translate_error(400, b'{"message": "quota"}', B, A)
    assert st == 400 and out["error"]["message"] == "quota"
