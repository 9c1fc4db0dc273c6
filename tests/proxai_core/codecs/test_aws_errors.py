"""The errors the two Bedrock runtime codecs (Converse, InvokeModel) write for every kind: the
status, the ``x-amzn-errortype`` header, the body and the stream's exception frame. The two APIs
differ in a few of them (a billing error, a timeout, an interrupted stream), and each keeps its own."""

from __future__ import annotations

import pytest

from proxai_core import Protocol
from proxai_core.codecs import get
from proxai_core.eventstream import frame
from proxai_core.neutral import Error, ErrorKind

INVOKE = get(Protocol.BEDROCK_INVOKE)
CONVERSE = get(Protocol.BEDROCK_CONVERSE)
#: what a Converse client's error type header carries after the exception's name
SUFFIX = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
MESSAGE = 'said "no" \u00e9'
PAYLOAD = b'{"message":"said \\"no\\" \xc3\xa9"}'

#: kind -> (status, x-amzn-errortype, stream exception) of our error for an InvokeModel client
INVOKE_WRITES = {
    ErrorKind.INVALID_REQUEST: (400, "ValidationException", "validationException"),
    ErrorKind.AUTHENTICATION: (403, "UnrecognizedClientException", "internalServerException"),
    ErrorKind.BILLING: (429, "ServiceQuotaExceededException", "throttlingException"),
    ErrorKind.PERMISSION: (403, "AccessDeniedException", "internalServerException"),
    ErrorKind.NOT_FOUND: (404, "ResourceNotFoundException", "internalServerException"),
    ErrorKind.REQUEST_TOO_LARGE: (400, "ValidationException", "validationException"),
    ErrorKind.RATE_LIMIT: (429, "ThrottlingException", "throttlingException"),
    ErrorKind.API_ERROR: (500, "InternalServerException", "internalServerException"),
    ErrorKind.TIMEOUT: (408, "ModelTimeoutException", "modelTimeoutException"),
    ErrorKind.OVERLOADED: (503, "ServiceUnavailableException", "serviceUnavailableException"),
    ErrorKind.INTERRUPTED: (500, "InternalServerException", "internalServerException"),
}
#: the same for a Converse client (its stream has no modelTimeoutException)
CONVERSE_WRITES = {
    ErrorKind.INVALID_REQUEST: (400, "ValidationException", "validationException"),
    ErrorKind.AUTHENTICATION: (403, "UnrecognizedClientException", "internalServerException"),
    ErrorKind.BILLING: (429, "ThrottlingException", "internalServerException"),
    ErrorKind.PERMISSION: (403, "AccessDeniedException", "internalServerException"),
    ErrorKind.NOT_FOUND: (404, "ResourceNotFoundException", "internalServerException"),
    ErrorKind.REQUEST_TOO_LARGE: (400, "ValidationException", "validationException"),
    ErrorKind.RATE_LIMIT: (429, "ThrottlingException", "throttlingException"),
    ErrorKind.API_ERROR: (500, "InternalServerException", "internalServerException"),
    ErrorKind.TIMEOUT: (408, "ModelTimeoutException", "internalServerException"),
    ErrorKind.OVERLOADED: (503, "ServiceUnavailableException", "serviceUnavailableException"),
    ErrorKind.INTERRUPTED: (500, "InternalServerException", "modelStreamErrorException"),
}
#: every exception name Bedrock's ``x-amzn-errortype`` carries -> its kind
TYPE_NAMES = {
    "ValidationException": ErrorKind.INVALID_REQUEST,
    "ConflictException": ErrorKind.INVALID_REQUEST,
    "AccessDeniedException": ErrorKind.PERMISSION,
    "UnrecognizedClientException": ErrorKind.AUTHENTICATION,
    "ExpiredTokenException": ErrorKind.AUTHENTICATION,
    "InvalidSignatureException": ErrorKind.AUTHENTICATION,
    "ResourceNotFoundException": ErrorKind.NOT_FOUND,
    "ThrottlingException": ErrorKind.RATE_LIMIT,
    "ServiceQuotaExceededException": ErrorKind.RATE_LIMIT,
    "ModelNotReadyException": ErrorKind.RATE_LIMIT,
    "ModelTimeoutException": ErrorKind.TIMEOUT,
    "InternalServerException": ErrorKind.API_ERROR,
    "ModelErrorException": ErrorKind.API_ERROR,
    "ModelStreamErrorException": ErrorKind.API_ERROR,
    "ServiceUnavailableException": ErrorKind.OVERLOADED,
}


@pytest.mark.parametrize("codec", [INVOKE, CONVERSE], ids=lambda c: c.name)
def test_both_codecs_answer_every_kind_with_the_same_status(codec):
    assert dict(codec.errors.statuses) == {k: v[0] for k, v in INVOKE_WRITES.items()}
    assert dict(codec.errors.statuses) == {k: v[0] for k, v in CONVERSE_WRITES.items()}
    assert codec.errors.foreign_statuses == {529} and codec.errors.type_header == "x-amzn-errortype"


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_an_invoke_client_gets_every_kind_as_its_own_exception(kind):
    status, etype, exception = INVOKE_WRITES[kind]
    # (the upstream's own exception name is never passed on)
    for code in (None, etype, "ModelNotReadyException", "throttlingException"):
        err = Error(kind=kind, message=MESSAGE, code=code)
        assert INVOKE.error_response(err) == (status, {"message": MESSAGE})
        assert INVOKE.errors.headers(err) == {"x-amzn-errortype": etype}
        assert INVOKE.error_frame(err) == frame(exception, PAYLOAD, "exception")
        assert INVOKE.error_frame(Error(kind=kind, message=MESSAGE, status=503)) == INVOKE.error_frame(err)


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_a_converse_client_gets_every_kind_as_its_own_exception(kind):
    status, etype, exception = CONVERSE_WRITES[kind]
    err = Error(kind=kind, message=MESSAGE)
    assert CONVERSE.error_response(err) == (status, {"message": MESSAGE})
    assert CONVERSE.errors.headers(err) == {"x-amzn-errortype": etype + SUFFIX}
    assert CONVERSE.error_frame(err) == frame(exception, PAYLOAD, "exception")
    # a model stream error says the status the model failed with
    payload = PAYLOAD[:-1] + b',"originalStatusCode":503}' if exception == "modelStreamErrorException" else PAYLOAD
    assert CONVERSE.error_frame(Error(kind=kind, message=MESSAGE, status=503)) == frame(exception, payload, "exception")


@pytest.mark.parametrize("name,kind", TYPE_NAMES.items())
def test_a_converse_client_gets_the_upstreams_exception_where_it_names_the_kind(name, kind):
    assert CONVERSE.errors.headers(Error(kind=kind, message="m", code=name)) == {"x-amzn-errortype": name + SUFFIX}
    # a name of another kind, or a stream exception's name, is not passed on
    other = ErrorKind.NOT_FOUND if kind is not ErrorKind.NOT_FOUND else ErrorKind.PERMISSION
    assert CONVERSE.errors.headers(Error(kind=other, message="m", code=name)) == {
        "x-amzn-errortype": CONVERSE_WRITES[other][1] + SUFFIX}
    camel = name[:1].lower() + name[1:]
    assert CONVERSE.errors.headers(Error(kind=kind, message="m", code=camel)) == {
        "x-amzn-errortype": CONVERSE_WRITES[kind][1] + SUFFIX}


@pytest.mark.parametrize("codec", [INVOKE, CONVERSE], ids=lambda c: c.name)
@pytest.mark.parametrize("kind", list(ErrorKind))
def test_a_kind_given_as_its_plain_value_writes_the_same(codec, kind):
    for status in (None, 503):
        ours, plain = Error(kind=kind, message="m", status=status), Error(kind=kind.value, message="m", status=status)
        assert codec.error_response(plain) == codec.error_response(ours)
        assert codec.errors.headers(plain) == codec.errors.headers(ours)
        assert codec.error_frame(plain) == codec.error_frame(ours)
