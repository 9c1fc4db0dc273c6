"""Facts the two OpenAI protocols (Chat Completions, Responses) share: error bodies and statuses,
credentials and vendor headers, the model list (private; read through each codec's ``CODEC``)."""

from __future__ import annotations

from typing import Any

from ..caching import CacheHint
from ..neutral import Error, ErrorKind
from .base import Credentials, ErrorFacts

VENDOR = "openai"

#: reasoning efforts both OpenAI protocols accept
EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh"})
_BUDGET_EFFORT = ((32768, "xhigh"), (16384, "high"), (8192, "medium"), (2048, "low"))


def effort_for_budget(budget: int) -> str:
    """The largest effort whose thinking budget is <= ``budget``."""
    for limit, name in _BUDGET_EFFORT:
        if budget >= limit:
            return name
    return "minimal"

# kind -> (error.type, default error.code) of an OpenAI error body
_BODY: dict[ErrorKind, tuple[str, str | None]] = {
    ErrorKind.INVALID_REQUEST: ("invalid_request_error", None),
    ErrorKind.AUTHENTICATION: ("authentication_error", "invalid_api_key"),
    ErrorKind.BILLING: ("insufficient_quota", "insufficient_quota"),
    ErrorKind.PERMISSION: ("permission_error", None),
    ErrorKind.NOT_FOUND: ("not_found_error", "not_found"),
    ErrorKind.REQUEST_TOO_LARGE: ("invalid_request_error", "request_too_large"),
    ErrorKind.RATE_LIMIT: ("rate_limit_error", "rate_limit_exceeded"),
    ErrorKind.API_ERROR: ("server_error", "server_error"),
    ErrorKind.TIMEOUT: ("timeout_error", "timeout"),
    ErrorKind.OVERLOADED: ("server_error", "overloaded"),
    ErrorKind.INTERRUPTED: ("server_error", "stream_interrupted"),
}

#: kind -> HTTP status an OpenAI client expects
STATUSES: dict[ErrorKind, int] = {
    ErrorKind.INVALID_REQUEST: 400,
    ErrorKind.AUTHENTICATION: 401,
    ErrorKind.BILLING: 429,  # OpenAI's way (insufficient_quota)
    ErrorKind.PERMISSION: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.REQUEST_TOO_LARGE: 413,
    ErrorKind.RATE_LIMIT: 429,
    ErrorKind.API_ERROR: 500,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.OVERLOADED: 503,  # OpenAI clients know no 529; 503 is retried the same way
    ErrorKind.INTERRUPTED: 502,
}

#: error.type -> kind
TYPES: dict[str, ErrorKind] = {
    "invalid_request_error": ErrorKind.INVALID_REQUEST,
    "authentication_error": ErrorKind.AUTHENTICATION,
    "permission_error": ErrorKind.PERMISSION,
    "not_found_error": ErrorKind.NOT_FOUND,
    "rate_limit_error": ErrorKind.RATE_LIMIT,
    "insufficient_quota": ErrorKind.BILLING,
    "server_error": ErrorKind.API_ERROR,
    "api_error": ErrorKind.API_ERROR,
    "timeout_error": ErrorKind.TIMEOUT,
    "overloaded_error": ErrorKind.OVERLOADED,
    "requests": ErrorKind.RATE_LIMIT,
    "tokens": ErrorKind.RATE_LIMIT,
}

#: error.code -> kind, where the code says more than the type: OpenAI types a bad key (401) and an
#: unknown model (404) as invalid_request_error; the codes of our own bodies read back as written
CODES: dict[str, ErrorKind] = {
    "invalid_api_key": ErrorKind.AUTHENTICATION,
    "model_not_found": ErrorKind.NOT_FOUND,
    "insufficient_quota": ErrorKind.BILLING,
    "rate_limit_exceeded": ErrorKind.RATE_LIMIT,
    "context_length_exceeded": ErrorKind.INVALID_REQUEST,
    "not_found": ErrorKind.NOT_FOUND,
    "request_too_large": ErrorKind.REQUEST_TOO_LARGE,
    "timeout": ErrorKind.TIMEOUT,
    "overloaded": ErrorKind.OVERLOADED,
    "stream_interrupted": ErrorKind.INTERRUPTED,
}


def prompt_cache_key(body: dict[str, Any], hint: CacheHint) -> None:
    """OpenAI caches a prefix of 1,024 tokens or more by itself, on the machine the request lands on;
    ``prompt_cache_key`` routes every turn of a conversation to the same cache (the client's own
    key, when it sent one, is kept)."""
    body.setdefault("prompt_cache_key", hint.key)


def chat_prompt_cache_key(body: dict[str, Any], hint: CacheHint) -> None:
    """:func:`prompt_cache_key` toward OpenAI's own hosts: other Chat Completions servers may reject
    a field they do not know, so elsewhere only when the route asks for hints."""
    host = (hint.host or "").lower()
    if hint.explicit or host == "api.openai.com" or is_azure_host(host):
        prompt_cache_key(body, hint)


def error_body(err: Error) -> dict[str, Any]:
    etype, code = _BODY.get(err.kind, _BODY[ErrorKind.API_ERROR])
    return {"error": {"message": err.message, "type": etype, "param": err.param, "code": err.code or code}}


def error_facts(codes: dict[str, ErrorKind] | None = None) -> ErrorFacts:
    return ErrorFacts(types=TYPES, codes=dict(CODES, **(codes or {})), statuses=STATUSES,
                      foreign_statuses=frozenset({529}), body=error_body)


# ----------------------------------------------------------------------------- credentials
def is_azure_host(host: str) -> bool:
    h = host.lower()
    return h.endswith((".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"))


def auth_headers(key: str, host: str) -> dict[str, str]:
    if is_azure_host(host):
        return {"api-key": key}
    return {"authorization": f"Bearer {key}"}


def credentials(protocol_headers: tuple[str, ...]) -> Credentials:
    return Credentials(
        key_headers=("authorization", "api-key"),
        account_headers=("openai-organization", "openai-project", "chatgpt-account-id"),
        vendor_headers=("openai-organization", "openai-project", "chatgpt-account-id"),
        protocol_headers=protocol_headers,
        client_markers=(),
        default_headers={},
        auth_headers=auth_headers,
        vendor=VENDOR,
    )


# ----------------------------------------------------------------------------- model list
def model_entry(mid: str, src: dict[str, Any] | None) -> dict[str, Any]:
    src = src or {}
    created = src.get("created")
    return {"id": mid, "object": "model", "created": created if isinstance(created, int) else 0,
            "owned_by": src.get("owned_by") or "proxai"}


def model_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "data": items}
