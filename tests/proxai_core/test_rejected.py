"""An HTTP error's StopInfo: ``rejected`` when the provider refused the request before the model ran,
``interrupted`` when infrastructure ended it; ``retry-after`` kept in the detail."""

from __future__ import annotations

import orjson
import pytest

from proxai_core import StopReason, error_stop_info


def _anthropic(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def _openai(kind: str, message: str, code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"type": kind, "message": message, "code": code, "param": None}})


@pytest.mark.parametrize("status,body,category", [
    (400, _openai("invalid_request_error", "bad field"), "invalid_request"),
    (401, _anthropic("authentication_error", "invalid x-api-key"), "authentication"),
    (401, _openai("invalid_request_error", "Incorrect API key", "invalid_api_key"), "invalid_api_key"),
    (403, _anthropic("permission_error", "no access"), "permission"),
    (404, _openai("invalid_request_error", "no such model", "model_not_found"), "model_not_found"),
    (413, b"<html><title>413 Request Entity Too Large</title></html>", "request_too_large"),
    (422, b"", "invalid_request"),
    (402, b'{"error": "pay up"}', "billing"),
])
def test_a_refused_request_is_rejected_with_its_error_kind(status, body, category):
    stop = error_stop_info(status, body)
    assert stop.reason is StopReason.REJECTED and stop.category == category
    assert stop.detail["status"] == status
    assert stop.describe().startswith(f"rejected ({category})")
    assert not stop.ok and not stop.truncated and not stop.refused


def test_the_line_reads_as_the_issue_asks():
    stop = error_stop_info(401, _anthropic("authentication_error", "invalid x-api-key"))
    assert stop.describe() == "rejected (authentication): invalid x-api-key"


@pytest.mark.parametrize("status,body", [
    (408, b"timeout"),
    (429, _openai("rate_limit_error", "slow down", "rate_limit_exceeded")),
    (500, _openai("server_error", "boom")),
    (502, b"<html>bad gateway</html>"),
    (503, b""),
    (529, _anthropic("overloaded_error", "Overloaded")),
    (400, _openai("rate_limit_error", "slow down", "rate_limit_exceeded")),  # kind wins over a 4xx
])
def test_infrastructure_failures_stay_interrupted(status, body):
    assert error_stop_info(status, body).reason is StopReason.INTERRUPTED


def test_a_context_overflow_stays_context_full():
    body = _anthropic("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    assert error_stop_info(400, body).reason is StopReason.CONTEXT_FULL


def test_retry_after_headers_are_kept_in_the_detail():
    stop = error_stop_info(529, _anthropic("overloaded_error", "Overloaded"),
                           {"retry-after": "30", "retry-after-ms": "30000", "x-other": "1"})
    assert stop.detail["retry_after"] == "30" and stop.detail["retry_after_ms"] == "30000"
    assert "x_other" not in stop.detail
    assert stop.to_dict()["detail"]["retry_after"] == "30"
    assert "retry_after" not in error_stop_info(529, b"", {}).detail
    assert "retry_after" not in error_stop_info(529, b"").detail


def test_a_body_read_without_its_status_is_classified_by_its_kind():
    rate = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    assert error_stop_info(None, rate).reason is StopReason.INTERRUPTED
    auth = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
    assert error_stop_info(None, auth).reason is StopReason.REJECTED
