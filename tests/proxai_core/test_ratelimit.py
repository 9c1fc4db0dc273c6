"""Reset hints: the generic readers and each protocol's ``wire.retry_after`` on the header and body
shapes the providers send."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from mitmproxy.http import Headers

from proxai_core import Protocol, ratelimit
from proxai_core.codecs import get

NOW = 1_780_000_000.0  # a fixed "now" for the readers that take one


def rfc3339(seconds_from_now: float, now: float = NOW) -> str:
    return datetime.fromtimestamp(now + seconds_from_now, UTC).isoformat().replace("+00:00", "Z")


def http_date(seconds_from_now: float) -> str:
    from email.utils import formatdate

    return formatdate(NOW + seconds_from_now, usegmt=True)


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0s", 0.0), ("1.5s", 1.5),
    ("500us", 0.0005), ("250µs", 0.00025), ("7", 7.0), ("2.5", 2.5),
    ("999h", ratelimit.MAX_WAIT),  # absurd: a day at most
])
def test_go_duration(text: str, seconds: float) -> None:
    assert ratelimit.go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "1x", "m1s", "1s 2m", "-1s", "1s" * 40, "nan", "inf"])
def test_go_duration_refuses_other_text(text: str) -> None:
    assert ratelimit.go_duration(text) is None


def test_seconds_or_date() -> None:
    assert ratelimit.seconds_or_date("30") == 30.0
    assert ratelimit.seconds_or_date("0.5") == 0.5
    assert ratelimit.seconds_or_date("-5") == 0.0  # a past reset: no wait
    assert ratelimit.seconds_or_date("1e12") == ratelimit.MAX_WAIT
    assert ratelimit.seconds_or_date(http_date(42), now=NOW) == pytest.approx(42, abs=1)  # whole seconds
    assert ratelimit.seconds_or_date(http_date(-42), now=NOW) == 0.0
    assert ratelimit.seconds_or_date("tomorrow") is None
    assert ratelimit.seconds_or_date("NaN") is None


def test_instant() -> None:
    assert ratelimit.instant(rfc3339(12), now=NOW) == pytest.approx(12)
    assert ratelimit.instant("2026-05-28T21:06:52+00:00", now=NOW) is not None
    assert ratelimit.instant(rfc3339(-3), now=NOW) == 0.0
    assert ratelimit.instant("2026-05-28T21:06:52", now=NOW) is None  # no zone: not an instant
    assert ratelimit.instant("soon", now=NOW) is None


def test_http_retry_after_prefers_milliseconds() -> None:
    assert ratelimit.http_retry_after({"retry-after-ms": "1500", "retry-after": "2"}) == 1.5
    assert ratelimit.http_retry_after({"retry-after": "2"}) == 2.0
    assert ratelimit.http_retry_after({"retry-after-ms": "x", "retry-after": "2"}) == 2.0
    assert ratelimit.http_retry_after({}) is None
    # mitmproxy's headers are case-insensitive
    assert ratelimit.http_retry_after(Headers([(b"Retry-After", b"9")])) == 9.0


def test_header_wait_takes_the_used_up_limit() -> None:
    t = "x-ratelimit-{what}-{limit}"
    h = {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s",
         "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "1200"}
    assert ratelimit.header_wait(h, t, ("requests", "tokens"), ratelimit.go_duration) == 1.0
    h["x-ratelimit-remaining-requests"] = "3"  # none used up: the longest
    assert ratelimit.header_wait(h, t, ("requests", "tokens"), ratelimit.go_duration) == 360.0
    assert ratelimit.header_wait({}, t, ("requests", "tokens"), ratelimit.go_duration) is None


def test_rpc_retry_info() -> None:
    body = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}]}}
    assert ratelimit.rpc_retry_info(body) == 30.0
    body["error"]["details"][1]["retryDelay"] = "1.5s"
    assert ratelimit.rpc_retry_info(body) == 1.5
    body["error"]["details"][1]["retryDelay"] = 30
    assert ratelimit.rpc_retry_info(body) is None
    assert ratelimit.rpc_retry_info({"error": "x"}) is None
    assert ratelimit.rpc_retry_info(None) is None


# --- each protocol's wire.retry_after, on its provider's own 429 shapes

def test_openai_protocols() -> None:
    # a 429 of the OpenAI API: the per-limit resets in Go form, no retry-after
    headers = Headers([(b"x-ratelimit-limit-requests", b"500"), (b"x-ratelimit-limit-tokens", b"30000"),
                       (b"x-ratelimit-remaining-requests", b"499"), (b"x-ratelimit-remaining-tokens", b"0"),
                       (b"x-ratelimit-reset-requests", b"120ms"), (b"x-ratelimit-reset-tokens", b"6m0s")])
    for p in (Protocol.CHAT, Protocol.RESPONSES):
        ra = get(p).wire.retry_after
        assert ra(headers, None) == 360.0
        assert ra(Headers([(b"retry-after", b"20")]), None) == 20.0
        assert ra(Headers([(b"retry-after-ms", b"250")]), None) == 0.25
        assert ra(Headers(), {"error": {"type": "requests", "code": "rate_limit_exceeded"}}) is None


def test_anthropic() -> None:
    ra = get(Protocol.ANTHROPIC).wire.retry_after
    now = time.time()  # the reader reads the clock
    # a 429 of the Anthropic API: retry-after (whole seconds) and the reset instants of each limit
    headers = {"retry-after": "17", "anthropic-ratelimit-requests-limit": "50",
               "anthropic-ratelimit-requests-remaining": "49",
               "anthropic-ratelimit-requests-reset": rfc3339(1, now),
               "anthropic-ratelimit-input-tokens-remaining": "0",
               "anthropic-ratelimit-input-tokens-reset": rfc3339(17, now)}
    assert ra(headers, None) == 17.0
    del headers["retry-after"]
    wait = ra(headers, None)
    assert wait is not None and 10 < wait <= 17  # the used-up input-token limit, from the clock's now
    for limit in ("requests", "tokens", "input-tokens", "output-tokens"):
        assert ra({f"anthropic-ratelimit-{limit}-reset": "2000-01-01T00:00:00Z"}, None) == 0.0


def test_gemini() -> None:
    ra = get(Protocol.GEMINI).wire.retry_after
    body = {"error": {"code": 429, "message": "You exceeded your current quota.", "status": "RESOURCE_EXHAUSTED",
                      "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                                   "violations": [{"quotaMetric": "generativelanguage.googleapis.com/"
                                                   "generate_content_free_tier_requests", "quotaValue": "10"}]},
                                  {"@type": "type.googleapis.com/google.rpc.Help", "links": []},
                                  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43s"}]}}
    assert ra({}, body) == 43.0
    assert ra({"retry-after": "5"}, body) == 5.0
    assert ra({}, {"error": {"code": 429}}) is None


def test_every_codec_has_a_reader() -> None:
    for p in Protocol:
        assert get(p).wire.retry_after({"retry-after": "3"}, None) == 3.0
        assert get(p).wire.retry_after({}, None) is None
