"""Helpers shared by the Anthropic Messages request, response and stream codecs."""

from __future__ import annotations

import re
import uuid
from typing import Any

from ..neutral import Usage
from ..stop import StopInfo, StopReason, classify_stop

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
    return "msg_" + _FOREIGN_ID_PREFIX.sub("", src, count=1)


# ----------------------------------------------------------------------------- usage
def usage_from_wire(u: dict[str, Any]) -> Usage:
    det = u.get("output_tokens_details")
    return Usage(
        input=as_int(u.get("input_tokens")),
        cache_read=as_int(u.get("cache_read_input_tokens")),
        cache_write=as_int(u.get("cache_creation_input_tokens")),
        output=as_int(u.get("output_tokens")),
        reasoning=as_int(det.get("thinking_tokens")) if isinstance(det, dict) else None,
    )


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
    category = message = recommended = None
    detail = None
    if isinstance(details, dict):
        detail = details
        c = details.get("category")
        category = c if isinstance(c, str) else None
        m = details.get("explanation")
        message = m if isinstance(m, str) else None
        r = details.get("recommended_model")
        recommended = r if isinstance(r, str) else None
    return classify_stop(
        raw if isinstance(raw, str) else None,
        # end_turn with tool_use blocks reads as tool_use (raw keeps "end_turn"), as for every protocol
        has_tool_calls=has_tool_calls,
        category=category,
        message=message,
        recommended_model=recommended,
        detail=detail,
    )


_REASON_TO_WIRE = {
    StopReason.MAX_OUTPUT: "max_tokens",
    StopReason.CONTEXT_FULL: "model_context_window_exceeded",
    StopReason.PAUSED: "pause_turn",
    StopReason.TOOL_USE: "tool_use",
}


def stop_to_wire(
    stop: StopInfo, stop_sequence: str | None, refusal_text: str | None, warnings: list[str]
) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """(stop_reason, stop_sequence, stop_details) for an Anthropic client (seeds 000/003, §5.2)."""
    reason = stop.reason
    if reason is StopReason.REFUSAL:
        cat = stop.category if stop.category in REFUSAL_CATEGORIES else None
        details: dict[str, Any] = {
            "type": "refusal",
            "category": cat,
            "explanation": refusal_text or stop.message,
        }
        if stop.recommended_model:
            details["recommended_model"] = stop.recommended_model
        return "refusal", None, details
    wire = _REASON_TO_WIRE.get(reason)
    if wire is not None:
        return wire, None, None
    if reason is StopReason.END_TURN:
        if stop_sequence:
            return "stop_sequence", stop_sequence, None
        return "end_turn", None, None
    if reason is StopReason.INTERRUPTED:
        warn_once(
            warnings,
            f"upstream ended the response as interrupted ({stop.raw or stop.category}); "
            "sent to the Anthropic client as end_turn",
        )
        return "end_turn", None, None
    warn_once(
        warnings,
        f"upstream stop value {stop.raw!r} has no Anthropic equivalent; stop_reason sent as null",
    )
    return None, None, None


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
