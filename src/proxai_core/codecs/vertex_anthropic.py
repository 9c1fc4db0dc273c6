"""Claude on Google Vertex AI (``vertex_anthropic``): Anthropic Messages bodies on Vertex paths.

``POST {prefix}/publishers/anthropic/models/{model}:rawPredict`` (``:streamRawPredict`` for a
stream), prefix ``/v1/projects/{project}/locations/{location}`` (or ``v1beta1``); token counting is
``{prefix}/publishers/anthropic/models/count-tokens:rawPredict`` with the model in the body.

The body is an Anthropic Messages request with ``anthropic_version: "vertex-2023-10-16"`` and no
``model`` (it is in the URL); ``stream: true`` for ``:streamRawPredict``. Answers are Anthropic
messages and Anthropic SSE (Vertex pads some ``data:`` objects with spaces, which JSON reading
ignores). Vertex's own failures are Google errors ``{"error": {"code", "message", "status"}}``;
the model's are Anthropic errors; both are read. Everything else is the Anthropic codec's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

from ..neutral import ErrorKind, Request
from ..protocol import Protocol
from . import _anthropic_common as _facts
from . import anthropic as _anthropic
from ._anthropic_hosted import decode_hosted_request, encode_hosted_request
from .base import (
    SNIFF_DECISIVE,
    SNIFF_HOST,
    Codec,
    Credentials,
    Endpoints,
    ErrorFacts,
    Evidence,
    PathFacts,
    TokenCounter,
    Wire,
)

#: the API version a Vertex AI request names in its body
VERSION = "vertex-2023-10-16"
#: the path after the project/location prefix, before the model
_MODELS = "/publishers/anthropic/models/"
#: the model segment of the token-counting endpoint
_COUNT = "count-tokens"
_METHODS = {"rawPredict": False, "streamRawPredict": True}


def parse_path(path: str) -> PathFacts | None:
    """The Vertex AI Anthropic endpoint a request path or whole URL names, or None."""
    if "://" in path:  # a whole URL (stored flows): its path
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    p = path.partition("?")[0]
    head, _, method = p.rpartition(":")
    stream = _METHODS.get(method)
    if stream is None:
        return None
    prefix, sep, model = head.rpartition(_MODELS)
    if not sep or not model or "/" in model or not prefix.startswith("/v1"):
        return None
    if model == _COUNT:
        return PathFacts("count_tokens", prefix, "", False) if not stream else None
    return PathFacts("generate", prefix, unquote(model), stream)


def path_for(model: str, stream: bool) -> str:
    """The upstream path after the project/location prefix for a request to ``model``."""
    return f"{_MODELS}{quote(model, safe='-._~@')}:{'streamRawPredict' if stream else 'rawPredict'}"


def count_path() -> str:
    """The token-counting path after the project/location prefix (the model is in the body)."""
    return f"{_MODELS}{_COUNT}:rawPredict"


def count_request(body: dict[str, Any], model: str | None) -> dict[str, Any]:
    """The counting request for a Vertex generation body: Anthropic's count fields, the version, the
    model in the body (the counting path names no model)."""
    return {"anthropic_version": VERSION, **_facts.count_request(body, model)}


def count_generation(body: dict[str, Any]) -> dict[str, Any]:
    return _facts.count_generation(body)


def decode_request(body: dict[str, Any], warnings: list[str]) -> Request:
    return decode_hosted_request(body, warnings)


def encode_request(req: Request, warnings: list[str]) -> dict[str, Any]:
    return encode_hosted_request(req, VERSION, warnings, stream_in_body=True)


def sniff_request(obj: dict[str, Any]) -> Evidence | None:
    if obj.get("anthropic_version") == VERSION:
        return (SNIFF_DECISIVE, 0)
    # any other Anthropic Messages body is one too (SDKs also send the API's own version here):
    # as strong as the Anthropic codec's evidence, which wins the tie for a body of no host
    inner = _facts.sniff_request(obj)
    if inner is not None:
        return inner
    return None


#: the prefix of the message ids Vertex AI mints
ID_MARK = "msg_vrtx_"


def sniff_response(obj: dict[str, Any]) -> Evidence | None:
    # an answer from Vertex is an Anthropic message: only its id tells the host
    rid = obj.get("id")
    if isinstance(rid, str) and rid.startswith(ID_MARK):
        return (SNIFF_HOST, 0)
    return None


def sniff_stream(head: bytes) -> Evidence | None:
    if b'"id":"' + ID_MARK.encode() in head:
        return (SNIFF_HOST, 0)
    return None


def auth_headers(key: str, host: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


CREDENTIALS = Credentials(
    key_headers=("authorization",),
    account_headers=("x-goog-user-project",),
    vendor_headers=(),
    protocol_headers=(),
    client_markers=(),
    default_headers={},
    auth_headers=auth_headers,
    vendor="google-vertex",
)

# Vertex answers its own failures with Google statuses (503 UNAVAILABLE, 429 RESOURCE_EXHAUSTED)
# and passes the model's Anthropic errors (529 overloaded_error): a client sees both statuses.
ERRORS = ErrorFacts(
    types=_facts.ERRORS.types,
    codes=_facts.ERRORS.codes,
    statuses={**_facts.ERRORS.statuses, ErrorKind.OVERLOADED: 529},
    foreign_statuses=frozenset(),
    body=_facts.error_body,
)

CODEC = Codec(
    protocol=Protocol.VERTEX_ANTHROPIC,
    name="vertex_anthropic",
    label="Claude on Vertex AI",
    decode_request=decode_request,
    encode_request=encode_request,
    decode_response=_anthropic.decode_response,
    encode_response=_anthropic.encode_response,
    StreamDecoder=_anthropic.StreamDecoder,
    StreamEncoder=_anthropic.StreamEncoder,
    error_frame=_anthropic.error_frame,
    wire=Wire(
        endpoints=Endpoints(generate=_MODELS + "{model}:rawPredict", count_tokens=count_path(),
                            parse_path=parse_path, path_for=path_for, count_path_for=lambda model: count_path(),
                            default_prefix="/v1"),
        fields=replace(_facts.FIELDS, volatile=(*_facts.FIELDS.volatile, "anthropic_version")),
        credentials=CREDENTIALS,
        model_entry=_facts.model_entry,
        model_list=_facts.model_list,
        counter=TokenCounter(request=count_request, generation=count_generation,
                             tokens=_facts.COUNTER.tokens, answer=_facts.COUNTER.answer),
    ),
    errors=ERRORS,
    capabilities=_anthropic.CODEC.capabilities,
    stop_table=_facts.STOP_TABLE,
    stop_values=_facts.STOP_VALUES,
    response_id=_facts.msg_id,
    sniff_request=sniff_request,
    sniff_response=sniff_response,
    sniff_stream=sniff_stream,
    is_error_body=_facts.is_error_body,
    stream_observes=_facts.stream_observes,
)
