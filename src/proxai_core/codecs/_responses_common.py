"""Helpers shared by the OpenAI Responses request, response and stream codecs (private)."""

from __future__ import annotations

import re
import uuid
from typing import Any

from ..errors import TranslationError, parse_error
from ..neutral import Error, ErrorKind, Usage
from ..stop import (
    GENERIC_CONTENT_FILTER_REFUSAL,
    StopInfo,
    StopKey,
    StopReason,
    WireStop,
    check_stop_table,
    classify_stop,
    is_filter_refusal,
    map_stop,
)
from ._openai_common import credentials, error_body, error_facts
from ._request_common import count, token_count
from .base import SNIFF_DECISIVE, Capabilities, Endpoints, Evidence, RequestFields, TokenCounter

PROTOCOL = "openai_responses"

#: Refusal sentence for a model refusal (Anthropic ``refusal`` without an explanation).
GENERIC_MODEL_REFUSAL = "The model declined to respond to this request."

# Foreign id prefixes stripped before minting our own ids from a source id.
_PREFIXES = ("resp_", "msg_", "chatcmpl-", "chatcmpl_", "srvtoolu_", "toolu_", "call_", "fc_", "ctc_",
             "rs_", "gen-")
# (no prefix is the start of another: at most one matches; one C call finds it)
_PREFIX = re.compile("|".join(map(re.escape, _PREFIXES)))


def fail(path: str, why: str) -> None:
    raise TranslationError(f"{path}: {why}", field=path)


def strip_prefix(s: str) -> str:
    m = _PREFIX.match(s)
    return (s[m.end():] or s) if m is not None else s


def id_base(src_id: str | None) -> str:
    """The stem all ids of one response derive from (deterministic for a given source id)."""
    if isinstance(src_id, str) and src_id:
        return strip_prefix(src_id)
    return uuid.uuid4().hex


def tool_item_id(call_id: str, kind: str, item_id: str | None) -> str:
    prefix = "ctc_" if kind == "custom" else "fc_"
    if item_id and item_id.startswith(prefix):
        return item_id
    return prefix + strip_prefix(call_id or uuid.uuid4().hex)


# ----------------------------------------------------------------------------- data URLs
def parse_data_url(url: str) -> tuple[str | None, str] | None:
    """``data:<mt>[;params];base64,<data>`` -> (media type, base64 data); None if not such a URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    mt = head[:-7].split(";", 1)[0].strip()
    return (mt or None), data


def data_url(media_type: str | None, data: str) -> str:
    return f"data:{media_type or 'application/octet-stream'};base64,{data}"


_FILE_EXTENSIONS = {
    "application/pdf": "pdf",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/csv": "csv",
    "text/html": "html",
    "application/json": "json",
}


def default_filename(media_type: str | None) -> str:
    return "document." + _FILE_EXTENSIONS.get(media_type or "", "bin")


# ----------------------------------------------------------------------------- citations
ANNOTATION_TYPES = frozenset({"url_citation", "file_citation", "container_file_citation", "file_path"})


def annotations_to_citations(anns: Any) -> list[dict[str, Any]] | None:
    if not isinstance(anns, list) or not anns:
        return None
    out: list[dict[str, Any]] = []
    for a in anns:
        if not isinstance(a, dict):
            continue
        t = a.get("type")
        if t == "url_citation":
            c = {"type": "url", "url": a.get("url"), "title": a.get("title"),
                 "start": a.get("start_index"), "end": a.get("end_index"), "raw": a}
        elif t in ("file_citation", "container_file_citation", "file_path"):
            c = {"type": "file", "file_id": a.get("file_id"), "filename": a.get("filename"), "raw": a}
            if "index" in a:
                c["start"] = a.get("index")
            if "start_index" in a:
                c["start"] = a.get("start_index")
                c["end"] = a.get("end_index")
        else:
            c = {"type": str(t), "raw": a}
        out.append(c)
    return out or None


def _raw_annotation(raw: Any) -> dict[str, Any] | None:
    """A citation's raw object when it is a valid Responses annotation (not Chat's nested shape)."""
    if not isinstance(raw, dict):
        return None
    t = raw.get("type")
    if t == "url_citation":
        ok = isinstance(raw.get("url"), str) and isinstance(raw.get("start_index"), int)
    elif t == "file_citation" or t == "file_path":
        ok = isinstance(raw.get("file_id"), str) and isinstance(raw.get("index"), int)
    elif t == "container_file_citation":
        ok = isinstance(raw.get("file_id"), str) and isinstance(raw.get("container_id"), str)
    else:
        ok = False
    return raw if ok else None


def citations_to_annotations(cits: list[dict[str, Any]] | None, text: str,
                             warnings: list[str] | None) -> list[dict[str, Any]]:
    if not cits:
        return []
    out: list[dict[str, Any]] = []
    dropped = 0
    for c in cits:
        if not isinstance(c, dict):
            continue
        raw = _raw_annotation(c.get("raw"))
        if raw is not None:
            out.append(raw)
            continue
        t = c.get("type")
        url = c.get("url")
        if t == "url" and isinstance(url, str):
            start = c.get("start")
            end = c.get("end")
            title = c.get("title")
            out.append({
                "type": "url_citation",
                "url": url,
                "title": title if isinstance(title, str) else url,
                "start_index": start if isinstance(start, int) else 0,
                "end_index": end if isinstance(end, int) else len(text),
            })
        elif t == "file" and isinstance(c.get("file_id"), str):
            start = c.get("start")
            fn = c.get("filename")
            out.append({"type": "file_citation", "file_id": c["file_id"],
                        "filename": fn if isinstance(fn, str) else "",
                        "index": start if isinstance(start, int) else 0})
        else:
            dropped += 1
    if dropped and warnings is not None:
        warnings.append(f"{dropped} citation(s) without a URL or file id dropped (no Responses annotation "
                        "type carries them)")
    return out


# ----------------------------------------------------------------------------- usage
def decode_usage(u: Any) -> Usage | None:
    if not isinstance(u, dict):
        return None
    total = count(u.get("input_tokens"))
    det = u.get("input_tokens_details")
    if not isinstance(det, dict):
        det = {}
    cached = count(det.get("cached_tokens"))
    cw = count(det.get("cache_write_tokens"))
    odet = u.get("output_tokens_details")
    inp = None
    if total is not None:
        inp = total - (cached or 0) - (cw or 0)
        if inp < 0:
            inp = 0
    return Usage(input=inp, cache_read=cached, cache_write=cw, output=count(u.get("output_tokens")),
                 reasoning=count(odet.get("reasoning_tokens")) if isinstance(odet, dict) else None)


def encode_usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None:
        return None
    inp = u.input_total or 0
    out = u.output or 0
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": u.cache_read or 0, "cache_write_tokens": u.cache_write or 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": u.reasoning or 0},
        "total_tokens": inp + out,
    }


# ----------------------------------------------------------------------------- stop (decode)
# Responses error.code values that are a client/policy problem rather than a server fault.
_CODE_TYPE = {
    "bio_policy": "invalid_request_error",
    "image_content_policy_violation": "invalid_request_error",
    "data_residency_mismatch": "invalid_request_error",
    "empty_image_file": "invalid_request_error",
    "failed_to_download_image": "invalid_request_error",
    "image_file_not_found": "invalid_request_error",
    "image_file_too_large": "invalid_request_error",
    "image_parse_error": "invalid_request_error",
    "image_too_large": "invalid_request_error",
    "image_too_small": "invalid_request_error",
    "unsupported_image_media_type": "invalid_request_error",
    "vector_store_timeout": "timeout_error",
    "insufficient_quota": "insufficient_quota",
    "server_error": "server_error",
}


def response_error(err: Any) -> Error:
    """A Responses ``error`` object ({code, message}) of a failed response -> neutral Error."""
    if not isinstance(err, dict):
        return Error(kind=ErrorKind.API_ERROR, message="upstream response failed without an error object",
                     status=500, code="server_error", raw=err)
    code = err.get("code")
    etype = err.get("type")
    if not isinstance(etype, str):
        etype = _CODE_TYPE.get(code) if isinstance(code, str) else None
    body = {"error": {"type": etype, "code": code, "message": err.get("message"), "param": err.get("param")}}
    e = parse_error(None, body)
    e.raw = err
    return e


def stop_from_status(status: Any, incomplete_details: Any, error: Any, *, has_tools: bool,
                     refusal: str | None, produced: bool, warnings: list[str]) -> StopInfo:
    """Seed 000 (Responses status -> stop) plus the refusal-outranks-finish rule."""
    reason = incomplete_details.get("reason") if isinstance(incomplete_details, dict) else None
    detail: dict[str, Any] = {"status": status}
    if incomplete_details is not None:
        detail["incomplete_details"] = incomplete_details
    if status == "incomplete":
        if reason == "content_filter":
            msg = refusal if refusal else (None if produced else GENERIC_CONTENT_FILTER_REFUSAL)
            # nothing produced: the generic refusal text, category output-refusal (as for Chat)
            cat = "output-refusal" if (refusal or not produced) else None
            return classify_stop("content_filter", category=cat, message=msg, detail=detail)
        if refusal is not None:
            return StopInfo(StopReason.REFUSAL, raw=reason if isinstance(reason, str) else "incomplete",
                            category="output-refusal", message=refusal, detail=detail)
        if not isinstance(reason, str):
            warnings.append("incomplete without details read as max_output_tokens")
            return StopInfo(StopReason.MAX_OUTPUT, raw="incomplete", detail=detail)
        info = classify_stop(reason, detail=detail)
        if info.reason is StopReason.OTHER:
            warnings.append(f"incomplete with unknown reason {reason!r}: stop reason 'other'")
        return info
    if status == "failed":
        code = error.get("code") if isinstance(error, dict) else None
        msg = error.get("message") if isinstance(error, dict) else None
        if error is not None:
            detail["error"] = error
        return classify_stop("failed", category=code if isinstance(code, str) else None,
                             message=msg if isinstance(msg, str) else None, detail=detail)
    if status == "cancelled":
        return classify_stop("cancelled", detail=detail)
    if status is None or status == "completed":
        if refusal is not None:
            return StopInfo(StopReason.REFUSAL, raw=status or "completed", category="output-refusal",
                            message=refusal, detail=detail)
        return classify_stop(status, has_tool_calls=has_tools, detail=detail if status else None)
    # queued / in_progress / unknown: not a terminal state
    warnings.append(f"response status {status!r} is not terminal: stop reason 'other'")
    return classify_stop(str(status), detail=detail)


# ----------------------------------------------------------------------------- stop (encode)
def refusal_fallback(stop: StopInfo) -> str:
    if stop.message:
        return stop.message
    return GENERIC_CONTENT_FILTER_REFUSAL if is_filter_refusal(stop) else GENERIC_MODEL_REFUSAL


_INCOMPLETE_MAX = {"reason": "max_output_tokens"}
_INCOMPLETE_FILTER = {"reason": "content_filter"}


def terminal_status(stop: StopInfo | None, warnings: list[str]
                    ) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
    """(status, incomplete_details, error) for the client's Responses object, from
    :data:`STOP_TABLE` (docs/mapping.md)."""
    if stop is None:
        return "completed", None, None
    wire = map_stop(STOP_TABLE, stop, False, "Responses", warnings)
    if wire.value == "incomplete":
        return "incomplete", {"reason": wire.detail}, None
    if wire.value == "failed":
        if (stop.raw or "").lower() == "cancelled":  # the upstream's own cancelled status
            return "cancelled", None, None
        msg = stop.message or f"upstream stopped: {stop.raw or 'interrupted'}"
        return "failed", None, {"code": "server_error", "message": msg}
    return wire.value, None, None


# ----------------------------------------------------------------------------- errors (encode)
_RESPONSE_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
    "vector_store_timeout", "invalid_image", "invalid_image_format", "invalid_base64_image",
    "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
    "unsupported_image_media_type", "empty_image_file", "failed_to_download_image", "image_file_not_found",
})


def response_error_object(err: Error) -> dict[str, Any]:
    """``response.error`` ({code, message}) for a failed Responses object."""
    code = err.code
    if code not in _RESPONSE_ERROR_CODES:
        if err.kind == "rate_limit":
            code = "rate_limit_exceeded"
        elif err.kind == "invalid_request":
            code = "invalid_prompt"
        elif err.kind == "timeout":
            code = "vector_store_timeout" if code == "vector_store_timeout" else "server_error"
        else:
            code = "server_error"
    return {"code": code, "message": err.message}


def error_event_payload(err: Error, sequence_number: int | None) -> dict[str, Any]:
    """The ``error`` stream event with both the flat (SDK type) and the nested (live API) fields."""
    e = error_body(err)["error"]
    d: dict[str, Any] = {"type": "error"}
    if sequence_number is not None:
        d["sequence_number"] = sequence_number
    d["code"] = e["code"]
    d["message"] = e["message"]
    d["param"] = e["param"]
    d["error"] = {"type": e["type"], "code": e["code"], "message": e["message"], "param": e["param"]}
    return d


# ============================================================================= codec facts
ENDPOINTS = Endpoints(generate="/responses", count_tokens="/responses/input_tokens", websocket=True)

#: the fields ``/v1/responses/input_tokens`` takes (the rest of a generation request counts nothing)
_COUNT_FIELDS = ("model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning",
                 "text", "truncation", "conversation", "previous_response_id")


def count_request(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    out = {k: body[k] for k in _COUNT_FIELDS if k in body}
    if model:
        out["model"] = model
    return out


COUNTER = TokenCounter(request=count_request, generation=lambda body: body,
                       tokens=lambda a: token_count(a, "input_tokens"),
                       answer=lambda n: {"object": "response.input_tokens", "input_tokens": n})
FIELDS = RequestFields(stop="stop", volatile=("metadata", "user", "safety_identifier", "prompt_cache_key",
                                              "prompt_cache_retention", "store", "include", "service_tier"))
CREDENTIALS = credentials(protocol_headers=("openai-beta",))
#: Responses failure codes (response.error.code) that say more than the type
ERRORS = error_facts({"vector_store_timeout": ErrorKind.TIMEOUT, "invalid_prompt": ErrorKind.INVALID_REQUEST})
CAPABILITIES = Capabilities(custom_tools=True, interrupted_is_status=True)

#: neutral stop decision -> (status, incomplete_details.reason) (a stated refusal and a
#: pause are completed; the interrupted value is failed, or cancelled when the upstream says so)
STOP_TABLE = check_stop_table({
    StopKey.END_TURN: WireStop("completed"),
    StopKey.TOOL_USE: WireStop("completed"),
    StopKey.MAX_OUTPUT: WireStop("incomplete", "max_output_tokens"),
    StopKey.CONTEXT_FULL: WireStop("incomplete", "max_output_tokens"),
    StopKey.REFUSAL: WireStop("completed"),
    StopKey.FILTERED: WireStop("incomplete", "content_filter"),
    StopKey.PAUSED: WireStop("completed"),
    StopKey.INTERRUPTED: WireStop("failed"),
    StopKey.REJECTED: WireStop("failed"),
    StopKey.OTHER: WireStop("completed", exact=False),
}, "Responses")

#: status / incomplete reason values -> reason (what this protocol writes, read back)
STOP_VALUES = {
    "completed": StopReason.END_TURN,
    "max_output_tokens": StopReason.MAX_OUTPUT,
    "content_filter": StopReason.REFUSAL,
    "failed": StopReason.INTERRUPTED,
    "cancelled": StopReason.INTERRUPTED,
}


_REQ_KEYS = ("input", "instructions", "previous_response_id", "conversation")


def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    return (SNIFF_DECISIVE, 0) if any(k in obj for k in _REQ_KEYS) else None


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    if obj.get("object") == "response" or ("output" in obj and "status" in obj):
        return (SNIFF_DECISIVE, 0)
    return None


#: stream events that only add text or arguments to an item the stream already opened
_MORE_OF = {"response.output_text.delta": '"type":"response.output_text.delta"',
            "response.function_call_arguments.delta": '"type":"response.function_call_arguments.delta"'}


def stream_observes(name: str | None, data: str) -> bool:
    """Pass-through: a text or arguments delta carries no stop, usage, model or error fact (those come
    with the response's lifecycle events), so once the first content passed it is forwarded
    undecoded. The data's own type must agree with the event name; anything else is decoded."""
    typed = _MORE_OF.get(name or "")
    return typed is None or typed not in data


def sniff_stream(head: bytes) -> Evidence | None:
    if b'"type":"response.' in head or b"event: response." in head or b'"type": "response.' in head:
        return (SNIFF_DECISIVE - 1, 0)
    return None


def is_error_body(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "error" or ("error" in obj and "output" not in obj)


def response_id(src_id: str | None) -> str:
    """``resp_…`` derived from the source id (foreign prefixes stripped), minted when absent."""
    return "resp_" + id_base(src_id)
