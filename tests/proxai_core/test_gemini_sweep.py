"""Every real Gemini recording into the three other protocols and back, and every recording of the
other three into Gemini and back: complete bodies, SSE streams and streamed JSON arrays, requests
(replayed with the recorded URL, where model and method live), errors. Both sides are judged by the
official SDKs (google-genai for Gemini); text, refusal, tool calls, stop and usage must agree.
Skips when ../shared/fixtures is absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxai_core import (
    StopReason,
    StreamTranslator,
    TranslationError,
    decode_request,
    decode_response,
    response_from_stream,
    stop_info,
    translate_error,
    translate_request,
    translate_response_result,
)
from proxai_core.codecs import get
from proxai_core.errors import parse_error

from .. import sdk_gemini
from ..sdk import (
    FIXTURES,
    PROTOCOLS,
    G,
    StreamError,
    accumulate_stream,
    fixture_files,
    gemini_array_files,
    summarize_response,
    validate_request,
    validate_response,
)
from .semantics import assert_same_semantics, expected_reason, summary_from_neutral
from .test_fixture_sweep import assert_documented_rejection
from .test_stream_sweep import neutral_of_stream

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/fixtures absent")

OTHERS = tuple(p for p in PROTOCOLS if p is not G)


def _url(path: Path) -> str | None:
    stem = path.name
    for suffix in (".request.json", ".json", ".sse"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    u = path.with_name(stem + ".url.txt")
    return u.read_text().strip() if u.exists() else None


def validate_error(target, body, status) -> None:
    """An error body in the target's native shape (the SDK error types where they exist)."""
    from tests.sdk import ANTHROPIC_BODIES, EVENTSTREAM, validate_anthropic_error

    if target in EVENTSTREAM:  # Bedrock: {"message"}, the type in a header
        assert set(body) == {"message"} and isinstance(body["message"], str)
    elif target in ANTHROPIC_BODIES:
        validate_anthropic_error(status, body)
    elif target is get("converse").protocol:  # {"message"}; the type goes in a header
        assert set(body) == {"message"}
    else:
        import openai.types.shared as os_

        os_.ErrorObject.model_validate(body["error"])


def _param(p, f):
    return pytest.param(p, f, id=f"{p.name}/{f.name[:90]}")


def _is_error(proto, body) -> bool:
    return not isinstance(body, dict) or get(proto).is_error_body(body)


def _usage_pair(u):
    """(total input, output), an absent count read as 0 (a target that must write usage writes 0)."""
    return (0, 0) if u is None else (u.input_total or 0, u.output or 0)


# ============================================================================= complete bodies
GEMINI_JSON = [_param(G, f) for f in fixture_files(G, ".json")]


@pytest.mark.parametrize("proto,path", GEMINI_JSON)
def test_gemini_body_into_every_protocol_and_back(proto, path):
    body = json.loads(path.read_text())
    if not _is_error(G, body):
        sdk_gemini.validate_response(body, strict=False)  # a recording: through the SDK's own path
    if _is_error(G, body):
        status = body["error"]["code"]
        for target in OTHERS:
            st, out = translate_error(status, path.read_bytes(), G, target)
            assert st == get(target).error_status(parse_error(status, body))
            assert (out["error"] if "error" in out else out)["message"] == body["error"]["message"]
            validate_error(target, out, st)
        return
    src_resp = decode_response(body, G)
    src = summary_from_neutral(src_resp)
    reason = src_resp.stop.reason
    for target in OTHERS:
        res = translate_response_result(body, G, target, path=_url(path))
        validate_response(target, res.body)
        dst = summarize_response(target, res.body)
        mid_reason = stop_info(res.body, target).reason
        assert_same_semantics(src, dst, reason, mid_reason, target, where=f"gemini->{target.name}")
        assert _usage_pair(decode_response(res.body, target).usage) == _usage_pair(src_resp.usage)
        # and back to a Gemini client
        back = translate_response_result(res.body, target, G)
        validate_response(G, back.body)
        final = summarize_response(G, back.body)
        assert_same_semantics(dst, final, mid_reason, stop_info(back.body, G).reason, G,
                              where=f"gemini->{target.name}->gemini")
        assert [n for n, _ in final.tool_calls] == [n for n, _ in src.tool_calls]


# ============================================================================= streams, both framings
GEMINI_STREAMS = [_param(G, f) for f in fixture_files(G, ".sse")] + [_param(G, f) for f in gemini_array_files()]


def _neutral_of(raw: bytes):
    """The neutral response of a recorded stream (either framing)."""
    res = response_from_stream(raw, G, G)
    return decode_response(res.body, G) if res.status == 200 else None


@pytest.mark.parametrize("proto,path", GEMINI_STREAMS)
def test_gemini_stream_into_every_protocol_and_back(proto, path):
    raw = path.read_bytes()
    if raw.lstrip()[:1] == b"[":
        col_resp = _neutral_of(raw)
        assert col_resp is not None
        src_resp = col_resp
    else:
        _, src_resp = neutral_of_stream(G, raw)
    src = summary_from_neutral(src_resp)
    reason = src_resp.stop.reason
    for target in OTHERS:
        t = StreamTranslator(G, target, path=_url(path))
        out = t.feed(raw) + t.close()
        dst = accumulate_stream(target, out)
        assert_same_semantics(src, dst, reason, t.stop.reason, target, where=f"gemini->{target.name} stream")
        # the client's stream translated back for a Gemini client, in both framings
        for back_path in ("/v1beta/models/m:streamGenerateContent?alt=sse",
                          "/v1beta/models/m:streamGenerateContent"):
            t2 = StreamTranslator(target, G, {"contents": []}, path=back_path)
            back = t2.feed(out) + t2.close()
            final = accumulate_stream(G, back)
            assert [n for n, _ in final.tool_calls] == [n for n, _ in src.tool_calls], target
            assert " ".join(final.text.split()) == " ".join(dst.text.split())
            assert t2.stop.reason is expected_reason(G, t.stop.reason) or t.stop.reason is StopReason.OTHER
        # a non-streaming client of the same upstream stream
        res = response_from_stream(raw, G, target)
        validate_response(target, res.body)
        assert_same_semantics(src, summarize_response(target, res.body), reason,
                              stop_info(res.body, target).reason, target, where=f"gemini->{target.name} sse->json")


@pytest.mark.parametrize("proto,path", [_param(G, f) for f in gemini_array_files()])
def test_array_streams_chunking_and_cut_points(proto, path):
    raw = path.read_bytes()
    for target in OTHERS:
        t = StreamTranslator(G, target)
        whole = t.feed(raw) + t.close()
        for size in (1, 13, 512):
            t = StreamTranslator(G, target)
            assert b"".join(t.feed(raw[i:i + size]) for i in range(0, len(raw), size)) + t.close() == whole
        finish_at = raw.find(b'"finishReason"')
        for cut in range(0, len(raw), max(1, len(raw) // 40)):
            t = StreamTranslator(G, target)
            out = t.feed(raw[:cut]) + t.close()
            if finish_at < 0 or cut <= finish_at:
                assert t.stop.reason is StopReason.INTERRUPTED, (cut, t.stop)
                with pytest.raises(StreamError):
                    accumulate_stream(target, out)


# ============================================================================= the other protocols into Gemini
def _others_json():
    for p in OTHERS:
        for f in fixture_files(p, ".json"):
            yield _param(p, f)


def _others_sse():
    for p in OTHERS:
        for f in fixture_files(p, ".sse"):
            yield _param(p, f)


@pytest.mark.parametrize("proto,path", list(_others_json()))
def test_every_body_into_gemini_and_back(proto, path):
    body = json.loads(path.read_text())
    if _is_error(proto, body):
        st, out = translate_error(400, path.read_bytes(), proto, G)
        assert 400 <= st < 600 and set(out["error"]) == {"code", "message", "status"}
        assert out["error"]["code"] == st
        return
    src_resp = decode_response(body, proto)
    res = translate_response_result(body, proto, G, path="/v1beta/models/m:generateContent")
    if res.status != 200:
        assert src_resp.stop.reason is StopReason.INTERRUPTED and res.body["error"]["status"]
        return
    validate_response(G, res.body)
    dst = summarize_response(G, res.body)
    mid = stop_info(res.body, G).reason
    assert_same_semantics(summary_from_neutral(src_resp), dst, src_resp.stop.reason, mid, G,
                          where=f"{proto.name}->gemini")
    back = translate_response_result(res.body, G, proto)
    validate_response(proto, back.body)
    assert [n for n, _ in summarize_response(proto, back.body).tool_calls] == [n for n, _ in dst.tool_calls]


@pytest.mark.parametrize("proto,path", list(_others_sse()))
def test_every_stream_into_gemini_both_framings(proto, path):
    raw = path.read_bytes()
    col, src_resp = neutral_of_stream(proto, raw)
    for gpath in ("/v1beta/models/m:streamGenerateContent?alt=sse", "/v1beta/models/m:streamGenerateContent"):
        t = StreamTranslator(proto, G, {"contents": []}, path=gpath)
        out = t.feed(raw) + t.close()
        if col.error is not None or t.error is not None:
            with pytest.raises(StreamError):
                accumulate_stream(G, out)
            continue
        if gpath.endswith("Content"):
            assert out.startswith(b"[") and out.endswith(b"]")
        dst = accumulate_stream(G, out)
        assert_same_semantics(summary_from_neutral(src_resp), dst, src_resp.stop.reason,
                              expected_reason(G, t.stop.reason), G, where=f"{proto.name}->gemini {gpath}")


# ============================================================================= requests
def _gemini_requests():
    for f in fixture_files(G, ".request.json"):
        yield _param(G, f)


def _other_requests():
    for p in OTHERS:
        for f in fixture_files(p, ".request.json"):
            yield _param(p, f)


def _shape(req):
    out = []
    ids: dict[str, int] = {}
    for m in req.messages:
        for p in m.parts:
            t = type(p).__name__
            if t == "ToolCall":
                out.append(("call", ids.setdefault(p.id, len(ids)), p.name, json.loads(p.arguments or "{}")))
            elif t == "ToolResult":
                out.append(("result", ids.setdefault(p.call_id, len(ids))))
    return out


@pytest.mark.parametrize("proto,path", list(_gemini_requests()))
def test_gemini_request_into_every_protocol_and_back(proto, path):
    body = json.loads(path.read_text())
    url = _url(path)
    try:
        src = decode_request(body, G, path=url)
    except TranslationError as e:
        assert_documented_rejection(e)
        return
    for target in OTHERS:
        w: list[str] = []
        try:
            out = translate_request(body, G, target, warnings=w, path=url)
        except TranslationError as e:
            assert_documented_rejection(e)
            continue
        validate_request(target, out)
        if url and target is not get(target).protocol.RESPONSES and get(target).wire.endpoints.parse_path is None:
            assert out.get("model") == src.model  # (where the body names the model)
        back = translate_request(out, target, G)
        validate_request(G, back)
        assert _shape(decode_request(back, G)) == _shape(src), target


@pytest.mark.parametrize("proto,path", list(_other_requests()))
def test_every_request_into_gemini(proto, path):
    try:
        body = json.loads(path.read_text())
    except json.JSONDecodeError:  # a recording that stored a body which is not JSON: a native 400
        with pytest.raises(TranslationError, match="must be a JSON object"):
            decode_request(None, proto)
        return
    try:
        src = decode_request(body, proto)
        out = translate_request(body, proto, G)
    except TranslationError as e:
        assert_documented_rejection(e)
        return
    validate_request(G, out)
    assert get(G).wire.endpoints.path_for(src.model or "m", src.stream)
    assert _shape(decode_request(out, G)) == _shape(src)
