"""Errors: TranslationError, and upstream errors in neutral form and in each native shape.

Status mapping follows wire-facts §4 / §5.3. Parsing accepts any of the three JSON shapes (plus
OpenRouter / Google style) or no JSON at all (HTML, text, empty).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .neutral import Error
from .protocol import Protocol


class TranslationError(Exception):
    """Input the target protocol cannot represent. The message names the field and why."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


# kind -> (anthropic type, anthropic status)
_ANTHROPIC = {
    "invalid_request": ("invalid_request_error", 400),
    "authentication": ("authentication_error", 401),
    "billing": ("billing_error", 402),
    "permission": ("permission_error", 403),
    "not_found": ("not_found_error", 404),
    # "request_too_large" (Cloudflare) is not in the SDK's ErrorType union; 413 keeps the meaning
    "request_too_large": ("invalid_request_error", 413),
    "rate_limit": ("rate_limit_error", 429),
    "api_error": ("api_error", 500),
    "timeout": ("timeout_error", 504),
    "overloaded": ("overloaded_error", 529),
    "interrupted": ("api_error", 502),
}
_ANTHROPIC_TYPE_TO_KIND = {v[0]: k for k, v in _ANTHROPIC.items() if k not in ("interrupted", "request_too_large")}
_ANTHROPIC_TYPE_TO_KIND["request_too_large"] = "request_too_large"
_ANTHROPIC_TYPE_TO_KIND["conflict_error"] = "invalid_request"

# kind -> (openai type, default code, status)
_OPENAI = {
    "invalid_request": ("invalid_request_error", None, 400),
    "authentication": ("authentication_error", "invalid_api_key", 401),
    "billing": ("insufficient_quota", "insufficient_quota", 429),
    "permission": ("permission_error", None, 403),
    "not_found": ("not_found_error", "not_found", 404),
    "request_too_large": ("invalid_request_error", "request_too_large", 413),
    "rate_limit": ("rate_limit_error", "rate_limit_exceeded", 429),
    "api_error": ("server_error", "server_error", 500),
    "timeout": ("timeout_error", "timeout", 504),
    "overloaded": ("server_error", "overloaded", 503),
    "interrupted": ("server_error", "stream_interrupted", 502),
}

_STATUS_TO_KIND = {
    400: "invalid_request",
    401: "authentication",
    402: "billing",
    403: "permission",
    404: "not_found",
    408: "timeout",
    409: "invalid_request",
    413: "request_too_large",
    422: "invalid_request",
    429: "rate_limit",
    500: "api_error",
    502: "api_error",
    503: "overloaded",
    504: "timeout",
    529: "overloaded",
}

# Responses error.code -> kind
_RESPONSES_CODE_TO_KIND = {
    "server_error": "api_error",
    "rate_limit_exceeded": "rate_limit",
    "vector_store_timeout": "timeout",
}

_OPENAI_TYPE_TO_KIND = {
    "invalid_request_error": "invalid_request",
    "authentication_error": "authentication",
    "permission_error": "permission",
    "not_found_error": "not_found",
    "rate_limit_error": "rate_limit",
    "insufficient_quota": "billing",
    "server_error": "api_error",
    "api_error": "api_error",
    "timeout_error": "timeout",
    "overloaded_error": "overloaded",
    "requests": "rate_limit",
    "tokens": "rate_limit",
}


def kind_for_status(status: int | None) -> str:
    if status is None:
        return "api_error"
    if status in _STATUS_TO_KIND:
        return _STATUS_TO_KIND[status]
    if 400 <= status < 500:
        return "invalid_request"
    return "api_error"


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


def parse_error(status: int | None, body: bytes | str | dict | None) -> Error:
    """Read an upstream error body of any shape into a neutral :class:`Error`."""
    obj: Any = body
    if isinstance(body, (bytes, bytearray, str)):
        raw = body.encode() if isinstance(body, str) else bytes(body)
        try:
            obj = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            text = _text_of_non_json(raw)
            kind = kind_for_status(status)
            msg = f"upstream returned HTTP {status}" if status else "upstream error"
            if text:
                msg += f": {text}"
            elif not raw.strip():
                msg += " with an empty body"
            return Error(kind=kind, message=msg, status=status, raw=raw.decode("utf-8", "replace")[:2000])
    if obj is None:
        return Error(kind=kind_for_status(status), message=f"upstream returned HTTP {status} with an empty body",
                     status=status)
    if not isinstance(obj, dict):
        return Error(kind=kind_for_status(status), message=f"upstream returned HTTP {status}: {str(obj)[:500]}",
                     status=status, raw=obj)
    if isinstance(obj.get("error"), dict) and isinstance(obj["error"].get("status"), str):
        from .codecs._gemini_common import error_from_wire

        g = error_from_wire(status, obj)
        if g is not None:
            return g
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
    if not isinstance(message, str):
        message = str(message) if message is not None else f"upstream returned HTTP {status}"
    kind = None
    if isinstance(etype, str):
        kind = _ANTHROPIC_TYPE_TO_KIND.get(etype) or _OPENAI_TYPE_TO_KIND.get(etype)
    if kind is None and isinstance(code, str):
        kind = _RESPONSES_CODE_TO_KIND.get(code)
        if kind is None and code in ("context_length_exceeded", "invalid_prompt") or (
            isinstance(code, str) and code.startswith("invalid_")
        ):
            kind = "invalid_request"
    if kind is None:
        kind = kind_for_status(status)
    if status is None:
        status = _OPENAI[kind][2] if kind != "overloaded" else 529
    return Error(kind=kind, message=message, status=status,
                 code=code if isinstance(code, str) else None,
                 param=param if isinstance(param, str) else None, raw=obj)


def anthropic_error_body(err: Error) -> dict[str, Any]:
    etype = _ANTHROPIC.get(err.kind, ("api_error", 500))[0]
    return {"type": "error", "error": {"type": etype, "message": err.message}}


def openai_error_body(err: Error) -> dict[str, Any]:
    etype, code, _ = _OPENAI.get(err.kind, ("server_error", "server_error", 500))
    return {"error": {"message": err.message, "type": etype, "param": err.param, "code": err.code or code}}


def native_status(err: Error, target: Protocol) -> int:
    """HTTP status the client protocol expects for this error."""
    st = err.status
    if target is Protocol.ANTHROPIC:
        if err.kind == "overloaded":
            return 529
        if st is not None and 400 <= st < 600 and st != 503:
            return st
        return _ANTHROPIC.get(err.kind, ("api_error", 500))[1]
    if st == 529:
        return 503  # OpenAI clients know no 529; 503 is retried the same way
    if st is not None and 400 <= st < 600:
        return st
    return _OPENAI.get(err.kind, ("server_error", None, 500))[2]


def native_error(err: Error, target: Protocol) -> tuple[int, dict[str, Any]]:
    target = Protocol(target)
    if target is Protocol.GEMINI:
        from .codecs._gemini_common import error_body, error_status

        return error_status(err), error_body(err)
    body = anthropic_error_body(err) if target is Protocol.ANTHROPIC else openai_error_body(err)
    return native_status(err, target), body


def translation_error_response(exc: Exception, target: Protocol) -> tuple[int, dict[str, Any]]:
    """A client mistake or an unrepresentable request: 400 invalid_request_error, never 500."""
    err = Error(kind="invalid_request", message=str(exc), status=400,
                param=getattr(exc, "field", None))
    return native_error(err, target)
