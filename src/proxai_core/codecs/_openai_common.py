"""Facts the two OpenAI protocols (Chat Completions, Responses) share: error bodies and statuses,
credentials and vendor headers, the model list (private; read through each codec's ``CODEC``)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from ..neutral import Error
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
_BODY: dict[str, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("authentication_error", "invalid_api_key"),
    "billing": ("insufficient_quota", "insufficient_quota"),
    "permission": ("permission_error", None),
    "not_found": ("not_found_error", "not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit": ("rate_limit_error", "rate_limit_exceeded"),
    "api_error": ("server_error", "server_error"),
    "timeout": ("timeout_error", "timeout"),
    "overloaded": ("server_error", "overloaded"),
    "interrupted": ("server_error", "stream_interrupted"),
}

#: kind -> HTTP status an OpenAI client expects
STATUSES: dict[str, int] = {
    "invalid_request": 400,
    "authentication": 401,
    "billing": 429,  # OpenAI's way (insufficient_quota)
    "permission": 403,
    "not_found": 404,
    "request_too_large": 413,
    "rate_limit": 429,
    "api_error": 500,
    "timeout": 504,
    "overloaded": 503,  # OpenAI clients know no 529; 503 is retried the same way
    "interrupted": 502,
}

#: error.type -> kind
TYPES: dict[str, str] = {
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

#: error.code -> kind, where the code says more than the type: OpenAI types a bad key (401) and an
#: unknown model (404) as invalid_request_error; the codes of our own bodies read back as written
CODES: dict[str, str] = {
    "invalid_api_key": "authentication",
    "model_not_found": "not_found",
    "insufficient_quota": "billing",
    "rate_limit_exceeded": "rate_limit",
    "context_length_exceeded": "invalid_request",
    "not_found": "not_found",
    "request_too_large": "request_too_large",
    "timeout": "timeout",
    "overloaded": "overloaded",
    "stream_interrupted": "interrupted",
}


def error_body(err: Error) -> dict[str, Any]:
    etype, code = _BODY.get(err.kind, _BODY["api_error"])
    return {"error": {"message": err.message, "type": etype, "param": err.param, "code": err.code or code}}


def error_facts(codes: dict[str, str] | None = None) -> ErrorFacts:
    return ErrorFacts(types=TYPES, codes=dict(CODES, **(codes or {})), statuses=STATUSES,
                      foreign_statuses=frozenset({529}), body=error_body)


# ----------------------------------------------------------------------------- credentials
def is_azure_host(host: str) -> bool:
    h = host.lower()
    return h.endswith((".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"))


def inject_key(headers: MutableMapping[str, str], key: str, host: str) -> None:
    if is_azure_host(host):
        headers["api-key"] = key
    else:
        headers["authorization"] = f"Bearer {key}"


def credentials(protocol_headers: tuple[str, ...]) -> Credentials:
    return Credentials(
        key_headers=("authorization", "api-key"),
        account_headers=("openai-organization", "openai-project", "chatgpt-account-id"),
        vendor_headers=("openai-organization", "openai-project", "chatgpt-account-id"),
        protocol_headers=protocol_headers,
        client_markers=(),
        default_headers={},
        inject=inject_key,
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
