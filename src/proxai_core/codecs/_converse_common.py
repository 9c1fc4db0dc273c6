"""Amazon Bedrock Converse: the facts shared by its request, response and stream code (endpoints,
errors, stops, usage, credentials, sniffing)."""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import quote, unquote

from ..eventstream import frame
from ..jsonutil import dumps
from ..neutral import Error, ErrorKind, Usage
from ..stop import StopInfo, StopKey, StopReason, WireStop, check_stop_table, classify_stop, map_stop
from . import _aws_errors as _aws
from ._request_common import token_count
from .base import (
    SNIFF_CONTENT,
    SNIFF_DECISIVE,
    SNIFF_DIALECT,
    SNIFF_KEYS,
    Capabilities,
    Credentials,
    Endpoints,
    ErrorFacts,
    Evidence,
    PathFacts,
    RequestFields,
    TokenCounter,
)

PROTOCOL = "bedrock_converse"
#: what warnings call the protocol
LABEL = "Bedrock Converse"
#: the stream framing's content type
EVENTSTREAM_TYPE = "application/vnd.amazon.eventstream"


def warn_once(warnings: list[str], message: str) -> None:
    if message not in warnings:
        warnings.append(message)


def as_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# ----------------------------------------------------------------------------- endpoints
#: {prefix}/model/{URL-encoded model id or ARN}/{operation}
_PATH = re.compile(r"^(?P<prefix>(?:/[^/]+)*?)/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream|count-tokens)$")
_OPERATIONS = {"converse": ("generate", False), "converse-stream": ("generate", True),
               "count-tokens": ("count_tokens", False)}


def parse_endpoint(path: str) -> PathFacts | None:
    """The Converse endpoint a request path or whole URL names (query ignored), or None."""
    if "://" in path:
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    p = path.partition("?")[0].partition("#")[0]
    if len(p) > 1:
        p = p.rstrip("/")
    m = _PATH.match(p)
    if m is None:
        return None
    kind, stream = _OPERATIONS[m["op"]]
    return PathFacts(kind, m["prefix"], unquote(m["model"]), stream, sse=False)


def endpoint_path(model: str, stream: bool) -> str:
    """The upstream path for a request to ``model`` (the id URL-encoded whole: ``:`` is ``%3A``)."""
    return f"/model/{quote(model, safe='')}/{'converse-stream' if stream else 'converse'}"


ENDPOINTS = Endpoints(generate="/model/{modelId}/converse", count_tokens="/model/{modelId}/count-tokens",
                      models="/foundation-models", parse_path=parse_endpoint, path_for=endpoint_path,
                      count_path_for=lambda model: f"/model/{quote(model, safe='')}/count-tokens",
                      default_prefix="")
#: the model and the stream flag live in the URL; stop sequences inside ``inferenceConfig``
FIELDS = RequestFields(model="modelId", stream="stream", stop="stopSequences", volatile=("requestMetadata",))

#: what a count-tokens request of Converse counts (the ``input.converse`` of CountTokens)
_COUNT_FIELDS = ("messages", "system", "toolConfig", "additionalModelRequestFields")


def _count_request(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    # (the model is in the path)
    return {"input": {"converse": {k: body[k] for k in _COUNT_FIELDS if k in body}}}


def _count_generation(body: dict[str, Any]) -> dict[str, Any]:
    inp = body.get("input")
    inner = inp.get("converse") if isinstance(inp, dict) else None
    return inner if isinstance(inner, dict) else body


COUNTER = TokenCounter(request=_count_request, generation=_count_generation,
                       tokens=lambda a: token_count(a, "inputTokens"), answer=lambda n: {"inputTokens": n})
CAPABILITIES = Capabilities(custom_tools=False, interrupted_is_status=False, web_search=False)


# ----------------------------------------------------------------------------- credentials
def auth_headers(key: str, host: str) -> dict[str, str]:
    """A Bedrock API key travels as a bearer token (SigV4 signing is the proxy's credentials' job)."""
    return {"authorization": f"Bearer {key}"}


CREDENTIALS = Credentials(
    # a SigV4 signature is the authorization header plus the signed date, body hash and session
    # token: all of it is the client's credential, never forwarded to another host
    key_headers=("authorization", "x-amz-security-token", "x-amz-date", "x-amz-content-sha256"),
    account_headers=("x-amz-security-token",),
    vendor_headers=("amz-sdk-invocation-id", "amz-sdk-request", "x-amzn-bedrock-trace",
                    "x-amzn-bedrock-guardrailidentifier", "x-amzn-bedrock-guardrailversion",
                    "x-amzn-bedrock-performanceconfig-latency", "x-amzn-bedrock-service-tier"),
    protocol_headers=(),
    client_markers=("amz-sdk-invocation-id", "x-amz-date"),
    default_headers={},
    auth_headers=auth_headers,
    vendor="aws",
)


# ----------------------------------------------------------------------------- stops
#: every stop value Converse writes; guardrail_intervened and content_filtered are filters'
STOP_VALUES_READ = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened",
                    "content_filtered", "model_context_window_exceeded")

STOP_TABLE = check_stop_table({
    StopKey.END_TURN: WireStop("end_turn"),
    StopKey.TOOL_USE: WireStop("tool_use"),
    StopKey.MAX_OUTPUT: WireStop("max_tokens"),
    StopKey.CONTEXT_FULL: WireStop("model_context_window_exceeded"),
    # a model's stated refusal has no value of its own: the closest is a withheld answer
    StopKey.REFUSAL: WireStop("content_filtered", exact=False),
    StopKey.FILTERED: WireStop("content_filtered"),
    StopKey.PAUSED: WireStop("end_turn", exact=False),
    StopKey.INTERRUPTED: WireStop("end_turn", exact=False),
    StopKey.REJECTED: WireStop("end_turn", exact=False),
    StopKey.OTHER: WireStop("end_turn", exact=False),
}, LABEL)
STOP_VALUES = {v: classify_stop(v).reason for v in STOP_VALUES_READ}


def stop_from_wire(reason: Any, has_tools: bool, trace: Any = None) -> StopInfo:
    """A ``stopReason`` in neutral form; a guardrail's intervention keeps its trace in the detail."""
    raw = reason if isinstance(reason, str) else None
    detail: dict[str, Any] = {}
    if raw == "guardrail_intervened" and isinstance(trace, dict) and trace.get("guardrail") is not None:
        detail["guardrail"] = trace["guardrail"]
    return classify_stop(raw, has_tool_calls=has_tools, detail=detail or None)


def stop_sequence_of(response_fields: Any) -> str | None:
    """The stop sequence that matched, where the model says (Anthropic models:
    ``additionalModelResponseFields.stop_sequence``)."""
    if isinstance(response_fields, dict):
        seq = response_fields.get("stop_sequence")
        if isinstance(seq, str):
            return seq
    return None


def stop_to_wire(stop: StopInfo, stop_sequence: str | None, has_tools: bool,
                 warnings: list[str]) -> tuple[str, dict[str, Any] | None]:
    """(stopReason, additionalModelResponseFields or None) for a Converse client."""
    wire = map_stop(STOP_TABLE, stop, has_tools, LABEL, warnings)
    if wire.value == "end_turn" and stop.reason is StopReason.END_TURN and (
            stop_sequence or stop.raw == "stop_sequence"):
        return "stop_sequence", {"stop_sequence": stop_sequence} if stop_sequence else None
    if wire.value == "content_filtered" and stop.raw == "guardrail_intervened":
        return "guardrail_intervened", None
    return wire.value, None


# ----------------------------------------------------------------------------- usage
def usage_from_wire(u: Any) -> Usage | None:
    """Converse usage: ``inputTokens`` excludes cache reads and writes (as the neutral input does)."""
    if not isinstance(u, dict):
        return None
    return Usage(input=as_int(u.get("inputTokens")), cache_read=as_int(u.get("cacheReadInputTokens")),
                 cache_write=as_int(u.get("cacheWriteInputTokens")), output=as_int(u.get("outputTokens")))


def usage_to_wire(u: Usage | None) -> dict[str, Any]:
    u = u or Usage()
    inp, out = u.input or 0, u.output or 0
    cr, cw = u.cache_read or 0, u.cache_write or 0
    body: dict[str, Any] = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out + cr + cw}
    if u.cache_read is not None:
        body["cacheReadInputTokens"] = cr
    if u.cache_write is not None:
        body["cacheWriteInputTokens"] = cw
    return body


# ----------------------------------------------------------------------------- errors
#: kind -> the stream exception our own mid-stream error frame is (an interrupted stream is the
#: model's stream error)
_KIND_EXCEPTION: dict[ErrorKind, str] = {
    **_aws.KIND_STREAM_EXCEPTION,
    ErrorKind.INTERRUPTED: "modelStreamErrorException",
}
_TYPE_SUFFIX = ":http://internal.amazon.com/coral/com.amazon.bedrock/"


def error_type(err: Error) -> str:
    """The ``x-amzn-errortype`` name of ``err`` for a Converse client (the upstream's own name when
    it is Bedrock's and says the same kind)."""
    code = err.code
    if code is not None and _aws.TYPE_KINDS.get(code) == err.kind:
        return code
    return _aws.error_type(err.kind)


def error_headers(err: Error) -> dict[str, str]:
    return {"x-amzn-errortype": error_type(err) + _TYPE_SUFFIX}


ERRORS = ErrorFacts(
    types=_aws.READ_KINDS,
    codes={},
    statuses=_aws.STATUSES,
    # (Anthropic's overloaded status: Bedrock's is 503)
    foreign_statuses=frozenset({529}),
    body=_aws.error_body,
    type_header="x-amzn-errortype",
    headers=error_headers,
)


def stream_error(name: str, data: dict[str, Any]) -> Error:
    """An exception frame of a 200 stream in neutral form."""
    known = _aws.STREAM_EXCEPTIONS.get(name)
    kind = known[0] if known is not None else ErrorKind.API_ERROR
    msg = data.get("message") or data.get("Message")
    message = msg if isinstance(msg, str) and msg else f"upstream stream exception {name}"
    status = as_int(data.get("originalStatusCode"))
    # (the status the model failed with where the frame says, else the kind's)
    return Error(kind=kind, message=message, status=status if status is not None else _aws.STATUSES[kind],
                 code=_aws.type_name(name), raw=data)


def exception_frame(err: Error) -> bytes:
    """Our mid-stream error for a Converse client: an exception frame botocore raises as that
    exception."""
    name = _KIND_EXCEPTION.get(err.kind, _aws.OTHER_STREAM_EXCEPTION)
    body: dict[str, Any] = {"message": err.message}
    if name == "modelStreamErrorException" and err.status is not None:
        body["originalStatusCode"] = err.status
    return frame(name, dumps(body), "exception")


def is_error_body(obj: dict[str, Any]) -> bool:
    """Bedrock's error body: ``{"message": ...}`` (its type only in a header)."""
    return "output" not in obj and (isinstance(obj.get("message"), str) or isinstance(obj.get("Message"), str))


# ----------------------------------------------------------------------------- sniffing
_REQ_DECISIVE = frozenset({"inferenceConfig", "additionalModelRequestFields", "guardrailConfig",
                           "additionalModelResponseFieldPaths", "promptVariables", "performanceConfig"})
#: content block keys only Converse has (a block without a ``type``)
BLOCK_KEYS = frozenset({"text", "image", "document", "video", "toolUse", "toolResult", "guardContent",
                        "cachePoint", "reasoningContent", "citationsContent", "searchResult"})


def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    if _REQ_DECISIVE & obj.keys():
        return (SNIFF_DECISIVE, 0)
    tc = obj.get("toolConfig")
    if isinstance(tc, dict) and "tools" in tc:
        return (SNIFF_DECISIVE, 0)
    inp = obj.get("input")
    if isinstance(inp, dict) and isinstance(inp.get("converse"), dict):
        # a count-tokens body: more precise than a Responses ``input`` (this one names converse)
        return (SNIFF_DECISIVE + 1, 0)
    msgs = obj.get("messages")
    if isinstance(msgs, list):
        for i, m in enumerate(msgs):
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                for j, b in enumerate(content):
                    if isinstance(b, dict) and "type" not in b and len(b) == 1 and next(iter(b)) in BLOCK_KEYS:
                        # (one key, no type: no other protocol writes blocks so)
                        return (SNIFF_DIALECT if i == 0 and j == 0 else SNIFF_CONTENT, -(i * 1000 + j))
    return None


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    out = obj.get("output")
    if (isinstance(out, dict) and "message" in out) or "stopReason" in obj:
        return (SNIFF_DECISIVE, 0)
    if obj.keys() == {"inputTokens"}:  # a count-tokens answer
        return (SNIFF_KEYS, 0)
    return None


def sniff_stream(head: bytes) -> Evidence | None:
    if b":event-type" in head and (b"messageStart" in head or b"contentBlockDelta" in head):
        return (SNIFF_DECISIVE, 0)
    return None


# ----------------------------------------------------------------------------- model list, ids
def model_entry(mid: str, src: dict[str, Any] | None) -> dict[str, Any]:
    """One ``ListFoundationModels`` summary."""
    src = src or {}
    provider = mid.split(".")[-2] if mid.count(".") >= 1 else ""
    out: dict[str, Any] = {
        "modelArn": src.get("modelArn") or f"arn:aws:bedrock:::foundation-model/{mid}",
        "modelId": mid,
        "modelName": src.get("modelName") or src.get("display_name") or mid,
        "providerName": src.get("providerName") or provider.capitalize() or "Unknown",
        "inputModalities": src.get("inputModalities") or ["TEXT"],
        "outputModalities": src.get("outputModalities") or ["TEXT"],
        "responseStreamingSupported": True,
        "customizationsSupported": [],
        "inferenceTypesSupported": src.get("inferenceTypesSupported") or ["ON_DEMAND"],
        "modelLifecycle": {"status": "ACTIVE"},
    }
    return out


def model_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"modelSummaries": items}


def response_id(src: str | None) -> str:
    """Converse responses carry no id: one is kept only for our own bookkeeping."""
    return src or "proxai-" + hashlib.sha1(b"no-id").hexdigest()[:16]
