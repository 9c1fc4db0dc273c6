"""Claude on Amazon Bedrock InvokeModel (``bedrock_invoke``): Anthropic Messages bodies on Bedrock
paths, streams in AWS event-stream framing.

``POST {prefix}/model/{URL-encoded model id}/invoke`` (``invoke-with-response-stream`` for a
stream, ``count-tokens`` to count). The body is an Anthropic Messages request with
``anthropic_version: "bedrock-2023-05-31"``, no ``model`` and no ``stream`` (the URL says both); a
count-tokens body wraps it: ``{"input": {"invokeModel": {"body": "<base64 of the request>"}}}``,
answered ``{"inputTokens": N}``.

Answers are Anthropic messages. A stream is ``application/vnd.amazon.eventstream`` frames
``:event-type: chunk`` whose payload ``{"bytes": "<base64>"}`` is one Anthropic stream event;
``message_stop`` carries ``amazon-bedrock-invocationMetrics``. A failure inside a 200 stream is an
exception frame (``:message-type: exception``, ``:exception-type: throttlingException`` ...,
payload ``{"message"}``). An HTTP error is the status, the ``x-amzn-errortype`` header and
``{"message": "..."}``. The Anthropic codec does the message work; this module adapts the body,
the paths, the framing and the errors.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

from orjson import JSONDecodeError, dumps, loads

from ..errors import TranslationError, parse_error
from ..eventstream import CORRUPT, CUT, ERROR, EventStreamReader, frame
from ..neutral import Error, ErrorEvent, ErrorKind, Event, Request, Response, Usage, UsageEvent
from ..protocol import Protocol
from ..sse import SSEReader
from ..stop import classify_stop
from . import _anthropic_common as _facts
from . import _aws_errors as _aws
from . import anthropic as _anthropic
from ._anthropic_hosted import decode_hosted_request, encode_hosted_request
from ._request_common import token_count
from .base import (
    SNIFF_DECISIVE,
    SNIFF_HOST,
    SNIFF_WEAK,
    Codec,
    Credentials,
    Endpoints,
    ErrorFacts,
    Evidence,
    PathFacts,
    TokenCounter,
    Wire,
)

#: the API version a Bedrock request names in its body
VERSION = "bedrock-2023-05-31"
#: the content type of a Bedrock stream
STREAM_TYPE = "application/vnd.amazon.eventstream"
#: the operation (last path segment) -> (kind, stream)
_OPERATIONS = {
    "invoke": ("generate", False),
    "invoke-with-response-stream": ("generate", True),
    "count-tokens": ("count_tokens", False),
}
#: the prefix of the message ids Bedrock mints
ID_MARK = "msg_bdrk_"
_METRICS = "amazon-bedrock-invocationMetrics"


# ============================================================================= paths
def parse_path(path: str) -> PathFacts | None:
    """The Bedrock InvokeModel endpoint a request path or whole URL names, or None."""
    if "://" in path:  # a whole URL (stored flows): its path
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    p = path.partition("?")[0].rstrip("/")
    head, _, op = p.rpartition("/")
    kind = _OPERATIONS.get(op)
    if kind is None:
        return None
    prefix, sep, model = head.rpartition("/model/")
    if not sep or not model or "/" in model:
        return None
    return PathFacts(kind[0], prefix, unquote(model), kind[1], sse=False)


def _model_segment(model: str) -> str:
    return quote(model, safe="-._~")  # ":" of a versioned id travels as %3A, as the AWS SDKs send it


def path_for(model: str, stream: bool) -> str:
    """The upstream path (there is no version prefix) for a request to ``model``."""
    return f"/model/{_model_segment(model)}/{'invoke-with-response-stream' if stream else 'invoke'}"


def count_path(model: str) -> str:
    """The token-counting path for ``model``."""
    return f"/model/{_model_segment(model)}/count-tokens"


# ============================================================================= requests
def _counted_request(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request a count-tokens body wraps, or None when ``body`` is not one."""
    inp = body.get("input")
    if not isinstance(inp, dict) or "messages" in body:
        return None
    inv = inp.get("invokeModel")
    if not isinstance(inv, dict):
        raise TranslationError("input.invokeModel: expected an object with the base64 request body",
                               field="input.invokeModel")
    raw = inv.get("body")
    try:
        inner = loads(base64.b64decode(raw, validate=True)) if isinstance(raw, str) else None
    except (binascii.Error, ValueError, JSONDecodeError):
        inner = None
    if not isinstance(inner, dict):
        raise TranslationError("input.invokeModel.body: expected the base64 of a JSON request body",
                               field="input.invokeModel.body")
    return inner


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    """A Bedrock request (or the request a count-tokens body wraps) -> neutral."""
    inner = _counted_request(body) if isinstance(body, dict) else None
    return decode_hosted_request(inner if inner is not None else body, warnings)


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    return encode_hosted_request(req, VERSION, warnings, stream_in_body=False)


def count_tokens_request(body: dict[str, Any]) -> dict[str, Any]:
    """The count-tokens body that counts the tokens of a request body."""
    return {"input": {"invokeModel": {"body": base64.b64encode(dumps(body)).decode()}}}


# ============================================================================= responses
def is_error_body(obj: dict[str, Any]) -> bool:
    """An HTTP error body: Bedrock's ``{"message"}`` (``Message`` from some AWS front ends), or an
    Anthropic error the model returned."""
    if _facts.is_error_body(obj):
        return True
    return ("message" in obj or "Message" in obj) and "content" not in obj and "type" not in obj


def decode_response(body: dict[str, Any], warnings: list[str]) -> Response:
    if isinstance(body, dict) and not _facts.is_error_body(body) and is_error_body(body):
        resp = Response()
        msg = body.get("message", body.get("Message"))
        err = parse_error(None, {"message": msg})
        resp.extra["error"] = err
        resp.stop = classify_stop("error", category=err.kind, message=err.message)
        return resp
    return _anthropic.decode_response(body, warnings)


# ============================================================================= streams
#: kind -> the exception frame our stream writes for an error of that kind (InvokeModel's stream also
#: has modelTimeoutException; a billing error is throttled)
_EXCEPTION_OF_KIND = {
    **_aws.KIND_STREAM_EXCEPTION,
    ErrorKind.BILLING: "throttlingException",
    ErrorKind.TIMEOUT: "modelTimeoutException",
}


def _chunk(data: str) -> tuple[str | None, str]:
    """A chunk frame's payload -> the Anthropic event it carries (name from its leading ``type``).
    A payload that carries none is handed on as it is, named ``chunk`` (the decoder says so)."""
    try:
        obj = loads(data)
        event = base64.b64decode(obj["bytes"], validate=True).decode()
    except (JSONDecodeError, binascii.Error, KeyError, TypeError, ValueError):
        return "chunk", data
    if event.startswith('{"type":"'):  # the usual form: the name without parsing the event
        end = event.find('"', 9)
        if end > 0:
            return event[9:end], event
    try:
        t = loads(event).get("type")
    except (JSONDecodeError, AttributeError):
        t = None
    return (t if isinstance(t, str) else None), event


class StreamReader:
    """An InvokeModel event stream -> the Anthropic stream events of its chunk frames, as
    ``(event name, data)``. Exception frames, a corrupt or cut stream keep the framing's names
    (``throttlingException``, :data:`~proxai_core.eventstream.CORRUPT`, ...)."""

    __slots__ = ("_frames",)

    def __init__(self) -> None:
        self._frames = EventStreamReader()

    @staticmethod
    def _events(events: list[tuple[str | None, str] | None]) -> list[tuple[str | None, str] | None]:
        return [_chunk(e[1]) if e is not None and e[0] == "chunk" else e for e in events]

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        return [e for e in self.feed_raw(chunk)[0] if e is not None]

    def close(self) -> list[tuple[str | None, str]]:
        return [e for e in self.close_raw()[0] if e is not None]

    def feed_raw(self, chunk: bytes) -> tuple[list[tuple[str | None, str] | None], list[bytes]]:
        events, raws = self._frames.feed_raw(chunk)
        return self._events(events), raws

    def close_raw(self) -> tuple[list[tuple[str | None, str] | None], list[bytes]]:
        events, raws = self._frames.close_raw()
        return self._events(events), raws


def _stream_error(name: str, data: str) -> Error:
    """An exception or error frame, a corrupt stream -> its neutral error."""
    if name == CORRUPT:
        return Error(kind=ErrorKind.INTERRUPTED, message=f"upstream event stream is corrupt: {data}", status=502)
    try:
        obj = loads(data)
    except JSONDecodeError:
        obj = None
    msg = obj.get("message", obj.get("Message")) if isinstance(obj, dict) else None
    if not isinstance(msg, str):
        msg = data[:500] or name
    if name == ERROR:
        code = obj.get("code") if isinstance(obj, dict) else None
        return Error(kind=ErrorKind.API_ERROR, message=msg, status=500, code=code if isinstance(code, str) else None)
    kind, status = _aws.STREAM_EXCEPTIONS.get(name, (ErrorKind.API_ERROR, 500))
    return Error(kind=kind, message=msg, status=status, code=name)


class StreamDecoder(_anthropic.StreamDecoder):
    """The Anthropic events of an InvokeModel stream -> neutral events (the Anthropic decoder), and
    what only Bedrock sends: exception frames, invocation metrics, chunks without an event."""

    __slots__ = ("_usage_seen",)

    def __init__(self, warnings: list[str]):
        super().__init__(warnings)
        self._usage_seen = False

    def feed(self, event: str | None, data: str) -> list[Event]:
        if self.done:
            return []
        if event is not None and event not in _ANTHROPIC_EVENTS:
            return self._framing_event(event, data)
        out = super().feed(event, data)
        if event == "message_stop" and _METRICS in data and not self._usage_seen:
            out[:0] = self._metrics(data)
        elif not self._usage_seen and (event == "message_start" or event == "message_delta"):
            self._usage_seen = any(isinstance(e, UsageEvent) or getattr(e, "usage", None) for e in out)
        return out

    def _framing_event(self, event: str, data: str) -> list[Event]:
        if event == CUT:  # the end comes with finish(): an interrupted stream
            return []
        if event == "chunk":
            self.warnings.append("an InvokeModel chunk frame without a base64 event ignored")
            return []
        if event.endswith("Exception") or event in (ERROR, CORRUPT):
            self.done = True
            return [ErrorEvent(_stream_error(event, data))]
        self._warn_unknown(f"frame {event!r}")
        return []

    def _metrics(self, data: str) -> list[Event]:
        """A stream whose Anthropic events carried no usage: the token counts of the metrics."""
        try:
            m = loads(data).get(_METRICS)
        except (JSONDecodeError, AttributeError):
            return []
        if not isinstance(m, dict):
            return []
        i, o = _facts.as_int(m.get("inputTokenCount")), _facts.as_int(m.get("outputTokenCount"))
        return [UsageEvent(Usage(input=i, output=o))] if i is not None or o is not None else []


#: the Anthropic stream event names (anything else from this reader is the framing's)
_ANTHROPIC_EVENTS = frozenset({"message_start", "content_block_start", "content_block_delta", "content_block_stop",
                               "message_delta", "message_stop", "ping", "error"})


def _chunk_frame(event: str) -> bytes:
    return frame("chunk", b'{"bytes":"' + base64.b64encode(event.encode()) + b'"}')


def error_frame(err: Error) -> bytes:
    """An exception frame for a Bedrock client (its SDK raises it as the stream's error)."""
    return frame(_EXCEPTION_OF_KIND.get(err.kind, _aws.OTHER_STREAM_EXCEPTION),
                 dumps({"message": err.message}), message_type="exception")


class StreamEncoder:
    """Neutral events -> an InvokeModel event stream: the Anthropic encoder's events, each in a
    chunk frame; an error as an exception frame."""

    __slots__ = ("_inner", "_sse", "done")

    def __init__(self, ctx: Any, warnings: list[str]):
        self._inner = _anthropic.StreamEncoder(ctx, warnings)
        self._sse = SSEReader()
        self.done = False

    def encode(self, ev: Event) -> bytes:
        if self.done:
            return b""
        if isinstance(ev, ErrorEvent):
            self.done = self._inner.done = True
            return error_frame(ev.error)
        sse = self._inner.encode(ev)
        self.done = self._inner.done
        if not sse:
            return b""
        out = []
        for name, data in self._sse.feed(sse):
            if name == "error":  # the Anthropic encoder ended the turn with an error of its own
                out.append(error_frame(parse_error(None, data)))
            else:
                out.append(_chunk_frame(data))
        return b"".join(out)


# ============================================================================= facts
def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    if obj.get("anthropic_version") == VERSION:
        return (SNIFF_DECISIVE, 0)
    # any other Anthropic Messages body is one too (SDKs also send the API's own version here):
    # as strong as the Anthropic codec's evidence, which wins the tie for a body of no host
    inner = _facts.sniff_request(obj)
    if inner is not None:
        return inner
    inp = obj.get("input")
    if isinstance(inp, dict) and "invokeModel" in inp:  # a count-tokens body ("input" is Responses' key too)
        return (SNIFF_HOST, 0)
    return None


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    rid = obj.get("id")
    if isinstance(rid, str) and rid.startswith(ID_MARK):
        return (SNIFF_HOST, 0)
    if obj.keys() == {"message"} or obj.keys() == {"Message"}:
        return (SNIFF_WEAK, 0)
    return None


_CHUNK_HEADER = b"\x0b:event-type\x07\x00\x05chunk"


def sniff_stream(head: bytes) -> Evidence | None:
    return (SNIFF_DECISIVE, 0) if _CHUNK_HEADER in head else None


def auth_headers(key: str, host: str) -> dict[str, str]:
    # a Bedrock API key is a bearer token (SigV4 signing is the proxy's, after every rewrite)
    return {"authorization": f"Bearer {key}"}


CREDENTIALS = Credentials(
    # a client's SigV4 signature and session token: never forwarded to another host, never recorded
    key_headers=("authorization", "x-amz-security-token", "x-amz-date", "x-amz-content-sha256"),
    account_headers=(),
    vendor_headers=(),
    protocol_headers=(),
    client_markers=(),
    default_headers={},
    auth_headers=auth_headers,
    vendor="aws",
)


def error_headers(err: Error) -> dict[str, str]:
    # (an InvokeModel client's billing error is a quota one; the header carries the name alone)
    name = "ServiceQuotaExceededException" if err.kind == ErrorKind.BILLING else _aws.error_type(err.kind)
    return {"x-amzn-errortype": name}


ERRORS = ErrorFacts(
    types=_aws.READ_KINDS,
    codes={},
    statuses=_aws.STATUSES,
    foreign_statuses=frozenset({529}),  # overloaded is 503 here
    body=_aws.error_body,
    type_header="x-amzn-errortype",
    headers=error_headers,
)

CODEC = Codec(
    protocol=Protocol.BEDROCK_INVOKE,
    name="bedrock_invoke",
    label="Claude on Amazon Bedrock InvokeModel",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=decode_response,
    encode_response=_anthropic.encode_response,
    StreamDecoder=StreamDecoder,
    StreamEncoder=StreamEncoder,
    error_frame=error_frame,
    wire=Wire(
        endpoints=Endpoints(generate="/model/{model}/invoke", count_tokens="/model/{model}/count-tokens",
                            parse_path=parse_path, path_for=path_for, count_path_for=count_path, default_prefix=""),
        fields=replace(_facts.FIELDS, volatile=(*_facts.FIELDS.volatile, "anthropic_version")),
        credentials=CREDENTIALS,
        model_entry=_facts.model_entry,
        model_list=_facts.model_list,
        counter=TokenCounter(request=lambda body, model: count_tokens_request(body),
                             generation=lambda body: _counted_request(body) or body,
                             tokens=lambda a: token_count(a, "inputTokens"), answer=lambda n: {"inputTokens": n}),
        sse_only=False,
        stream_type=STREAM_TYPE,
    ),
    errors=ERRORS,
    capabilities=_anthropic.CODEC.capabilities,
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.msg_id,
    sniff_request=sniff_request,
    sniff_response=sniff_response,
    sniff_stream=sniff_stream,
    is_error_body=is_error_body,
    stream_reader=StreamReader,
    stream_observes=_facts.stream_observes,
)
