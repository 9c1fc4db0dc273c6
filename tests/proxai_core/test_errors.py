"""translate_error: every upstream error shape becomes the client's native error and status."""

from __future__ import annotations

import json

import anthropic.types
import pytest
from openai.types.shared import ErrorObject

from proxai_core import Protocol, translate_error
from proxai_core.errors import TranslationError, translation_error_response

A, C, R = Protocol.ANTHROPIC, Protocol.CHAT, Protocol.RESPONSES


def _check_native(target, body):
    if target is A:
        assert body["type"] == "error"
        anthropic.types.ErrorResponse.model_validate(body)
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
    for target in (A, C, R):
        st, out = translate_error(status, body, A, target)
        _check_native(target, out)
        if target is A:
            want = "invalid_request_error" if etype == "request_too_large" else etype
            assert st == a_status and out["error"]["type"] == want
        else:
            assert st == o_status
        assert "boom" in (out["error"]["message"])


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
    _check_native(target, out)
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
    for target in (A, C, R):
        st, out = translation_error_response(TranslationError("n: only one choice", field="n"), target)
        assert st == 400
        _check_native(target, out)
        assert out["error"]["type"] == "invalid_request_error"
