"""Helpers shared by the Anthropic Messages request, response and stream codecs."""

from __future__ import annotations

import re
import uuid
from typing import Any

from ..errors import client_status
from ..neutral import Error, ErrorKind, Usage
from ..stop import StopInfo, StopKey, StopReason, WireStop, check_stop_table, classify_stop, map_stop
from ._request_common import count, token_count
from .base import (
    SNIFF_CONTENT,
    SNIFF_DECISIVE,
    SNIFF_HINT,
    SNIFF_KEYS,
    SNIFF_TOOLS,
    SNIFF_WEAK,
    Capabilities,
    Credentials,
    Endpoints,
    ErrorFacts,
    Evidence,
    RequestFields,
    TokenCounter,
)

PROTOCOL = "anthropic_messages"

#: stop_details.category values the Anthropic SDK knows; anything else is sent as null.
REFUSAL_CATEGORIES = frozenset({"cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms"})

#: Text of the block we add when a refusal came with nothing the client could show.
FALLBACK_REFUSAL_TEXT = "The model declined to respond to this request."

#: Anthropic citation types (TextCitation union); any other raw citation is foreign.
CITATION_TYPES = frozenset(
    {
        "char_location",
        "page_location",
        "content_block_location",
        "web_search_result_location",
        "search_result_location",
    }
)

_FOREIGN_ID_PREFIX = re.compile(r"^(?:chatcmpl|resp|msg|gen|cmpl)[-_]")


def warn_once(warnings: list[str], message: str) -> None:
    if message not in warnings:
        warnings.append(message)


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def msg_id(src: str | None) -> str:
    """An Anthropic message id derived from the source id (deterministic), minted when absent."""
    if not src:
        return "msg_" + uuid.uuid4().hex[:24]
    if src.startswith("msg_"):
        return src
    if src.startswith("chatcmpl-"):  # the usual foreign id, without the regex
        return "msg_" + src[9:]
    return "msg_" + _FOREIGN_ID_PREFIX.sub("", src, count=1)


# ----------------------------------------------------------------------------- usage
def usage_from_wire(u: dict[str, Any]) -> Usage:
    details = u.get("output_tokens_details")
    thinking = details.get("thinking_tokens") if isinstance(details, dict) else None
    return Usage(count(u.get("input_tokens")), count(u.get("cache_read_input_tokens")),
                 count(u.get("cache_creation_input_tokens")), count(u.get("output_tokens")), count(thinking))


def usage_to_wire(u: Usage | None, *, delta: bool = False) -> dict[str, Any]:
    """Anthropic usage object. ``input_tokens`` excludes cache reads/writes (neutral meaning).

    ``delta``: the ``message_delta`` form, where only known values are sent (cumulative).
    """
    if u is None:
        return {"output_tokens": 0} if delta else {"input_tokens": 0, "output_tokens": 0}
    out: dict[str, Any] = {}
    if not delta or u.input is not None:
        out["input_tokens"] = u.input or 0
    if u.cache_write is not None:
        out["cache_creation_input_tokens"] = u.cache_write
    if u.cache_read is not None:
        out["cache_read_input_tokens"] = u.cache_read
    out["output_tokens"] = u.output or 0
    if u.reasoning is not None:
        out["output_tokens_details"] = {"thinking_tokens": u.reasoning}
    return out


# ----------------------------------------------------------------------------- stop
def stop_from_wire(raw: Any, details: Any, has_tool_calls: bool) -> StopInfo:
    # end_turn with tool_use blocks reads as tool_use (raw keeps "end_turn"), as for every protocol
    raw = raw if isinstance(raw, str) else None
    if not isinstance(details, dict):  # nearly always
        return classify_stop(raw, has_tool_calls=has_tool_calls)
    c, m, r = details.get("category"), details.get("explanation"), details.get("recommended_model")
    return classify_stop(
        raw,
        has_tool_calls=has_tool_calls,
        category=c if isinstance(c, str) else None,
        message=m if isinstance(m, str) else None,
        recommended_model=r if isinstance(r, str) else None,
        detail=details,
    )


def stop_to_wire(
    stop: StopInfo, stop_sequence: str | None, refusal_text: str | None, warnings: list[str],
    has_tools: bool = False,
) -> tuple[str, str | None, dict[str, Any] | None]:
    """(stop_reason, stop_sequence, stop_details) for an Anthropic client, from :data:`STOP_TABLE`
    (docs/mapping.md). Never null: a finished message carries a valid value."""
    wire = map_stop(STOP_TABLE, stop, has_tools, "Anthropic Messages", warnings)
    if wire.value == "refusal":
        cat = stop.category if stop.category in REFUSAL_CATEGORIES else None
        details: dict[str, Any] = {
            "type": "refusal",
            "category": cat,
            "explanation": refusal_text or stop.message,
        }
        if stop.recommended_model:
            details["recommended_model"] = stop.recommended_model
        return "refusal", None, details
    if wire.value == "end_turn" and stop.reason is StopReason.END_TURN and stop_sequence:
        return "stop_sequence", stop_sequence, None
    return wire.value, None, None


# ----------------------------------------------------------------------------- citations
def citation_to_neutral(c: dict[str, Any]) -> dict[str, Any]:
    t = c.get("type")
    n: dict[str, Any]
    if t == "web_search_result_location":
        n = {"type": "url", "url": c.get("url"), "title": c.get("title"), "cited_text": c.get("cited_text")}
    elif t == "search_result_location":
        n = {
            "type": "search_result_location",
            "url": c.get("source"),
            "title": c.get("title"),
            "cited_text": c.get("cited_text"),
        }
    else:
        n = {
            "type": t if isinstance(t, str) else "unknown",
            "title": c.get("document_title"),
            "cited_text": c.get("cited_text"),
            "file_id": c.get("file_id"),
        }
    out = {k: v for k, v in n.items() if v is not None}
    out["raw"] = c
    return out


def citation_from_neutral(n: dict[str, Any], *, allow_synthetic: bool) -> dict[str, Any] | None:
    """An Anthropic citation for a neutral one: the raw object when it is Anthropic's; a foreign
    URL citation becomes ``web_search_result_location`` (responses only: no encrypted_index)."""
    raw = n.get("raw")
    if isinstance(raw, dict) and raw.get("type") in CITATION_TYPES:
        return raw
    if allow_synthetic and n.get("type") == "url" and isinstance(n.get("url"), str):
        title = n.get("title")
        cited = n.get("cited_text")
        return {
            "type": "web_search_result_location",
            "url": n["url"],
            "title": title if isinstance(title, str) else None,
            "cited_text": cited if isinstance(cited, str) else "",
            "encrypted_index": "",
        }
    return None


# ============================================================================= codec facts
VENDOR = "anthropic"
ANTHROPIC_VERSION = "2023-06-01"

ENDPOINTS = Endpoints(generate="/messages", count_tokens="/messages/count_tokens")
FIELDS = RequestFields(stop="stop_sequences", volatile=("metadata", "service_tier"))

#: the fields ``/v1/messages/count_tokens`` takes (the rest of a generation request counts nothing)
_COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "output_config",
                 "cache_control", "speed")
#: a counting request has no output limit; its generation body needs one to be read
_COUNT_MAX_TOKENS = 1


def count_request(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    out = {k: body[k] for k in _COUNT_FIELDS if k in body}
    if model:
        out["model"] = model
    return out


def count_generation(body: dict[str, Any]) -> dict[str, Any]:
    return body if "max_tokens" in body else {**body, "max_tokens": _COUNT_MAX_TOKENS}


COUNTER = TokenCounter(request=count_request, generation=count_generation,
                       tokens=lambda a: token_count(a, "input_tokens"), answer=lambda n: {"input_tokens": n})
CAPABILITIES = Capabilities(custom_tools=False, interrupted_is_status=False)


def auth_headers(key: str, host: str) -> dict[str, str]:
    return {"x-api-key": key}


CREDENTIALS = Credentials(
    key_headers=("x-api-key", "authorization"),
    account_headers=("anthropic-organization-id",),
    vendor_headers=("anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access"),
    protocol_headers=(),
    client_markers=("anthropic-version", "x-api-key"),
    default_headers={"anthropic-version": ANTHROPIC_VERSION},
    auth_headers=auth_headers,
    vendor=VENDOR,
)

# kind -> error.type (an interrupted upstream is an api_error). request_too_large goes with HTTP 413
# only: Anthropic answers an oversized request 413 request_too_large, and its SDK picks the exception
# by the status (RequestTooLargeError), so a request_too_large kind under another status is invalid.
_ERROR_TYPE = {
    ErrorKind.INVALID_REQUEST: "invalid_request_error",
    ErrorKind.AUTHENTICATION: "authentication_error",
    ErrorKind.BILLING: "billing_error",
    ErrorKind.PERMISSION: "permission_error",
    ErrorKind.NOT_FOUND: "not_found_error",
    ErrorKind.REQUEST_TOO_LARGE: "invalid_request_error",
    ErrorKind.RATE_LIMIT: "rate_limit_error",
    ErrorKind.API_ERROR: "api_error",
    ErrorKind.TIMEOUT: "timeout_error",
    ErrorKind.OVERLOADED: "overloaded_error",
    ErrorKind.INTERRUPTED: "api_error",
}


def error_body(err: Error) -> dict[str, Any]:
    if client_status(err, ERRORS.statuses, ERRORS.foreign_statuses) == 413:
        etype = "request_too_large"
    else:
        etype = _ERROR_TYPE.get(err.kind, "api_error")
    return {"type": "error", "error": {"type": etype, "message": err.message}}


ERRORS = ErrorFacts(
    types={
        "invalid_request_error": ErrorKind.INVALID_REQUEST,
        "authentication_error": ErrorKind.AUTHENTICATION,
        "billing_error": ErrorKind.BILLING,
        "permission_error": ErrorKind.PERMISSION,
        "not_found_error": ErrorKind.NOT_FOUND,
        "request_too_large": ErrorKind.REQUEST_TOO_LARGE,
        "rate_limit_error": ErrorKind.RATE_LIMIT,
        "api_error": ErrorKind.API_ERROR,
        "timeout_error": ErrorKind.TIMEOUT,
        "overloaded_error": ErrorKind.OVERLOADED,
        "conflict_error": ErrorKind.INVALID_REQUEST,
    },
    codes={},
    statuses={
        ErrorKind.INVALID_REQUEST: 400,
        ErrorKind.AUTHENTICATION: 401,
        ErrorKind.BILLING: 402,
        ErrorKind.PERMISSION: 403,
        ErrorKind.NOT_FOUND: 404,
        ErrorKind.REQUEST_TOO_LARGE: 413,
        ErrorKind.RATE_LIMIT: 429,
        ErrorKind.API_ERROR: 500,
        ErrorKind.TIMEOUT: 504,
        ErrorKind.OVERLOADED: 529,
        ErrorKind.INTERRUPTED: 502,
    },
    foreign_statuses=frozenset({503}),  # overloaded is 529 here
    body=error_body,
)

#: neutral stop decision -> stop_reason (a filter's refusal is a refusal too). A finished
#: message always carries a valid value: where none fits, the closest, with a warning.
STOP_TABLE = check_stop_table({
    StopKey.END_TURN: WireStop("end_turn"),
    StopKey.TOOL_USE: WireStop("tool_use"),
    StopKey.MAX_OUTPUT: WireStop("max_tokens"),
    StopKey.CONTEXT_FULL: WireStop("model_context_window_exceeded"),
    StopKey.REFUSAL: WireStop("refusal"),
    StopKey.FILTERED: WireStop("refusal"),
    StopKey.PAUSED: WireStop("pause_turn"),
    StopKey.INTERRUPTED: WireStop("end_turn", exact=False),
    StopKey.REJECTED: WireStop("end_turn", exact=False),
    StopKey.OTHER: WireStop("end_turn", exact=False),
}, "Anthropic Messages")

#: stop_reason values -> reason (what this protocol writes, read back)
STOP_VALUES = {
    "end_turn": StopReason.END_TURN,
    "stop_sequence": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_OUTPUT,
    "model_context_window_exceeded": StopReason.CONTEXT_FULL,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSED,
}


_REQ_KEYS = frozenset({"system", "stop_sequences", "thinking", "top_k", "anthropic_version", "mcp_servers",
                       "container", "context_management"})
_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document", "image",
                     "server_tool_use", "web_search_tool_result", "search_result"})


def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    msgs = obj.get("messages")
    if not isinstance(msgs, list):
        return None
    if _REQ_KEYS & obj.keys():
        return (SNIFF_KEYS, 0)
    for i, m in enumerate(msgs):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for j, b in enumerate(content):
                t = b.get("type") if isinstance(b, dict) else None
                if isinstance(t, str) and t in _BLOCKS:
                    return (SNIFF_CONTENT, -(i * 1000 + j + 1))
    tools = obj.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        t0 = tools[0]
        if "function" not in t0 and t0.get("type") != "function" and ("input_schema" in t0 or "name" in t0):
            return (SNIFF_TOOLS, 0)
    if "max_tokens" in obj:
        return (SNIFF_HINT, 0)  # required by Anthropic, optional (and legacy) in Chat
    return None


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    if obj.get("type") in ("message", "error") or "stop_reason" in obj:
        return (SNIFF_DECISIVE, 0)
    return None


def sniff_stream(head: bytes) -> Evidence | None:
    if b"event: message_start" in head or b'"type":"message_start"' in head or b"event:message_start" in head:
        return (SNIFF_DECISIVE, 0)
    if b"event: error" in head or b"event: ping" in head:
        return (SNIFF_WEAK, 0)
    return None


def stream_observes(name: str | None, data: str) -> bool:
    """Pass-through: content deltas and pings carry no stop, usage, model or error fact (tool use is
    known from its block's start), so they are forwarded undecoded. The data's own type must agree
    with the event name: a compactly written content delta or ping; anything else is decoded."""
    if name == "content_block_delta":
        return '"type":"content_block_delta"' not in data
    if name == "ping":
        return '"type":"ping"' not in data
    return True


def is_error_body(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "error" or ("error" in obj and "content" not in obj)


def model_entry(mid: str, src: dict[str, Any] | None) -> dict[str, Any]:
    src = src or {}
    return {"type": "model", "id": mid, "display_name": src.get("display_name") or mid,
            "created_at": src.get("created_at") or "1970-01-01T00:00:00Z"}


def model_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"data": items, "has_more": False, "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None}
