"""Helpers shared by the Chat Completions request, response and stream code (private)."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from .. import reasoning as rz
from ..neutral import Reasoning, Usage, WebSearchTool
from ..stop import (
    GENERIC_CONTENT_FILTER_REFUSAL,
    StopInfo,
    StopKey,
    StopReason,
    WireStop,
    check_stop_table,
    classify_stop,
    map_stop,
)
from ._openai_common import credentials, error_facts
from .base import (
    SNIFF_CONTENT,
    SNIFF_DECISIVE,
    SNIFF_DEFAULT,
    SNIFF_DIALECT,
    SNIFF_KEYS,
    SNIFF_TOOLS,
    SNIFF_WEAK,
    Capabilities,
    Endpoints,
    Evidence,
    RequestFields,
)

PROTOCOL = "openai_chat_completions"

_REASONING_META = ("text", "summary", "redacted")


# ----------------------------------------------------------------------------- ids / time
#: other protocols' id prefixes, stripped from an upstream id
_FOREIGN_IDS = ("msg_", "resp_", "gen-")


_LOCATION_KEYS = ("city", "region", "country", "timezone")


def web_search_tool(o: dict[str, Any]) -> WebSearchTool:
    """The neutral web search tool for ``web_search_options`` (search models)."""
    loc = o.get("user_location")
    approx = loc.get("approximate") if isinstance(loc, dict) else None
    size = o.get("search_context_size")
    return WebSearchTool(
        user_location={k: approx[k] for k in _LOCATION_KEYS if isinstance(approx.get(k), str)}
        if isinstance(approx, dict) else None,
        context_size=size if isinstance(size, str) else None, raw=o)


def web_search_options(ws: WebSearchTool, model: str | None, warnings: list[str]) -> dict[str, Any] | None:
    """``web_search_options`` for another protocol's web search tool. Chat runs web search only on
    its search models (e.g. gpt-4o-search-preview); any other model answers 400 to the field."""
    if "search" not in (model or ""):
        warnings.append("tools: web search dropped: on Chat Completions only search models (…-search-…) "
                        "search the web")
        return None
    out: dict[str, Any] = {}
    if ws.context_size in ("low", "medium", "high"):
        out["search_context_size"] = ws.context_size
    if ws.user_location:
        out["user_location"] = {"type": "approximate", "approximate": {
            k: v for k, v in ws.user_location.items() if k in _LOCATION_KEYS}}
    dropped = [k for k, v in (("max_uses", ws.max_uses), ("allowed_domains", ws.allowed_domains),
                              ("blocked_domains", ws.blocked_domains)) if v]
    if dropped:
        warnings.append(f"web search {', '.join(dropped)} dropped: Chat web_search_options has no such option")
    return out


def chat_id(src: str | None) -> str:
    """A ``chatcmpl-…`` id derived from the upstream id (foreign prefixes stripped)."""
    if not src:
        return "chatcmpl-" + uuid.uuid4().hex[:24]
    if src.startswith("chatcmpl-"):
        return src
    if src.startswith(_FOREIGN_IDS):  # (one call tests all: an id with none of them pays once)
        for p in _FOREIGN_IDS:
            if src.startswith(p):
                src = src[len(p):]
                break
    return "chatcmpl-" + src


def now() -> int:
    return int(time.time())


# ----------------------------------------------------------------------------- ints
def as_int(v: Any) -> int | None:
    """A count: an integer, or a number truncated; a bool or anything else is none."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v)


# ----------------------------------------------------------------------------- usage
def decode_usage(u: Any) -> Usage | None:
    """Chat usage (prompt/completion or input/output naming) -> neutral usage (input uncached)."""
    if not isinstance(u, dict):
        return None
    prompt = as_int(u.get("prompt_tokens"))
    if prompt is None:
        prompt = as_int(u.get("input_tokens"))
    completion = as_int(u.get("completion_tokens"))
    if completion is None:
        completion = as_int(u.get("output_tokens"))
    pd = u.get("prompt_tokens_details")
    if not isinstance(pd, dict):
        pd = u.get("input_tokens_details")
    cached = cache_write = None
    if isinstance(pd, dict):
        cached = as_int(pd.get("cached_tokens"))
        cache_write = as_int(pd.get("cache_write_tokens"))
    if cached is None:
        cached = as_int(u.get("prompt_cache_hit_tokens"))  # DeepSeek
    cd = u.get("completion_tokens_details")
    if not isinstance(cd, dict):
        cd = u.get("output_tokens_details")
    if isinstance(cd, dict):
        reasoning = as_int(cd.get("reasoning_tokens"))
    else:
        reasoning = None
    if prompt is None and completion is None:
        return None
    output = completion
    # xAI counts reasoning outside completion_tokens (total = prompt + completion + reasoning);
    # neutral reasoning is part of output.
    if reasoning and completion is not None and prompt is not None:
        total = as_int(u.get("total_tokens"))
        if total is not None and total == prompt + completion + reasoning:
            output = completion + reasoning
    inp = None
    if prompt is not None:
        if cache_write and (cached or 0) + cache_write > prompt:
            # inconsistent report (OpenRouter/Gemini sends cached == cache_write): keep the total
            cache_write = None
        inp = prompt - (cached or 0) - (cache_write or 0)
        if inp < 0:
            inp = 0
    return Usage(inp, cached, cache_write, output, reasoning)


def encode_usage(usage: Usage) -> dict[str, Any]:
    prompt = usage.input_total or 0
    out = usage.output or 0
    ptd: dict[str, int] = {"cached_tokens": usage.cache_read or 0}
    if usage.cache_write:
        ptd["cache_write_tokens"] = usage.cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": ptd,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning or 0},
    }


# ----------------------------------------------------------------------------- reasoning
def unpacked(payload: dict[str, Any]) -> Reasoning:
    """A Reasoning part from one of our continuity payloads."""
    text = payload.get("text")
    summary = payload.get("summary")
    return Reasoning(
        text=text if isinstance(text, str) else "",
        summary=summary if isinstance(summary, list) else None,
        redacted=bool(payload.get("redacted", False)),
        opaque={k: v for k, v in payload.items() if k not in _REASONING_META},
    )


def details_text(details: list[Any]) -> str:
    """Visible text of OpenRouter ``reasoning_details`` (text / summary items)."""
    out: list[str] = []
    for d in details:
        if isinstance(d, dict):
            t = d.get("text")
            if not isinstance(t, str):
                t = d.get("summary")
            if isinstance(t, str):
                out.append(t)
    return "".join(out)


_CONCAT_KEYS = frozenset({"text", "summary", "data", "signature"})


def merge_details(acc: list[dict[str, Any]], items: list[Any]) -> None:
    """Merge streamed ``reasoning_details`` fragments (keyed by their ``index``)."""
    for it in items:
        if not isinstance(it, dict):
            continue
        idx = it.get("index")
        target = None
        if isinstance(idx, int):
            for a in acc:
                if a.get("index") == idx and a.get("type") == it.get("type", a.get("type")):
                    target = a
                    break
        if target is None:
            acc.append(dict(it))
            continue
        for k, v in it.items():
            if v is None:
                continue
            cur = target.get(k)
            if k in _CONCAT_KEYS and isinstance(v, str) and isinstance(cur, str):
                target[k] = cur + v
            else:
                target[k] = v


def reasoning_parts(text: Any, field: str, details: Any) -> list[Reasoning]:
    """Chat ``reasoning_content`` / ``reasoning`` (+ ``reasoning_details``) -> Reasoning parts.

    Envelopes of ours are unpacked (the issuer's payload comes back); plain text is chat-issued.
    """
    out: list[Reasoning] = []
    if isinstance(text, str) and text:
        for piece, payload in rz.split_chat_reasoning(text):
            if payload is None:
                out.append(Reasoning(text=piece, opaque={"protocol": PROTOCOL, "field": field}))
            else:
                out.append(unpacked(payload))
    if isinstance(details, list) and details:
        for r in reversed(out):
            if r.opaque is not None and r.opaque.get("protocol") == PROTOCOL:
                r.opaque["details"] = details
                break
        else:
            out.append(Reasoning(text=details_text(details),
                                 opaque={"protocol": PROTOCOL, "field": field, "details": details}))
    return out


def thinking_text(inner: Any) -> str:
    """Text of a Mistral ``{"type": "thinking", "thinking": [...]}`` content part."""
    if isinstance(inner, str):
        return inner
    if not isinstance(inner, list):
        return ""
    return "".join(x["text"] for x in inner if isinstance(x, dict) and isinstance(x.get("text"), str))


def envelope_payload(part: Reasoning, text: str) -> dict[str, Any]:
    payload = dict(part.opaque or {})
    payload["text"] = text
    payload["summary"] = part.summary
    payload["redacted"] = part.redacted
    return payload


# ----------------------------------------------------------------------------- stop
def build_stop(raw: str | None, *, refusal: str | None, produced: bool, has_tools: bool,
               detail: dict[str, Any] | None) -> StopInfo:
    """Chat finish facts -> StopInfo."""
    if refusal:
        # refusal outranks finish_reason; raw stays the wire value
        return StopInfo(reason=StopReason.REFUSAL, raw=raw, category="output-refusal", message=refusal,
                        detail=detail or {})
    info = classify_stop(raw, has_tool_calls=has_tools, detail=detail)
    if info.reason is StopReason.REFUSAL:
        # nothing produced: the generic refusal text (category output-refusal); otherwise the vocabulary's
        # rule (no provider category -> the raw value: content_filter, sensitive, ...)
        return StopInfo(reason=StopReason.REFUSAL, raw=raw,
                        category=info.category if produced else "output-refusal",
                        message=None if produced else GENERIC_CONTENT_FILTER_REFUSAL,
                        detail=info.detail)
    return info


def finish_reason(stop: StopInfo, has_tools: bool, warnings: list[str]) -> str:
    """Neutral stop -> Chat finish_reason, from :data:`STOP_TABLE`."""
    if stop.reason is StopReason.TOOL_USE and not has_tools:
        # finish_reason tool_calls without tool_calls is no valid Chat completion
        warnings.append("stop reason tool_use without any tool call: sent as finish_reason stop")
        return "stop"
    return map_stop(STOP_TABLE, stop, has_tools, "Chat Completions", warnings).value


# ============================================================================= codec facts
ENDPOINTS = Endpoints(generate="/chat/completions")
FIELDS = RequestFields(stop="stop", stream_options="stream_options",
                       volatile=("metadata", "user", "safety_identifier", "prompt_cache_key",
                                 "prompt_cache_retention", "store", "service_tier"))
CREDENTIALS = credentials(protocol_headers=("openai-beta",))
ERRORS = error_facts()
CAPABILITIES = Capabilities(custom_tools=True, interrupted_is_status=False)

#: neutral stop decision -> finish_reason (a stated refusal is "stop")
STOP_TABLE = check_stop_table({
    StopKey.END_TURN: WireStop("stop"),
    StopKey.TOOL_USE: WireStop("tool_calls"),
    StopKey.MAX_OUTPUT: WireStop("length"),
    StopKey.CONTEXT_FULL: WireStop("length"),
    StopKey.REFUSAL: WireStop("stop"),
    StopKey.FILTERED: WireStop("content_filter"),
    StopKey.PAUSED: WireStop("stop", exact=False),
    StopKey.INTERRUPTED: WireStop("stop", exact=False),
    StopKey.REJECTED: WireStop("stop", exact=False),
    StopKey.OTHER: WireStop("stop", exact=False),
}, "Chat Completions")

#: finish_reason values -> reason (what this protocol writes, read back)
STOP_VALUES = {
    "stop": StopReason.END_TURN,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "length": StopReason.MAX_OUTPUT,
    "content_filter": StopReason.REFUSAL,
}


_REQ_KEYS = frozenset({"max_completion_tokens", "n", "response_format", "stream_options", "logprobs",
                       "frequency_penalty", "presence_penalty", "logit_bias", "seed", "functions",
                       "reasoning_effort", "modalities", "audio", "prediction", "web_search_options"})
_ROLES = frozenset({"system", "developer", "tool", "function"})
_BLOCKS = frozenset({"image_url", "input_audio", "file", "refusal"})


def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    msgs = obj.get("messages")
    if not isinstance(msgs, list):
        return None
    th = obj.get("thinking")
    if isinstance(th, dict) and not (th.get("type") == "enabled" and "budget_tokens" in th
                                     or th.get("type") in ("adaptive", "disabled")):
        return (SNIFF_DIALECT, 0)  # OpenAI-compatible providers' own "thinking" switches (Z.ai, ...)
    if _REQ_KEYS & obj.keys():
        return (SNIFF_KEYS - 1, 0)
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if (isinstance(role, str) and role in _ROLES) or "tool_calls" in m:
            return (SNIFF_CONTENT, -i * 1000)
        content = m.get("content")
        if isinstance(content, list):
            for j, b in enumerate(content):
                t = b.get("type") if isinstance(b, dict) else None
                if isinstance(t, str) and (t in _BLOCKS or t.endswith("_url")):
                    return (SNIFF_CONTENT, -(i * 1000 + j + 1))
    tools = obj.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict):
        t0 = tools[0]
        if "function" in t0 or t0.get("type") == "function":
            return (SNIFF_TOOLS, 0)
    return (SNIFF_DEFAULT, 0)  # plain text messages: Chat unless Anthropic's required max_tokens


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    if "choices" in obj or obj.get("object") in ("chat.completion", "chat.completion.chunk"):
        return (SNIFF_DECISIVE, 0)
    if "error" in obj:
        return (SNIFF_WEAK, 0)  # an OpenAI-shaped error; any OpenAI protocol reads it the same
    return None


#: what a chunk may carry besides plain text: each of these is decoded (stop, usage, tools, refusal,
#: reasoning, citations, errors, several choices, a role change); one search per chunk
_CHUNK_FACTS = re.compile("|".join(re.escape(fact) for fact in (
    '"finish_reason":"', '"usage":{', '"tool_calls"', '"function_call"', '"refusal"', '"reasoning',
    '"annotations"', '"error"', '"role"', '"index":1', '"audio"')))


def stream_observes(name: str | None, data: str) -> bool:
    """Pass-through: a chunk whose delta is only more text (no finish, usage, tool call, refusal,
    reasoning, citation, error or other choice) carries no observed fact, so it is forwarded undecoded
    once the first content passed. Anything else, or a chunk written otherwise, is decoded."""
    if '"delta":{"content":"' not in data or '"finish_reason":null' not in data:
        return True
    return _CHUNK_FACTS.search(data) is not None


def sniff_stream(head: bytes) -> Evidence | None:
    if b"chat.completion.chunk" in head or b'"choices"' in head:
        return (SNIFF_DECISIVE - 2, 0)
    return None


def is_error_body(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "error" or ("error" in obj and not obj.get("choices"))

