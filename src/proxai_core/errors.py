"""Errors: TranslationError, and upstream errors in neutral form.

Reading is neutral: any JSON error shape (plus OpenRouter / Google style) or no JSON at all (HTML,
text, empty). The wire error names of every protocol are the codecs' facts: the registry adds each
codec's ``error.type`` / ``error.code`` tables here when it loads it (this module sits below the
codecs, which read errors through it). Writing a native error asks the client's codec.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import orjson

from .neutral import Error, ErrorKind

__all__ = [
    "ErrorKind",
    "TranslationError",
    "add_error_names",
    "client_status",
    "error_kind",
    "kind_for_status",
    "parse_error",
]


class TranslationError(Exception):
    """Input the target protocol cannot represent. The message names the field and why."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


#: HTTP status -> kind (HTTP meaning, the same for every protocol)
_STATUS_TO_KIND = {
    400: ErrorKind.INVALID_REQUEST,
    401: ErrorKind.AUTHENTICATION,
    402: ErrorKind.BILLING,
    403: ErrorKind.PERMISSION,
    404: ErrorKind.NOT_FOUND,
    408: ErrorKind.TIMEOUT,
    409: ErrorKind.INVALID_REQUEST,
    413: ErrorKind.REQUEST_TOO_LARGE,
    422: ErrorKind.INVALID_REQUEST,
    429: ErrorKind.RATE_LIMIT,
    500: ErrorKind.API_ERROR,
    502: ErrorKind.API_ERROR,
    503: ErrorKind.OVERLOADED,
    504: ErrorKind.TIMEOUT,
    529: ErrorKind.OVERLOADED,
}
#: kinds a status gives when it says nothing more precise (a type or code may refine them)
_GENERIC_KINDS = frozenset({ErrorKind.INVALID_REQUEST, ErrorKind.API_ERROR})

#: kind -> the status an error without one gets (every kind)
KIND_STATUS: Mapping[ErrorKind, int] = {
    ErrorKind.INVALID_REQUEST: 400,
    ErrorKind.AUTHENTICATION: 401,
    ErrorKind.BILLING: 429,
    ErrorKind.PERMISSION: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.REQUEST_TOO_LARGE: 413,
    ErrorKind.RATE_LIMIT: 429,
    ErrorKind.API_ERROR: 500,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.OVERLOADED: 529,
    ErrorKind.INTERRUPTED: 502,
}

#: every protocol's ``error.type`` and precise ``error.code`` names -> kind (the first codec in
#: registry order that knows a name decides it); filled by the registry through add_error_names
_TYPE_KINDS: dict[str, ErrorKind] = {}
_CODE_KINDS: dict[str, ErrorKind] = {}
#: response headers that name an error's type (lower case), also filled by the registry
_TYPE_HEADERS: list[str] = []


def add_error_names(types: Mapping[str, ErrorKind], codes: Mapping[str, ErrorKind],
                    type_header: str | None = None) -> None:
    """Read a protocol's wire error names too (names already known keep their kind), and its
    header naming the error type, if it has one."""
    for name, kind in types.items():
        _TYPE_KINDS.setdefault(name, kind)
    for name, kind in codes.items():
        _CODE_KINDS.setdefault(name, kind)
    if type_header is not None and type_header.lower() not in _TYPE_HEADERS:
        _TYPE_HEADERS.append(type_header.lower())


def _header_type(headers: Mapping[str, str]) -> str | None:
    """The error type a response header names (``ThrottlingException:http://...`` -> its name)."""
    for name in _TYPE_HEADERS:
        value = headers.get(name)
        if value is None and isinstance(headers, dict):  # (a plain dict: its names in any case)
            value = next((v for k, v in headers.items() if k.lower() == name), None)
        if isinstance(value, str) and value:
            return value.partition(":")[0].strip() or None
    return None


def kind_for_status(status: int | None) -> ErrorKind:
    if status is None:
        return ErrorKind.API_ERROR
    if status in _STATUS_TO_KIND:
        return _STATUS_TO_KIND[status]
    if 400 <= status < 500:
        return ErrorKind.INVALID_REQUEST
    return ErrorKind.API_ERROR


def _text_of_non_json(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return ""
    if "<" in text and ">" in text:  # HTML: keep the title or the visible text, short
        m = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        if m and m.group(1).strip():
            text = m.group(1)
        else:
            text = re.sub(r"<[^>]+>", " ", text)
        text = re.sub(r"\s+", " ", text).strip()
    return text[:500]


def parse_error(status: int | None, body: bytes | str | dict[str, Any] | None,
                headers: Mapping[str, str] | None = None) -> Error:
    """Read an upstream error body of any shape into a neutral :class:`Error`. ``headers``: the
    error response's; a header naming the error type (Bedrock's ``x-amzn-errortype``) is read
    where the body names none (and is the error's code where the body has none)."""
    htype = _header_type(headers) if headers else None
    obj: Any = body
    if isinstance(body, (bytes, bytearray, str)):
        raw = body.encode() if isinstance(body, str) else bytes(body)
        try:
            obj = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            text = _text_of_non_json(raw)
            kind = error_kind(status, htype, None)
            msg = f"upstream returned HTTP {status}" if status else "upstream error"
            if text:
                msg += f": {text}"
            elif not raw.strip():
                msg += " with an empty body"
            return Error(kind=kind, message=msg, status=status, code=htype,
                         raw=raw.decode("utf-8", "replace")[:2000])
    if obj is None:
        return Error(kind=error_kind(status, htype, None),
                     message=f"upstream returned HTTP {status} with an empty body", status=status, code=htype)
    if not isinstance(obj, dict):
        return Error(kind=error_kind(status, htype, None),
                     message=f"upstream returned HTTP {status}: {str(obj)[:500]}", status=status, code=htype, raw=obj)
    err = obj.get("error")
    etype = code = param = None
    message = None
    if isinstance(err, dict):
        etype = err.get("type")
        code = err.get("code")
        param = err.get("param")
        message = err.get("message")
        if isinstance(code, int) and status is None:  # OpenRouter / Google: code is the HTTP status
            status = code
        if etype is None and isinstance(err.get("status"), str):  # Google style
            etype = err.get("status")
    elif isinstance(err, str):
        message = err
    else:
        etype = obj.get("type") if obj.get("type") != "error" else None
        code = obj.get("code")
        param = obj.get("param")
        message = obj.get("message") or obj.get("detail")
    if htype is not None:
        if not isinstance(etype, str):
            etype = htype
        if not isinstance(code, str):
            code = htype
    if not isinstance(message, str):
        message = str(message) if message is not None else f"upstream returned HTTP {status}"
    kind = error_kind(status, etype if isinstance(etype, str) else None,
                      code if isinstance(code, str) else None)
    if status is None:
        status = KIND_STATUS[kind]
    return Error(kind=kind, message=message, status=status,
                 code=code if isinstance(code, str) else None,
                 param=param if isinstance(param, str) else None, raw=obj)


def error_kind(status: int | None, etype: str | None, code: str | None) -> ErrorKind:
    """The error's kind: a precise code first (``invalid_api_key``, ``model_not_found``), then the
    status, then the type (which only refines a generic status: 400, 500, 502), else the status's
    generic kind. Every protocol's types and codes are read (an upstream may speak any)."""
    if code is not None:
        by_code = _CODE_KINDS.get(code)
        if by_code is not None:
            return by_code
    by_status = kind_for_status(status) if status is not None else None
    if by_status is not None and by_status not in _GENERIC_KINDS:
        return by_status
    by_type = _TYPE_KINDS.get(etype) if etype is not None else None
    if by_type is not None:
        return by_type
    if by_status is not None:
        return by_status
    if code is not None and code.startswith("invalid_"):
        return ErrorKind.INVALID_REQUEST
    return ErrorKind.API_ERROR


def client_status(err: Error, statuses: Mapping[ErrorKind, int], foreign: Collection[int]) -> int:
    """The HTTP status a client gets for ``err``, given its protocol's kind -> status table and the
    statuses its clients never see.

    The upstream's own status is kept when it names the error's condition or only a generic one
    (400, 422, 500, 502: a code or type refines the body's type, never the status). A status the
    client's protocol has another number for becomes that number: a foreign status (529 for
    OpenAI, 503 for Anthropic) the status of its condition there, a status that stands for another
    condition (OpenAI's 429 for insufficient_quota) the error's own status there. An error without
    an HTTP error status (a mid-stream error, a failed response) gets its kind's status."""
    st = err.status
    if st is None or not 400 <= st < 600:
        return statuses.get(err.kind, statuses[ErrorKind.API_ERROR])
    by_status = kind_for_status(st)
    if st in foreign:
        return statuses.get(by_status, statuses[ErrorKind.API_ERROR])
    if by_status == err.kind or by_status in _GENERIC_KINDS:
        return st
    return statuses.get(err.kind, statuses[ErrorKind.API_ERROR])
