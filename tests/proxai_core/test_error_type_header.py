"""A response header that names the error type (Bedrock's ``x-amzn-errortype``): read where the
body names none, from the error path of an Exchange and from error_stop_info."""

from __future__ import annotations

import pytest

from proxai_core import errors
from proxai_core.complete import error_stop_info
from proxai_core.errors import ErrorKind, parse_error
from proxai_core.exchange import Exchange
from proxai_core.protocol import Protocol
from proxai_core.stop import StopReason

HEADER = "x-amzn-errortype"


@pytest.fixture
def bedrock_names(monkeypatch):
    """The names a codec with a type header registers (patched: the test needs no such codec)."""
    monkeypatch.setattr(errors, "_TYPE_HEADERS", [*errors._TYPE_HEADERS, HEADER])
    for name, kind in (("ThrottlingException", ErrorKind.RATE_LIMIT),
                       ("ModelErrorException", ErrorKind.API_ERROR),
                       ("ServiceQuotaExceededException", ErrorKind.RATE_LIMIT)):
        monkeypatch.setitem(errors._TYPE_KINDS, name, kind)


def test_header_type_names_the_kind_and_code(bedrock_names):
    h = {HEADER: "ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    err = parse_error(400, b'{"message":"Too many tokens"}', h)
    assert err.kind is ErrorKind.RATE_LIMIT and err.code == "ServiceQuotaExceededException"
    assert err.message == "Too many tokens" and err.status == 400
    # a status outside the table: the type decides
    err = parse_error(424, b'{"message":"model failed"}', {HEADER: "ModelErrorException"})
    assert err.kind is ErrorKind.API_ERROR and err.code == "ModelErrorException"


def test_header_names_in_any_case_and_without_body(bedrock_names):
    err = parse_error(429, b"", {"X-Amzn-ErrorType": "ThrottlingException:http://x"})
    assert err.kind is ErrorKind.RATE_LIMIT and err.code == "ThrottlingException"
    err = parse_error(400, b"<html>no</html>", {HEADER: "ServiceQuotaExceededException"})
    assert err.kind is ErrorKind.RATE_LIMIT


def test_body_type_wins_over_header(bedrock_names):
    body = b'{"error":{"type":"invalid_request_error","code":"bad_thing","message":"m"}}'
    err = parse_error(400, body, {HEADER: "ThrottlingException"})
    assert err.code == "bad_thing" and err.kind is ErrorKind.INVALID_REQUEST


def test_without_a_registered_header_nothing_changes(monkeypatch):
    monkeypatch.setattr(errors, "_TYPE_HEADERS", [])
    h = {HEADER: "ThrottlingException:http://x", "x-other": "y"}
    for body in (b'{"message":"m"}', b"", b"oops", b"[1]"):
        assert parse_error(400, body, h) == parse_error(400, body)
        assert parse_error(400, body, h).code is None


def test_exchange_error_path_reads_the_header(bedrock_names):
    x = Exchange(Protocol.ANTHROPIC, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    x.request_for(Protocol.ANTHROPIC)
    x.respond(Protocol.ANTHROPIC, 400, "application/json", headers={HEADER: "ServiceQuotaExceededException:u"})
    out = x.complete(b'{"message":"Too many tokens, please wait"}')
    assert x.error is not None and x.error.kind is ErrorKind.RATE_LIMIT
    assert x.error.code == "ServiceQuotaExceededException"
    assert out.status == 400
    # and error_stop_info, which the proxy calls with the headers
    st = error_stop_info(400, b'{"message":"Too many tokens"}', {HEADER: "ServiceQuotaExceededException"})
    assert st.reason is StopReason.INTERRUPTED and st.category == "ServiceQuotaExceededException"
