"""Facts shared by the Gemini ``generateContent`` request, response and stream codecs (private).

Endpoint recognition (model and method live in the URL), credentials, the stop vocabulary both
ways, usage conversion, Google error bodies, and the incremental reader of the streamed JSON-array
form of ``streamGenerateContent`` (without ``alt=sse``).
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import re
import time
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote, unquote_plus

import orjson

from ..errors import client_status, kind_for_status
from ..jsonutil import dumps
from ..neutral import Error, ErrorKind, Usage
from ..sse import SSEReader
from ..stop import (
    GENERIC_REFUSAL,
    StopInfo,
    StopKey,
    StopReason,
    WireStop,
    check_stop_table,
    classify_stop,
    map_stop,
)
from ._request_common import count, token_count
from .base import (
    SNIFF_DECISIVE,
    SNIFF_KEYS,
    SNIFF_TOOLS,
    Capabilities,
    Credentials,
    Endpoints,
    ErrorFacts,
    Evidence,
    PathFacts,
    RequestFields,
    TokenCounter,
)

PROTOCOL = "gemini_generate_content"

#: Prefix of the function-call ids we mint where Gemini gives none; never sent to Gemini.
MINTED_PREFIX = "gcall_"

#: Google documents this value for function calls in a history that Gemini did not produce
#: (Gemini 3 rejects a model turn whose first function call has no thought signature).
SKIP_SIGNATURE = "skip_thought_signature_validator"


def warn_once(warnings: list[str], message: str) -> None:
    if message not in warnings:
        warnings.append(message)


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# ----------------------------------------------------------------------------- continuity envelope
#: Gemini SDKs hold ``thoughtSignature`` as bytes (standard base64 on the wire) and re-encode it
#: when they send the history back, so our envelope is canonical standard base64 of
#: ``proxai.v1.`` + the JSON payload (a real signature is a binary blob that never starts so).
_ENV_PREFIX = b"proxai.v1."
#: how every packed signature starts (callers on a hot path test it without a call)
PACKED_HEAD = base64.b64encode(_ENV_PREFIX[:9]).decode()


def pack_signature(payload: dict[str, Any]) -> str:
    return base64.b64encode(_ENV_PREFIX + dumps(payload)).decode("ascii")


def is_packed_signature(sig: str) -> bool:
    return sig.startswith(PACKED_HEAD)


def unpack_signature(sig: str) -> dict[str, Any] | None:
    if not sig.startswith(PACKED_HEAD):
        return None
    try:
        raw = base64.b64decode(sig, validate=True)
        obj = orjson.loads(raw[len(_ENV_PREFIX):]) if raw.startswith(_ENV_PREFIX) else None
    except (ValueError, orjson.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


# ----------------------------------------------------------------------------- endpoints
#: /v1beta/models/{model}:{method} (developer API) and
#: /v1/projects/{p}/locations/{l}/publishers/google/models/{model}:{method} (Vertex AI)
# (Vertex AI: ``/projects/{p}/locations/{l}/publishers/google``, or ``/publishers/google`` alone in
# express mode, where an API key stands for the project)
_PREFIX = re.compile(r"/v1(?:alpha|beta\d*|\d*)?(?:(?:/projects/[^/]+/locations/[^/]+)?/publishers/google)?")
_MODELS = re.compile(r"^/v1(?:alpha|beta\d*|\d*)?(?:(?:/projects/[^/]+/locations/[^/]+)?/publishers/google)?/models"
                     r"(?:/[^/:?]+)?$")
#: the methods of a model endpoint -> what kind of request each is
_METHOD_KINDS = {"generateContent": "generate", "streamGenerateContent": "generate", "countTokens": "count_tokens"}


def parse_endpoint(path: str) -> PathFacts | None:
    """The Gemini endpoint a request path or whole URL names (query included), or None."""
    if "://" in path:  # a whole URL (stored flows): its path
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    p, _, query = path.partition("?")
    # {prefix}/models/{model}:{method}; the model has no "/" and no ":"
    head, _, method = p.rpartition(":")
    kind = _METHOD_KINDS.get(method)
    if kind is None:
        return None
    prefix, models, model = head.rpartition("/models/")
    if not models or not model or "/" in model or ":" in model or _PREFIX.fullmatch(prefix) is None:
        return None
    sse = False
    for field in query.split("&") if query else ():  # (what parse_qsl reads, without its lists)
        k, _, v = field.partition("=")
        if "%" in field or "+" in field:  # an encoded name or value
            k, v = unquote_plus(k), unquote_plus(v)
        if k == "alt" and v == "sse":
            sse = True
    return PathFacts(kind, prefix, unquote(model), method == "streamGenerateContent", sse)


def is_models_list(path: str) -> bool:
    return _MODELS.match(path.partition("?")[0]) is not None


def endpoint_path(model: str, stream: bool) -> str:
    """The upstream path after the version prefix for a request to ``model`` (streams as SSE)."""
    name = quote(model.removeprefix("models/"), safe="-._~@")
    if stream:
        return f"/models/{name}:streamGenerateContent?alt=sse"
    return f"/models/{name}:generateContent"


#: Credentials a Gemini client may send: a header and a query parameter.
CREDENTIAL_HEADERS = ("x-goog-api-key",)
CREDENTIAL_QUERY = ("key",)


# ----------------------------------------------------------------------------- stop vocabulary
#: finishReason values that mean a filter or policy stopped the output: refusals.
REFUSAL_FINISHES = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
                              "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR", "JAILBREAK"})
#: Every FinishReason the SDK knows (a value outside it is sent to a Gemini client as OTHER).
FINISH_REASONS = frozenset({
    "FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "LANGUAGE", "OTHER", "BLOCKLIST",
    "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_OTHER", "NO_IMAGE", "IMAGE_RECITATION", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
    "MISSING_THOUGHT_SIGNATURE", "MALFORMED_RESPONSE", "MODEL_ARMOR",
})
BLOCK_REASONS = frozenset({"SAFETY", "OTHER", "BLOCKLIST", "PROHIBITED_CONTENT", "IMAGE_SAFETY", "MODEL_ARMOR",
                           "JAILBREAK"})


def stop_from_wire(finish: Any, message: Any, has_tools: bool, detail: dict[str, Any] | None = None) -> StopInfo:
    """A candidate's ``finishReason`` (+ ``finishMessage``) as StopInfo (the stop vocabulary's table)."""
    raw = finish if isinstance(finish, str) and finish else None
    msg = message if isinstance(message, str) and message else None
    if raw == "FINISH_REASON_UNSPECIFIED":
        return classify_stop(raw, message=msg, detail=detail)
    return classify_stop(raw, has_tool_calls=has_tools, message=msg, detail=detail)


def stop_from_block(feedback: dict[str, Any]) -> StopInfo | None:
    """``promptFeedback.blockReason``: the input was blocked (a refusal with no candidates)."""
    reason = feedback.get("blockReason")
    if not isinstance(reason, str) or not reason or reason == "BLOCKED_REASON_UNSPECIFIED":
        return None
    msg = feedback.get("blockReasonMessage")
    detail: dict[str, Any] = {"input_blocked": True}
    if isinstance(feedback.get("safetyRatings"), list):
        detail["safety_ratings"] = feedback["safetyRatings"]
    # every block reason is a refusal of the input, including OTHER (Google documents no other meaning)
    return StopInfo(StopReason.REFUSAL, reason, reason, msg if isinstance(msg, str) and msg else None, None, detail)


#: neutral stop decision -> finishReason. Gemini says "declined" only with a policy value, so a
#: model's stated refusal is SAFETY too (its text stays visible); a Gemini value the upstream sent
#: goes back unchanged (:func:`stop_to_wire`).
STOP_TABLE = check_stop_table({
    StopKey.END_TURN: WireStop("STOP"),
    StopKey.TOOL_USE: WireStop("STOP"),
    StopKey.MAX_OUTPUT: WireStop("MAX_TOKENS"),
    StopKey.CONTEXT_FULL: WireStop("MAX_TOKENS", exact=False),
    StopKey.REFUSAL: WireStop("SAFETY", exact=False),
    StopKey.FILTERED: WireStop("SAFETY"),
    StopKey.PAUSED: WireStop("STOP", exact=False),
    StopKey.INTERRUPTED: WireStop("OTHER", exact=False),
    StopKey.REJECTED: WireStop("OTHER", exact=False),
    StopKey.OTHER: WireStop("OTHER", exact=False),
}, "Gemini")

#: finishReason values -> reason (what this protocol writes, read back)
STOP_VALUES = {v: classify_stop(v).reason for v in sorted(FINISH_REASONS)}


def stop_to_wire(stop: StopInfo, has_tools: bool, warnings: list[str]) -> tuple[str, str | None]:
    """(finishReason, finishMessage) for a Gemini client, from :data:`STOP_TABLE`; Gemini's own
    refusal and other values come back as they were."""
    up = stop.raw.upper() if isinstance(stop.raw, str) else ""
    if stop.reason in (StopReason.REFUSAL, StopReason.OTHER) and up in FINISH_REASONS and up != "STOP":
        value = up
    else:
        value = map_stop(STOP_TABLE, stop, has_tools, "Gemini", warnings).value
    if stop.reason is StopReason.REFUSAL:
        return value, stop.message or GENERIC_REFUSAL
    return value, stop.message if value != "STOP" else None


# ----------------------------------------------------------------------------- usage
def usage_from_wire(u: dict[str, Any]) -> Usage | None:
    """``usageMetadata`` -> neutral: prompt tokens include cached ones; candidates exclude thoughts;
    tool-use prompt tokens are input the model read."""
    prompt, cand = count(u.get("promptTokenCount")), count(u.get("candidatesTokenCount"))
    cached, thoughts = count(u.get("cachedContentTokenCount")), count(u.get("thoughtsTokenCount"))
    tool = count(u.get("toolUsePromptTokenCount"))
    if prompt is None and cand is None and thoughts is None and cached is None and tool is None:
        return None
    inp = None
    if prompt is not None or tool is not None:
        inp = max((prompt or 0) - (cached or 0), 0) + (tool or 0)
    out = None
    if cand is not None or thoughts is not None:
        out = (cand or 0) + (thoughts or 0)
    return Usage(inp, cached, None, out, thoughts)


def usage_to_wire(u: Usage | None) -> dict[str, Any]:
    if u is None:
        return {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0}
    prompt = (u.input or 0) + (u.cache_read or 0) + (u.cache_write or 0)
    thoughts = u.reasoning or 0
    cand = max((u.output or 0) - thoughts, 0)
    out: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": cand}
    if u.cache_read:
        out["cachedContentTokenCount"] = u.cache_read
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    out["totalTokenCount"] = prompt + cand + thoughts
    return out


# ----------------------------------------------------------------------------- ids and times
def created_from_wire(v: Any) -> int | None:
    """``createTime`` (RFC 3339) as epoch seconds: derived from the input, never the clock."""
    if not isinstance(v, str) or not v:
        return None
    try:
        return int(datetime.fromisoformat(v).timestamp())  # (it reads a trailing "Z" as UTC)
    except ValueError:
        return None


def created_to_wire(ts: int | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(ts))  # (no datetime object per stream)


def mint_call_id(scope: str, n: int, name: str) -> str:
    """A stable id for the ``n``-th function call of a scope (a response id, a history turn)."""
    digest = hashlib.sha1(f"{scope}\x00{n}\x00{name}".encode()).hexdigest()[:16]
    return f"{MINTED_PREFIX}{digest}"


# ----------------------------------------------------------------------------- errors
#: neutral error kind -> (HTTP status, Google status name)
_KIND_TO_GOOGLE: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_REQUEST: (400, "INVALID_ARGUMENT"),
    ErrorKind.AUTHENTICATION: (401, "UNAUTHENTICATED"),
    ErrorKind.BILLING: (429, "RESOURCE_EXHAUSTED"),
    ErrorKind.PERMISSION: (403, "PERMISSION_DENIED"),
    ErrorKind.NOT_FOUND: (404, "NOT_FOUND"),
    ErrorKind.REQUEST_TOO_LARGE: (413, "INVALID_ARGUMENT"),
    ErrorKind.RATE_LIMIT: (429, "RESOURCE_EXHAUSTED"),
    ErrorKind.API_ERROR: (500, "INTERNAL"),
    ErrorKind.TIMEOUT: (504, "DEADLINE_EXCEEDED"),
    ErrorKind.OVERLOADED: (503, "UNAVAILABLE"),
    ErrorKind.INTERRUPTED: (502, "UNAVAILABLE"),
}
#: Google status name -> neutral error kind
GOOGLE_TO_KIND: dict[str, ErrorKind] = {
    "INVALID_ARGUMENT": ErrorKind.INVALID_REQUEST,
    "FAILED_PRECONDITION": ErrorKind.INVALID_REQUEST,
    "OUT_OF_RANGE": ErrorKind.INVALID_REQUEST,
    "ALREADY_EXISTS": ErrorKind.INVALID_REQUEST,
    "ABORTED": ErrorKind.INVALID_REQUEST,
    "UNAUTHENTICATED": ErrorKind.AUTHENTICATION,
    "PERMISSION_DENIED": ErrorKind.PERMISSION,
    "NOT_FOUND": ErrorKind.NOT_FOUND,
    "RESOURCE_EXHAUSTED": ErrorKind.RATE_LIMIT,
    "INTERNAL": ErrorKind.API_ERROR,
    "UNKNOWN": ErrorKind.API_ERROR,
    "DATA_LOSS": ErrorKind.API_ERROR,
    "UNIMPLEMENTED": ErrorKind.NOT_FOUND,
    "UNAVAILABLE": ErrorKind.OVERLOADED,
    "DEADLINE_EXCEEDED": ErrorKind.TIMEOUT,
    "CANCELLED": ErrorKind.INTERRUPTED,
}
#: The Google status name that goes with an HTTP status, where the kind does not decide it.
_STATUS_TO_GOOGLE = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                     409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                     501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def error_from_wire(status: int | None, obj: dict[str, Any]) -> Error | None:
    """A Google error body ``{"error": {"code", "message", "status", "details"}}`` in neutral form,
    or None when ``obj`` is not one."""
    err = obj.get("error")
    if not isinstance(err, dict):
        return None
    gstatus = err.get("status")
    code = err.get("code")
    if status is None and isinstance(code, int) and not isinstance(code, bool):
        status = code
    kind = GOOGLE_TO_KIND.get(gstatus) if isinstance(gstatus, str) else None
    if kind is None:
        kind = kind_for_status(status)
    elif status is not None and kind in (ErrorKind.INVALID_REQUEST, ErrorKind.API_ERROR):
        kind = kind_for_status(status) if status not in (400, 500) else kind
    msg = err.get("message")
    message = msg if isinstance(msg, str) and msg else f"upstream returned HTTP {status}"
    if status is None:
        status = _KIND_TO_GOOGLE.get(kind, (500, "INTERNAL"))[0]
    return Error(kind=kind, message=message, status=status, raw=obj)


def error_body(err: Error) -> dict[str, Any]:
    """The Google error body for ``err``: ``code`` the status the client gets, ``status`` the Google
    name that goes with the kind (the upstream's own name when it says the same)."""
    st = client_status(err, ERRORS.statuses, ERRORS.foreign_statuses)
    raw = err.raw.get("error") if isinstance(err.raw, dict) else None
    name = raw.get("status") if isinstance(raw, dict) else None
    if not isinstance(name, str) or GOOGLE_TO_KIND.get(name) != err.kind:
        name = _KIND_TO_GOOGLE.get(err.kind, (0, ""))[1] or _STATUS_TO_GOOGLE.get(st, "INTERNAL")
    return {"error": {"code": st, "message": err.message, "status": name}}


ERRORS = ErrorFacts(
    types=dict(GOOGLE_TO_KIND),  # Google's error.status plays the part of error.type
    codes={},
    statuses={k: v[0] for k, v in _KIND_TO_GOOGLE.items()},
    foreign_statuses=frozenset({529}),  # overloaded is 503 UNAVAILABLE here
    body=error_body,
)


# ----------------------------------------------------------------------------- JSON-array streams
class JsonArrayReader:
    """Incremental reader of ``[ {...}, {...} ]`` (streamGenerateContent without ``alt=sse``).

    Returns each element's text as soon as its closing brace arrives. Each character is scanned
    once and the element in progress is kept as a list of pieces joined once at its end, so one
    large element in many small reads costs what it costs in one read. Whitespace and commas
    between elements are skipped.
    """

    __slots__ = ("_parts", "_depth", "_in_str", "_esc", "_opened", "closed", "_dec")

    def __init__(self) -> None:
        self._parts: list[str] = []  # the element in progress (empty between elements)
        self._depth = 0
        self._in_str = False
        self._esc = False
        self._opened = False  # the array's "[" was seen
        self.closed = False  # the array's "]" was seen
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def feed_bytes(self, chunk: bytes, final: bool = False) -> list[str]:
        return self.feed(self._dec.decode(chunk, final))

    def feed(self, text: str) -> list[str]:
        out: list[str] = []
        i = 0
        n = len(text)
        depth, in_str, esc = self._depth, self._in_str, self._esc
        start = 0 if depth else -1  # where the element in progress starts in text
        while i < n:
            if in_str:
                if esc:  # an escape cut at the previous read's end: its character is here
                    esc = False
                    i += 1
                    continue
                # jump to the next quote or backslash: strings are most of a Gemini chunk
                m = _STR_STOP.search(text, i)
                if m is None:
                    i = n
                    break
                i = m.start()
                if text[i] == "\\":
                    if i + 1 < n:
                        i += 2
                    else:
                        esc = True
                        i = n
                    continue
                in_str = False
                i += 1
                continue
            c = text[i]
            if c == '"':
                in_str = True
            elif c == "{" or c == "[":
                if c == "[" and depth == 0 and not self._opened:
                    self._opened = True
                else:
                    if depth == 0:
                        start = i
                    depth += 1
            elif c == "}" or c == "]":
                if depth == 0:
                    if c == "]":
                        self.closed = True
                else:
                    depth -= 1
                    if depth == 0:
                        piece = text[start : i + 1]
                        if self._parts:
                            self._parts.append(piece)
                            piece = "".join(self._parts)
                            self._parts.clear()
                        out.append(piece)
                        start = -1
            i += 1
        if depth and start >= 0:
            self._parts.append(text[start:])
        self._depth, self._in_str, self._esc = depth, in_str, esc
        return out

    def pending(self) -> str:
        """What arrived of an element that never closed (a cut stream)."""
        return "".join(self._parts)


_STR_STOP = re.compile(r'["\\]')


class StreamReader(SSEReader):
    """The framing of a Gemini stream, told by its first byte: ``data:`` lines (``alt=sse``) or one
    JSON array. The SSE reader's interface (events are ``(None, json)``).

    It is an SSE reader until the first byte says otherwise; once the framing is known, ``feed``
    and ``feed_raw`` go to that framing's own reader (a caller binds them once, before the first
    byte, so they test the framing on every read: two attribute tests)."""

    _arr: JsonArrayReader | None = None  # the array form's reader, once its "[" was seen
    _sse = False  # the SSE form, once its first byte was seen

    def _mode(self, chunk: bytes) -> bool | None:
        """True: the array form (its reader made), False: SSE, None: only whitespace so far."""
        head = chunk[:1]
        if head.isspace() or not head:  # (b"d" of "data:" the usual first byte: no copy)
            head = chunk.lstrip()[:1]
            if not head:
                return None
        if head == b"[":
            self._arr = JsonArrayReader()
            return True
        self._sse = True
        return False

    def feed(self, chunk: bytes, blobs: list[bytes] | None = None) -> list[Any]:
        # (once the framing is known, a later read may well start with "[": never looked at again)
        if self._sse:
            return self._read(chunk)
        if self._arr is None:
            mode = self._mode(chunk)
            if mode is None:
                return []
            if not mode:
                return self._read(chunk)
        return self._feed_array(chunk)

    def _feed_array(self, chunk: bytes) -> list[tuple[str | None, str]]:
        arr = self._arr
        return [] if arr is None else [(None, e) for e in arr.feed_bytes(chunk)]

    def close(self) -> list[tuple[str | None, str]]:
        arr = self._arr
        if arr is None:
            return SSEReader.close(self)
        out: list[tuple[str | None, str]] = [(None, e) for e in arr.feed_bytes(b"", True)]
        rest = arr.pending()
        if rest:
            out.append((None, rest))  # a cut element: the decoder judges it (invalid JSON)
        return out

    def feed_raw(self, chunk: bytes) -> tuple[list[Any], list[bytes]]:
        """Pass-through: the array form forwards its bytes as they come (an element is never
        re-framed); the SSE form forwards whole events only."""
        if self._sse:
            return SSEReader.feed_raw(self, chunk)
        if self._arr is None:
            mode = self._mode(chunk)
            if mode is None:
                return [None], [chunk]
            if not mode:
                return SSEReader.feed_raw(self, chunk)
        return self._feed_raw_array(chunk)

    def _feed_raw_array(self, chunk: bytes) -> tuple[list[Any], list[bytes]]:
        events: list[Any] = self._feed_array(chunk)
        if not events:
            return [None], [chunk]
        return events, [b""] * (len(events) - 1) + [chunk]

    def close_raw(self) -> tuple[list[Any], list[bytes]]:
        if self._arr is None:
            return SSEReader.close_raw(self)
        events = self.close()
        return events, [b""] * len(events)


# ----------------------------------------------------------------------------- codec facts
#: (the model is part of the path: ``generate`` is a template; requests are recognized by parse_path)
ENDPOINTS = Endpoints(generate="/models/{model}:generateContent", count_tokens="/models/{model}:countTokens",
                      models="/models", parse_path=parse_endpoint, path_for=endpoint_path,
                      default_prefix="/v1beta")
#: the model and the stream flag live in the URL (:data:`ENDPOINTS` ``parse_path``); no body has
#: these fields, so a context built from the body alone has neither
FIELDS = RequestFields(model="model", stream="stream", stop="stopSequences", volatile=("labels",))

#: the fields of a generation request that ``:countTokens`` counts (its ``generateContentRequest``
#: form carries them all; the bare ``contents`` form would drop the system instruction and tools)
_COUNT_FIELDS = ("contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings",
                 "cachedContent")


def count_request(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    inner = {k: body[k] for k in _COUNT_FIELDS if k in body}
    if model:
        inner = {"model": model if model.startswith("models/") else f"models/{model}", **inner}
    return {"generateContentRequest": inner}


def count_generation(body: dict[str, Any]) -> dict[str, Any]:
    inner = body.get("generateContentRequest")
    return inner if isinstance(inner, dict) else body


COUNTER = TokenCounter(request=count_request, generation=count_generation,
                       tokens=lambda a: token_count(a, "totalTokens"), answer=lambda n: {"totalTokens": n})
CAPABILITIES = Capabilities(custom_tools=False, interrupted_is_status=False)


def auth_headers(key: str, host: str) -> dict[str, str]:
    return {"x-goog-api-key": key}


CREDENTIALS = Credentials(
    key_headers=("x-goog-api-key", "authorization"),
    account_headers=("x-goog-user-project",),
    vendor_headers=("x-goog-api-client", "x-goog-request-params"),
    protocol_headers=(),
    client_markers=("x-goog-api-key", "x-goog-api-client"),
    default_headers={},
    auth_headers=auth_headers,
    vendor="google",
    key_query=CREDENTIAL_QUERY,
)


def client_stop(body: dict[str, Any]) -> list[str] | None:
    gc = body.get("generationConfig") or body.get("generation_config")
    stop = gc.get("stopSequences") if isinstance(gc, dict) else None
    return [x for x in stop if isinstance(x, str)] if isinstance(stop, list) else None


_REQ_KEYS = frozenset({"contents", "systemInstruction", "system_instruction", "generationConfig",
                       "generation_config", "safetySettings", "toolConfig", "cachedContent"})


def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    if "contents" in obj and not ("messages" in obj or "input" in obj):
        return (SNIFF_DECISIVE, 0)
    if _REQ_KEYS & obj.keys():
        return (SNIFF_KEYS, 0)
    tools = obj.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict) and "functionDeclarations" in tools[0]:
        return (SNIFF_TOOLS, 0)
    return None


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    if "candidates" in obj or "promptFeedback" in obj or "usageMetadata" in obj:
        return (SNIFF_DECISIVE, 0)
    err = obj.get("error")
    if isinstance(err, dict) and isinstance(err.get("status"), str) and isinstance(err.get("code"), int):
        return (SNIFF_DECISIVE, 0)
    return None


def sniff_stream(head: bytes) -> Evidence | None:
    if b'"candidates"' in head or b'"usageMetadata"' in head or b'"promptFeedback"' in head:
        return (SNIFF_DECISIVE, 0)
    return None


def is_error_body(obj: dict[str, Any]) -> bool:
    return "error" in obj and not obj.get("candidates")


def model_entry(mid: str, src: dict[str, Any] | None) -> dict[str, Any]:
    src = src or {}
    name = mid if mid.startswith("models/") else f"models/{mid}"
    out: dict[str, Any] = {"name": name, "displayName": src.get("displayName") or src.get("display_name") or mid,
                           "supportedGenerationMethods": ["generateContent", "streamGenerateContent",
                                                          "countTokens"]}
    for k in ("inputTokenLimit", "outputTokenLimit", "description", "version"):
        if src.get(k) is not None:
            out[k] = src[k]
    return out


def model_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"models": items}


def response_id(src: str | None) -> str:
    """Gemini response ids are opaque strings: the source id as it is, one derived when absent."""
    return src or "proxai-" + hashlib.sha1(b"no-id").hexdigest()[:16]
