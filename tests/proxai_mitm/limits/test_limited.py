"""limited.py: which answers cool what they limited and for how long (one rule for pooled keys and
upstreams), and the headers of the client's 429 when everything is cooling."""

from __future__ import annotations

import pytest

from proxai_core import Protocol
from proxai_mitm.limits.limited import DEFAULT_COOL, cooling_headers, limited_for

GEMINI_429 = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota", "details": [
    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43s"}]}}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_a_429_cools_for_its_reset_hint_from_headers_or_body() -> None:
    assert limited_for(429, {"retry-after-ms": "1500"}, None, Protocol.CHAT) == 1.5
    assert limited_for(429, {}, GEMINI_429, Protocol.GEMINI) == 43.0  # RetryInfo in the body
    assert limited_for(429, {}, None, Protocol.ANTHROPIC) == DEFAULT_COOL  # no hint: the default


@pytest.mark.parametrize(("status", "body", "wait"), [
    (529, OVERLOADED, DEFAULT_COOL),
    (503, OVERLOADED, DEFAULT_COOL),
    (500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}, None),
    (502, None, None),
    (401, None, None),
])
def test_only_overloaded_answers_cool_besides_429(status, body, wait) -> None:
    assert limited_for(status, {}, body, Protocol.ANTHROPIC) == wait


def test_the_429_headers_give_the_soonest_reset_both_ways_and_say_retry() -> None:
    assert cooling_headers(12.2) == {"retry-after": "13", "retry-after-ms": "12200", "x-should-retry": "true"}
    assert cooling_headers(0.01)["retry-after"] == "1"  # never "retry now"
