"""The Bedrock runtime's exceptions (``codecs/_aws_errors.py``) as its two APIs' codecs (Converse,
InvokeModel) use them: both read every exception name to the same kind, and each writes, for every
kind, its own status, ``x-amzn-errortype`` header, body and stream exception frame. The two APIs
differ in a few of these (a billing error, a timeout, an interrupted stream), and each keeps its own."""

from __future__ import annotations

import pytest

from proxai_core import Exchange, Protocol, StreamTranslator
from proxai_core.codecs import _aws_errors as aws
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
#: every exception a 200 event stream carries -> (kind, the status InvokeModel reads, Converse's: the kind's)
STREAM_NAMES = {
    "internalServerException": (ErrorKind.API_ERROR, 500, 500),
    "modelStreamErrorException": (ErrorKind.API_ERROR, 424, 500),
    "validationException": (ErrorKind.INVALID_REQUEST, 400, 400),
    "throttlingException": (ErrorKind.RATE_LIMIT, 429, 429),
    "modelTimeoutException": (ErrorKind.TIMEOUT, 408, 408),
    "serviceUnavailableException": (ErrorKind.OVERLOADED, 503, 503),
}


def test_one_table_names_every_exception_for_both_codecs():
    assert aws.TYPE_KINDS == TYPE_NAMES
    assert {name: kind for name, (kind, _) in aws.STREAM_EXCEPTIONS.items()} == {
        name: kind for name, (kind, _, _) in STREAM_NAMES.items()}
    for name, (kind, _, _) in STREAM_NAMES.items():  # a stream's exception is the header's, in lowerCamel
        assert TYPE_NAMES[aws.type_name(name)] == kind
    read = {**TYPE_NAMES, **{name: kind for name, (kind, _, _) in STREAM_NAMES.items()}}
    assert INVOKE.errors.types == CONVERSE.errors.types == read


@pytest.mark.parametrize("name,kind", TYPE_NAMES.items())
def test_both_codecs_read_every_error_type_to_the_same_kind(name, kind):
    requests = {INVOKE: ({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                          "messages": [{"role": "user", "content": "hi"}]}, "/model/m/invoke"),
                CONVERSE: ({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}, "/model/m/converse")}
    for codec, (body, path) in requests.items():
        x = Exchange(codec.protocol, body, path=path)
        x.respond(codec.protocol, 400, "application/json", headers={"x-amzn-errortype": name + SUFFIX})
        x.complete(b'{"message":"m"}')
        assert x.error is not None and (x.error.kind, x.error.code, x.error.message) == (kind, name, "m"), codec.name


@pytest.mark.parametrize("name", STREAM_NAMES)
def test_both_codecs_read_every_stream_exception_to_the_same_kind(name):
    kind, invoke_status, converse_status = STREAM_NAMES[name]
    raw = frame(name, b'{"message":"m"}', "exception")
    start = frame("messageStart", b'{"role":"assistant"}')
    for codec, data, status, code in ((INVOKE, raw, invoke_status, name),
                                      (CONVERSE, start + raw, converse_status, aws.type_name(name))):
        t = StreamTranslator(codec.protocol, Protocol.ANTHROPIC)
        t.feed(data)
        t.close()
        assert t.error is not None, codec.name
        assert (t.error.kind, t.error.status, t.error.code, t.error.message) == (kind, status, code, "m"), codec.name


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
