"""PROTOCOL KNOWLEDGE of the mitmproxy side, gathered in one place.

Everything outside proxai_core that depends on which LLM protocol a flow speaks lives here (or in
routing.py: endpoint paths and the request-body sniff of the routing layer): endpoint path suffixes,
body and stream shapes used to guess a protocol, display names, the headers that tell an Anthropic
client, model-list formats, the last-resort error frame. Each item is marked ``PROTOCOL:`` so that it
can be replaced by a call to the core's codec registry (``proxai_core.codecs``) without touching
the addons; each item names the registry call that replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxai_core import Protocol

__all__ = [
    "DEFAULT_PROTOCOL",
    "REPLAY_MISS_PROTOCOL",
    "SHORT",
    "TITLES",
    "convert_models",
    "counts_tokens",
    "fallback_error_frame",
    "model_list_client",
    "is_error_body",
    "looks_like_response",
    "json_or_none",
    "looks_like_sse",
    "protocol_from_path",
    "request_model",
    "request_stream",
    "set_request_model",
    "sniff_protocol",
    "sniff_sse",
]

#: PROTOCOL: the protocol of a native error for a client whose protocol is unknown
#: (registry: the first of ``all_codecs()``)
DEFAULT_PROTOCOL = Protocol.CHAT

#: PROTOCOL: the shape of the replay server's miss body (replay.miss_body writes it)
REPLAY_MISS_PROTOCOL = Protocol.ANTHROPIC

#: PROTOCOL: short names for tables (registry: ``get(p).name``)
SHORT = {
    Protocol.CHAT: "chat",
    Protocol.RESPONSES: "responses",
    Protocol.ANTHROPIC: "anthropic",
}

#: PROTOCOL: display names for the contentview (registry: ``get(p).label``)
TITLES = {
    Protocol.CHAT: "OpenAI Chat Completions",
    Protocol.RESPONSES: "OpenAI Responses",
    Protocol.ANTHROPIC: "Anthropic Messages",
}


# PROTOCOL: endpoint path suffixes (registry: ``match_path(path)``, kind ``generate``)
def protocol_from_path(path: str | None) -> Protocol | None:
    """The protocol an LLM endpoint path speaks (``/v1/chat/completions``, OpenRouter
    ``/api/v1/...``, Azure ``/openai/deployments/x/chat/completions?api-version=...``,
    ``/v1/responses``, ``/v1/messages``); None for anything else (``/messages/count_tokens``,
    ``/models``, ``/responses/{id}``...)."""
    if not path:
        return None
    p = path.split("?", 1)[0].split("#", 1)[0]
    if "://" in p:
        p = "/" + p.split("://", 1)[1].partition("/")[2]
    p = p.rstrip("/")
    if p.endswith("/chat/completions"):
        return Protocol.CHAT
    if p.endswith("/responses"):
        return Protocol.RESPONSES
    if p.endswith("/messages"):
        return Protocol.ANTHROPIC
    return None


def looks_like_sse(data: bytes, content_type: str | None = None) -> bool:
    """A server-sent-events body: the content type says so (and the body is not plain JSON), or the
    body starts like one."""
    head = data[:200].lstrip()
    if head.startswith((b"{", b"[")):
        return False
    if content_type and "event-stream" in content_type.lower():
        return True
    return head.startswith((b"event:", b"data:", b":", b"id:", b"retry:"))


def json_or_none(data: bytes | str | None) -> Any:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if not data.strip():
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


# PROTOCOL: request, response and stream shapes (registry: ``sniff_request`` / ``sniff_response`` /
# ``sniff_stream`` / ``sniff``; ``is_error_body`` is ``get(p).is_error_body``)
_CHAT_REQ_KEYS = {"max_completion_tokens", "n", "response_format", "stream_options", "logprobs",
                  "frequency_penalty", "presence_penalty", "logit_bias", "seed", "functions",
                  "reasoning_effort", "modalities", "audio", "prediction", "web_search_options"}
_ANTHROPIC_REQ_KEYS = {"system", "stop_sequences", "thinking", "top_k", "anthropic_version", "mcp_servers",
                       "container", "context_management"}
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document", "image",
                     "server_tool_use", "web_search_tool_result", "search_result"}
_CHAT_BLOCKS = {"image_url", "input_audio", "file", "refusal"}


def _sniff_request(obj: dict[str, Any]) -> Protocol | None:
    if "input" in obj or "instructions" in obj or "previous_response_id" in obj or "conversation" in obj:
        return Protocol.RESPONSES
    msgs = obj.get("messages")
    if not isinstance(msgs, list):
        return None
    th = obj.get("thinking")
    if isinstance(th, dict) and not (th.get("type") == "enabled" and "budget_tokens" in th
                                     or th.get("type") in ("adaptive", "disabled")):
        return Protocol.CHAT  # OpenAI-compatible providers' own "thinking" switches (Z.ai, ...)
    if _ANTHROPIC_REQ_KEYS & obj.keys():
        return Protocol.ANTHROPIC
    if _CHAT_REQ_KEYS & obj.keys():
        return Protocol.CHAT
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("system", "developer", "tool", "function") or "tool_calls" in m:
            return Protocol.CHAT
        content = m.get("content")
        if isinstance(content, list):
            for b in content:
                t = b.get("type") if isinstance(b, dict) else None
                if t in _ANTHROPIC_BLOCKS:
                    return Protocol.ANTHROPIC
                if t in _CHAT_BLOCKS or (isinstance(t, str) and t.endswith("_url")):
                    return Protocol.CHAT
    tools = obj.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        t0 = tools[0]
        if "function" in t0 or t0.get("type") == "function":
            return Protocol.CHAT
        if "input_schema" in t0 or "name" in t0:
            return Protocol.ANTHROPIC
    # ambiguous (plain text messages): max_tokens is required by Anthropic, optional (and legacy) in Chat
    return Protocol.ANTHROPIC if "max_tokens" in obj else Protocol.CHAT


def _sniff_response(obj: dict[str, Any]) -> Protocol | None:
    if "choices" in obj or obj.get("object") in ("chat.completion", "chat.completion.chunk"):
        return Protocol.CHAT
    if obj.get("object") == "response" or ("output" in obj and "status" in obj):
        return Protocol.RESPONSES
    if obj.get("type") in ("message", "error") or "stop_reason" in obj:
        return Protocol.ANTHROPIC
    if "error" in obj:
        return Protocol.CHAT  # an OpenAI-shaped error; any OpenAI protocol reads it the same
    return None


def sniff_sse(data: bytes) -> Protocol | None:
    head = data[:4000]
    if b"event: message_start" in head or b'"type":"message_start"' in head or b"event:message_start" in head:
        return Protocol.ANTHROPIC
    if b'"type":"response.' in head or b"event: response." in head or b'"type": "response.' in head:
        return Protocol.RESPONSES
    if b"chat.completion.chunk" in head or b'"choices"' in head:
        return Protocol.CHAT
    if b"event: error" in head or b"event: ping" in head:
        return Protocol.ANTHROPIC
    return None


def sniff_protocol(data: bytes | dict[str, Any] | None, *, request: bool | None = None) -> Protocol | None:
    """Guess the protocol of a body from its shape. ``request`` True/False restricts the guess to a
    request / a response; None tries both (response shapes first)."""
    if data is None:
        return None
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data)
        if looks_like_sse(data):
            return None if request else sniff_sse(data)
        obj = json_or_none(data)
    else:
        obj = data
    if not isinstance(obj, dict):
        return None
    if request is True:
        return _sniff_request(obj)
    if request is False:
        return _sniff_response(obj)
    looks_request = ("messages" in obj or "input" in obj) and "model" in obj and not (
        "choices" in obj or "output" in obj or "stop_reason" in obj)
    return _sniff_request(obj) if looks_request else (_sniff_response(obj) or _sniff_request(obj))


def is_error_body(obj: Any, protocol: Protocol | None) -> bool:
    """An HTTP error body (any shape), as opposed to a model response."""
    if not isinstance(obj, dict):
        return True
    if obj.get("type") == "error":
        return True
    if protocol is Protocol.ANTHROPIC:
        return "error" in obj and "content" not in obj
    if protocol is Protocol.CHAT or protocol is None:
        return "error" in obj and not obj.get("choices")
    return "error" in obj and "output" not in obj




# ----------------------------------------------------------------------------- request fields
# PROTOCOL: where a request keeps its model and its stream flag (registry: ``get(p).fields``); the
# same top-level keys in the three protocols served today
def request_model(body: Any) -> str | None:
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def request_stream(body: Any) -> bool:
    return bool(body.get("stream")) if isinstance(body, dict) else False


def set_request_model(body: dict[str, Any], model: str) -> None:
    body["model"] = model


def looks_like_response(obj: dict[str, Any]) -> bool:
    """PROTOCOL: a stored JSON body that is a response or an error, not a request (registry:
    ``sniff_response(obj)`` / ``is_error_body``)."""
    return any(k in obj for k in ("choices", "output", "stop_reason", "error")) or obj.get("type") in (
        "message", "error") or obj.get("object") in ("response", "chat.completion")


# ----------------------------------------------------------------------------- clients and formats
def model_list_client(headers: Mapping[str, str]) -> Protocol | None:
    """PROTOCOL: which format a model-list request wants (both vendors serve ``GET /v1/models``):
    Anthropic's when its headers are present, else None (OpenAI's). Registry: ``client_of_headers``."""
    return Protocol.ANTHROPIC if "anthropic-version" in headers or "x-api-key" in headers else None


def counts_tokens(protocol: Protocol) -> bool:
    """PROTOCOL: the protocol has a token counting endpoint (registry: ``get(p).endpoints.count_tokens``)."""
    return protocol is Protocol.ANTHROPIC


def fallback_error_frame(protocol: Protocol, message: str) -> bytes:
    """PROTOCOL: the client's native SSE error frame written by hand, when even the codec fails
    (registry: ``get(p).error_frame`` is the normal path)."""
    if protocol is Protocol.ANTHROPIC:
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    err = {"message": message, "type": "server_error", "param": None, "code": "server_error"}
    if protocol is Protocol.RESPONSES:
        body = {"type": "error", "code": "server_error", "message": message, "param": None,
                "sequence_number": 0, "error": err}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    return b"data: " + orjson.dumps({"error": err}) + b"\n\n"


def convert_models(obj: Any, kind: str, client: Protocol | None, client_names: list[str],
                   requested: str | None) -> dict | None:
    """PROTOCOL: a model list (or one model) from the upstream's format into the client's
    (:func:`model_list_client`), with ``client_names`` (the route's model map) added to the list.
    Registry: ``get(client).model_entry`` / ``model_list``."""
    if not isinstance(obj, dict):
        return None
    anthropic_client = client is Protocol.ANTHROPIC

    def one(mid: str, src: dict | None = None) -> dict:
        src = src or {}
        if anthropic_client:
            return {"type": "model", "id": mid, "display_name": src.get("display_name") or mid,
                    "created_at": src.get("created_at") or "1970-01-01T00:00:00Z"}
        created = src.get("created")
        return {"id": mid, "object": "model", "created": created if isinstance(created, int) else 0,
                "owned_by": src.get("owned_by") or "proxai"}

    if kind == "model":
        return one(requested or str(obj.get("id", "")), obj)
    data = obj.get("data")
    if not isinstance(data, list):
        return None
    items: list[dict] = []
    seen: set[str] = set()
    for name in client_names:
        if name not in seen:
            seen.add(name)
            items.append(one(name))
    for m in data:
        if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"] not in seen:
            seen.add(m["id"])
            items.append(one(m["id"], m))
    if anthropic_client:
        return {"data": items, "has_more": False, "first_id": items[0]["id"] if items else None,
                "last_id": items[-1]["id"] if items else None}
    return {"object": "list", "data": items}
