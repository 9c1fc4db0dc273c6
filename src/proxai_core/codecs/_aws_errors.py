"""The Bedrock runtime's exceptions, shared by the codecs of its two APIs (Converse and InvokeModel):
the names its errors carry, the kind each stands for, and the exception an error of ours is for each
kind. Each codec decides the form its clients get (the header's suffix, its stream's exceptions)."""

from __future__ import annotations

from typing import Any

from ..neutral import Error, ErrorKind

#: the exceptions an ``x-amzn-errortype`` header names (up to its first ":") -> kind
TYPE_KINDS: dict[str, ErrorKind] = {
    "ValidationException": ErrorKind.INVALID_REQUEST,
    "ConflictException": ErrorKind.INVALID_REQUEST,
    "AccessDeniedException": ErrorKind.PERMISSION,
    "UnrecognizedClientException": ErrorKind.AUTHENTICATION,
    "ExpiredTokenException": ErrorKind.AUTHENTICATION,
    "InvalidSignatureException": ErrorKind.AUTHENTICATION,
    "ResourceNotFoundException": ErrorKind.NOT_FOUND,
    "ThrottlingException": ErrorKind.RATE_LIMIT,
    "ServiceQuotaExceededException": ErrorKind.RATE_LIMIT,
    # (a 429 the SDKs retry)
    "ModelNotReadyException": ErrorKind.RATE_LIMIT,
    "ModelTimeoutException": ErrorKind.TIMEOUT,
    "InternalServerException": ErrorKind.API_ERROR,
    "ModelErrorException": ErrorKind.API_ERROR,
    "ModelStreamErrorException": ErrorKind.API_ERROR,
    "ServiceUnavailableException": ErrorKind.OVERLOADED,
}
#: the exceptions a 200 event stream may carry (``:exception-type``, named in lowerCamel) -> (kind,
#: the exception's own HTTP status); Converse streams carry all but modelTimeoutException
STREAM_EXCEPTIONS: dict[str, tuple[ErrorKind, int]] = {
    "internalServerException": (ErrorKind.API_ERROR, 500),
    "modelStreamErrorException": (ErrorKind.API_ERROR, 424),
    "validationException": (ErrorKind.INVALID_REQUEST, 400),
    "throttlingException": (ErrorKind.RATE_LIMIT, 429),
    "modelTimeoutException": (ErrorKind.TIMEOUT, 408),
    "serviceUnavailableException": (ErrorKind.OVERLOADED, 503),
}
#: every name a Bedrock error is read by (the codecs' ``ErrorFacts.types``)
READ_KINDS: dict[str, ErrorKind] = {**TYPE_KINDS, **{name: kind for name, (kind, _) in STREAM_EXCEPTIONS.items()}}

#: kind -> (status, exception) of our error answer
KIND_WIRE: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_REQUEST: (400, "ValidationException"),
    ErrorKind.AUTHENTICATION: (403, "UnrecognizedClientException"),
    ErrorKind.BILLING: (429, "ThrottlingException"),
    ErrorKind.PERMISSION: (403, "AccessDeniedException"),
    ErrorKind.NOT_FOUND: (404, "ResourceNotFoundException"),
    ErrorKind.REQUEST_TOO_LARGE: (400, "ValidationException"),
    ErrorKind.RATE_LIMIT: (429, "ThrottlingException"),
    ErrorKind.API_ERROR: (500, "InternalServerException"),
    ErrorKind.TIMEOUT: (408, "ModelTimeoutException"),
    ErrorKind.OVERLOADED: (503, "ServiceUnavailableException"),
    ErrorKind.INTERRUPTED: (500, "InternalServerException"),
}
#: kind -> the status of our error answer (every kind, as the registry requires)
STATUSES: dict[ErrorKind, int] = {kind: status for kind, (status, _) in KIND_WIRE.items()}

#: kind -> the stream exception our mid-stream error is, in both APIs' streams (each codec adds the
#: kinds only its stream names)
KIND_STREAM_EXCEPTION: dict[ErrorKind, str] = {
    ErrorKind.INVALID_REQUEST: "validationException",
    ErrorKind.REQUEST_TOO_LARGE: "validationException",
    ErrorKind.RATE_LIMIT: "throttlingException",
    ErrorKind.OVERLOADED: "serviceUnavailableException",
}
#: the stream exception of our error of any other kind
OTHER_STREAM_EXCEPTION = "internalServerException"


def error_type(kind: ErrorKind) -> str:
    """The exception our error answer of ``kind`` is."""
    return KIND_WIRE.get(kind, KIND_WIRE[ErrorKind.API_ERROR])[1]


def type_name(stream_exception: str) -> str:
    """A stream exception's name as a header names it (``throttlingException`` -> ``ThrottlingException``)."""
    return stream_exception[:1].upper() + stream_exception[1:]


def error_body(err: Error) -> dict[str, Any]:
    """Our error answer's body (its exception is named by the header)."""
    return {"message": err.message}
