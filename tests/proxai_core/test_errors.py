"""translate_error: every upstream error shape becomes the client's native error and status."""

from __future__ import annotations

import json
import re

import anthropic.types
import pytest
from openai.types.shared import ErrorObject

from proxai_core import Protocol, StreamTranslator, translate_error, translate_response_result
from proxai_core.codecs import get, translation_error_response
from proxai_core.errors import TranslationError, kind_for_status
from proxai_core.neutral import Error
from tests.conftest import FIXTURES, PROTOCOLS, fixture_dir, needs_fixtures, sse, sse_events
from tests.sdk import ANTHROPIC_BODIES, EVENTSTREAM, validate_anthropic_error

A, C, R, G = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES, Protocol.GEMINI
B = Protocol.BEDROCK_CONVERSE
#: clients whose error bodies are Anthropic's (Claude on the API and on Vertex AI)
ANTHROPIC_ERRORS_TO = ANTHROPIC_BODIES - EVENTSTREAM


def _message(out: dict) -> str:
    """The message of a native error body (Bedrock's is ``{"message"}``)."""
    return out["error"]["message"] if "error" in out else out["message"]


def _check_native(target, body, status):
    if target is B:  # Bedrock: {"message"}; the type travels in the x-amzn-errortype header
        assert set(body) == {"message"} and isinstance(body["message"], str)
    elif target is G:  # Google: {"error": {"code": <the HTTP status>, "message", "status": <name>}}
        assert set(body["error"]) == {"code", "message", "status"}
        assert isinstance(body["error"]["code"], int) and body["error"]["status"] in get(G).errors.types
    elif target in EVENTSTREAM:  # Bedrock: the type is in the x-amzn-errortype header
        assert set(body) == {"message"} and isinstance(body["message"], str)
        assert get(target).errors.headers(Error(kind=kind_for_status(status), message=""))["x-amzn-errortype"] \
            in get(target).errors.types
    elif target in ANTHROPIC_ERRORS_TO:
        assert body["type"] == "error"
        validate_anthropic_error(status, body)
        assert isinstance(body["error"]["type"], str) and isinstance(body["error"]["message"], str)
    else:
        ErrorObject.model_validate(body["error"])
        assert set(body["error"]) == {"message", "type", "param", "code"}


ANTHROPIC_ERRORS = [
    (400, "invalid_request_error", 400, 400),
    (401, "authentication_error", 401, 401),
    (402, "billing_error", 402, 402),
    (403, "permission_error", 403, 403),
    (404, "not_found_error", 404, 404),
    (413, "request_too_large", 413, 413),
    (429, "rate_limit_error", 429, 429),
    (500, "api_error", 500, 500),
    (504, "timeout_error", 504, 504),
    (529, "overloaded_error", 529, 503),
]


@pytest.mark.parametrize("status,etype,a_status,o_status", ANTHROPIC_ERRORS, ids=[e[1] for e in ANTHROPIC_ERRORS])
def test_anthropic_error_to_each_client(status, etype, a_status, o_status):
    body = json.dumps({"type": "error", "error": {"type": etype, "message": "boom"}}).encode()
    for target in PROTOCOLS:
        st, out = translate_error(status, body, A, target)
        _check_native(target, out, st)
        if target in ANTHROPIC_ERRORS_TO:
            assert st == a_status and out["error"]["type"] == etype
        elif target in EVENTSTREAM:  # Bedrock's overloaded is 503, its other statuses the upstream's
            assert st == o_status
        else:
            assert st == o_status
        assert "boom" in _message(out)


def test_openai_rate_limit_to_anthropic_keeps_type_and_status():
    body = json.dumps({"error": {"message": "Rate limit reached", "type": "requests", "param": None,
                                 "code": "rate_limit_exceeded"}}).encode()
    st, out = translate_error(429, body, C, A)
    assert st == 429 and out["error"]["type"] == "rate_limit_error"


def test_openai_context_length_to_anthropic_invalid_request():
    body = json.dumps({"error": {"message": "This model's maximum context length is 8192 tokens",
                                 "type": "invalid_request_error", "param": "messages",
                                 "code": "context_length_exceeded"}}).encode()
    st, out = translate_error(400, body, C, A)
    assert st == 400 and out["error"]["type"] == "invalid_request_error"
    st, out = translate_error(400, body, C, R)
    assert out["error"]["code"] == "context_length_exceeded" and out["error"]["param"] == "messages"


@pytest.mark.parametrize("body", [b"", b"<html><head><title>502 Bad Gateway</title></head></html>",
                                  b"upstream connect error", b"\xff\xfe garbage", b"[1,2]", b"null"])
@pytest.mark.parametrize("target", [A, C, R])
def test_non_json_error_bodies(body, target):
    st, out = translate_error(502, body, C, target)
    _check_native(target, out, st)
    assert st == 502
    assert "502" in out["error"]["message"] or "Bad Gateway" in out["error"]["message"] or out["error"]["message"]


def test_html_title_is_kept():
    st, out = translate_error(502, b"<html><title>502 Bad Gateway</title><body>x</body></html>", A, C)
    assert "502 Bad Gateway" in out["error"]["message"]


def test_openrouter_error_with_numeric_code():
    body = json.dumps({"error": {"code": 402, "message": "Insufficient credits"}}).encode()
    st, out = translate_error(402, body, C, A)
    assert st == 402 and out["error"]["type"] == "billing_error"


def test_translation_error_is_a_native_400_never_500():
    for target in PROTOCOLS:
        st, out = translation_error_response(TranslationError("n: only one choice", field="n"), target)
        assert st == 400
        _check_native(target, out, st)
        if target is G:
            assert out["error"]["status"] == "INVALID_ARGUMENT" and out["error"]["code"] == 400
        elif target in EVENTSTREAM or target is B:
            headers = get(target).errors.headers
            assert headers is not None
            # (botocore reads the type up to the first ":"; AWS may append its namespace there)
            assert headers(Error(kind="invalid_request", message=""))["x-amzn-errortype"].split(":")[0] \
                == "ValidationException"
        else:
            assert out["error"]["type"] == "invalid_request_error"


# ----------------------------------------------------------------------------- defect 2
# The client's error type follows the status (and the code where it is more precise), every way.
OPENAI_OVERLOADED = {"error": {"message": "The engine is currently overloaded, please try again later",
                               "type": "server_error", "param": None, "code": None}}
OPENAI_BAD_KEY = {"error": {"message": "Incorrect API key provided: sk-***", "type": "invalid_request_error",
                            "param": None, "code": "invalid_api_key"}}
OPENAI_NO_MODEL = {"error": {"message": "The model `x` does not exist or you do not have access to it.",
                             "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
OPENAI_NO_QUOTA = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                             "param": None, "code": "insufficient_quota"}}


@pytest.mark.parametrize("source", [C, R])
@pytest.mark.parametrize("status,body,a_status,a_type", [
    (503, OPENAI_OVERLOADED, 529, "overloaded_error"),
    (401, OPENAI_BAD_KEY, 401, "authentication_error"),
    (404, OPENAI_NO_MODEL, 404, "not_found_error"),
    (429, OPENAI_NO_QUOTA, 402, "billing_error"),
], ids=["503-overloaded", "401-invalid_api_key", "404-model_not_found", "429-insufficient_quota"])
def test_defect2_openai_error_to_anthropic_type_follows_status(source, status, body, a_status, a_type):
    st, out = translate_error(status, json.dumps(body).encode(), source, A)
    _check_native(A, out, st)
    assert (st, out["error"]["type"]) == (a_status, a_type)
    assert out["error"]["message"] == body["error"]["message"]


@pytest.mark.parametrize("status,etype,o_status,o_code", [
    (529, "overloaded_error", 503, "overloaded"),
    (401, "authentication_error", 401, "invalid_api_key"),
    (404, "not_found_error", 404, "not_found"),
    (402, "billing_error", 402, "insufficient_quota"),
])
@pytest.mark.parametrize("target", [C, R])
def test_defect2_anthropic_error_to_openai_clients(target, status, etype, o_status, o_code):
    body = {"type": "error", "error": {"type": etype, "message": "boom"}}
    st, out = translate_error(status, json.dumps(body).encode(), A, target)
    _check_native(target, out, st)
    assert st == o_status and out["error"]["code"] == o_code


def test_defect2_openai_503_reaches_the_other_openai_protocol_as_503():
    st, out = translate_error(503, json.dumps(OPENAI_OVERLOADED).encode(), C, R)
    assert st == 503 and out["error"]["code"] == "overloaded"


def test_defect2_a_generic_status_is_refined_by_the_type_and_kept():
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    st, out = translate_error(500, json.dumps(body).encode(), A, A)
    assert (st, out["error"]["type"]) == (500, "overloaded_error")


@pytest.mark.parametrize("code,a_status,a_type", [
    ("rate_limit_exceeded", 429, "rate_limit_error"),
    ("server_error", 500, "api_error"),
    ("invalid_prompt", 400, "invalid_request_error"),
])
def test_defect2_responses_failed_response_to_anthropic(code, a_status, a_type):
    body = {"id": "resp_1", "object": "response", "created_at": 1, "status": "failed", "model": "m",
            "output": [], "error": {"code": code, "message": "it failed"}}
    res = translate_response_result(body, R, A)
    assert (res.status, res.body["error"]["type"]) == (a_status, a_type)


def _anthropic_error_events(out: bytes) -> list[dict]:
    return [json.loads(d) for n, d in sse_events(out) if n == "error"]


CHAT_HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
CHAT_TEXT = dict(CHAT_HEAD, choices=[{"index": 0, "delta": {"role": "assistant", "content": "hi"},
                                      "finish_reason": None}])


@pytest.mark.parametrize("error,a_type", [
    ({"message": "overloaded", "type": "server_error", "code": "overloaded"}, "overloaded_error"),
    ({"code": 503, "message": "Provider overloaded"}, "overloaded_error"),  # OpenRouter: code = status
    (OPENAI_BAD_KEY["error"], "authentication_error"),
    (OPENAI_NO_MODEL["error"], "not_found_error"),
], ids=["overloaded-code", "openrouter-503", "invalid_api_key", "model_not_found"])
def test_defect2_chat_error_mid_stream_to_anthropic(error, a_type):
    tr = StreamTranslator(C, A)
    out = tr.feed(sse([(None, CHAT_TEXT), (None, {"error": error})])) + tr.close()
    errs = _anthropic_error_events(out)
    assert len(errs) == 1 and errs[0]["error"]["type"] == a_type
    anthropic.types.ErrorResponse.model_validate(errs[0])
    assert sse_events(out)[-1][0] == "error"  # nothing after the error frame


def test_defect2_responses_failed_mid_stream_to_anthropic():
    r = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "output": []}
    events = [
        ("response.created", {"type": "response.created", "sequence_number": 0,
                              "response": dict(r, status="in_progress")}),
        ("response.failed", {"type": "response.failed", "sequence_number": 1,
                             "response": dict(r, status="failed",
                                              error={"code": "rate_limit_exceeded", "message": "slow down"})}),
    ]
    tr = StreamTranslator(R, A)
    out = tr.feed(sse(events)) + tr.close()
    errs = _anthropic_error_events(out)
    assert len(errs) == 1 and errs[0]["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("error,a_type", [
    ({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None}, "rate_limit_error"),
    ({"type": "error", "code": "invalid_api_key", "message": "bad key", "param": None}, "authentication_error"),
    ({"type": "error", "error": {"type": "invalid_request_error", "code": "model_not_found", "message": "no"}},
     "not_found_error"),
], ids=["flat-rate_limit", "flat-invalid_api_key", "nested-model_not_found"])
def test_defect2_responses_error_event_mid_stream_to_anthropic(error, a_type):
    r = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "output": []}
    events = [("response.created", {"type": "response.created", "sequence_number": 0,
                                    "response": dict(r, status="in_progress")}),
              ("error", dict(error, sequence_number=1))]
    tr = StreamTranslator(R, A)
    out = tr.feed(sse(events)) + tr.close()
    errs = _anthropic_error_events(out)
    assert len(errs) == 1 and errs[0]["error"]["type"] == a_type


@pytest.mark.parametrize("etype,code", [("overloaded_error", "overloaded"), ("authentication_error", "invalid_api_key"),
                                        ("not_found_error", "not_found")])
def test_defect2_anthropic_error_mid_stream_to_openai_clients(etype, code):
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                  "model": "m", "content": [], "stop_reason": None,
                                                  "stop_sequence": None,
                                                  "usage": {"input_tokens": 1, "output_tokens": 0}}}
    raw = sse([("message_start", start), ("error", {"type": "error", "error": {"type": etype, "message": "x"}})])
    tr = StreamTranslator(A, C)
    out = tr.feed(raw) + tr.close()
    last = json.loads(sse_events(out)[-1][1])
    assert last["error"]["code"] == code
    tr = StreamTranslator(A, R)
    out = tr.feed(raw) + tr.close()
    err = next(json.loads(d) for n, d in sse_events(out) if n == "error")
    assert err["code"] == code and err["error"]["code"] == code


@needs_fixtures
@pytest.mark.parametrize("name,a_status,a_type", [
    ("mirascope__python_tests_e2e_input_cassettes_test_authentication_error_openai_gpt_4o_completions__i0.json",
     401, "authentication_error"),
    ("mirascope__python_tests_e2e_input_cassettes_test_model_not_found_openai_gpt_4o_completions__i0.json",
     404, "not_found_error"),
    ("pydantic-ai__tests_cassettes_test_model_name_suggestions_test_model_name_suggestion_openai-chat__i0.json",
     404, "not_found_error"),
])
def test_defect2_recorded_openai_errors_to_anthropic(name, a_status, a_type):
    f = fixture_dir(C) / name
    if not f.is_file():
        pytest.fail(f"recording {name} missing from ../shared/fixtures")
    st, out = translate_error(a_status, f.read_bytes(), C, A)
    assert (st, out["error"]["type"]) == (a_status, a_type)


#: a recording -> its protocol (the INDEX's column)
_PROTOCOL_OF: dict[str, str] = {}


def _recorded_errors() -> list:
    idx = FIXTURES / "INDEX.tsv"
    if not idx.is_file():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason="../shared/fixtures absent"))]
    out = []
    for line in idx.read_text(encoding="utf-8").splitlines()[1:]:
        cols = line.split("\t")
        m = re.search(r"http-(\d+)", cols[3]) if len(cols) > 3 else None
        if m and cols[1] in {get(p).name for p in PROTOCOLS} | {p.value for p in PROTOCOLS}:
            _PROTOCOL_OF[cols[0]] = cols[1]
            out.append(pytest.param(cols[0], int(m.group(1)), id=cols[0].split("/", 1)[1][:60]))
    return out


@pytest.mark.parametrize("name,status", _recorded_errors())
def test_defect2_every_recorded_error_keeps_a_status_consistent_type_for_every_client(name, status):
    f = FIXTURES / name
    source = get(_PROTOCOL_OF[name]).protocol
    for target in PROTOCOLS:
        st, out = translate_error(status, f.read_bytes(), source, target)
        _check_native(target, out, st)
        assert st == status, (target, st)
        if target in ANTHROPIC_ERRORS_TO:  # the type is the one Anthropic gives this status
            assert out["error"]["type"] == get(A).errors.body(Error(kind=kind_for_status(status), message=""))[
                "error"]["type"], (name, out)
