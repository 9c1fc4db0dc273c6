"""What the mitmproxy side asks about protocols, answered by the core's codec registry.

No protocol is named here: every fact (paths, body and stream shapes, display names, the headers
that tell a client's vendor, model-list formats, error frames) comes from ``proxai_core.codecs``.
The helpers only adapt the registry's answers to what the addons hold (bytes, header maps,
``Protocol`` values).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxai_core import Protocol
from proxai_core.codecs import (
    all_codecs,
    client_of_headers,
    get,
    match_path,
    sniff,
    sniff_response,
    sniff_stream,
)
from proxai_core.neutral import Error, ErrorKind

__all__ = [
    "DEFAULT_PROTOCOL",
    "SHORT",
    "TITLES",
    "client_protocol_of_headers",
    "convert_models",
    "counts_tokens",
    "fallback_error_frame",
    "is_error_body",
    "looks_like_response",
    "json_or_none",
    "looks_like_sse",
    "miss_protocol",
    "model_list_client",
    "protocol_from_path",
    "request_model",
    "request_stream",
    "set_request_model",
    "sniff_protocol",
    "sniff_sse",
]

#: the protocol of a native error for a client whose protocol is unknown: the registry's first
DEFAULT_PROTOCOL: Protocol = all_codecs()[0].protocol

#: short names for tables
SHORT: dict[Protocol, str] = {c.protocol: c.name for c in all_codecs()}

#: display names for the contentview
TITLES: dict[Protocol, str] = {c.protocol: c.label for c in all_codecs()}


def _path_only(path: str) -> str:
    if "://" in path:
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    return path.split("#", 1)[0]


def protocol_from_path(path: str | None) -> Protocol | None:
    """The protocol a generation endpoint path speaks (a full URL is accepted; query kept, since a
    protocol may read its stream framing there); None for anything else (token counting, model
    lists, ``/responses/{id}`` ...)."""
    if not path:
        return None
    m = match_path(_path_only(path))
    return m.codec.protocol if m is not None and m.kind == "generate" and m.codec is not None else None


def miss_protocol(path: str | None) -> Protocol:
    """The protocol a replay miss body is written in: the request path's, else the default."""
    m = match_path(_path_only(path)) if path else None
    return m.codec.protocol if m is not None and m.codec is not None else DEFAULT_PROTOCOL


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


def sniff_sse(data: bytes) -> Protocol | None:
    c = sniff_stream(data[:4000])
    return c.protocol if c is not None else None


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
    c = sniff(obj, request=request)
    return c.protocol if c is not None else None


def is_error_body(obj: Any, protocol: Protocol | None) -> bool:
    """An HTTP error body (any shape), as opposed to a model response."""
    if not isinstance(obj, dict):
        return True
    return bool(get(protocol or DEFAULT_PROTOCOL).is_error_body(obj))


# ----------------------------------------------------------------------------- request fields
def _fields(protocol: Protocol | None, attr: str) -> list[str]:
    """Where ``protocol`` (None: any protocol) keeps a request fact (``model``, ``stream``)."""
    codecs = (get(protocol),) if protocol is not None else all_codecs()
    out: list[str] = []
    for c in codecs:
        name = getattr(c.wire.fields, attr)
        if name and name not in out:
            out.append(name)
    return out


def request_model(body: Any, protocol: Protocol | None = None) -> str | None:
    """The model a request body names (protocols that keep it in the URL: see routing.Endpoint)."""
    if not isinstance(body, dict):
        return None
    for f in _fields(protocol, "model"):
        model = body.get(f)
        if isinstance(model, str):
            return model
    return None


def request_stream(body: Any, protocol: Protocol | None = None) -> bool:
    if not isinstance(body, dict):
        return False
    return any(bool(body.get(f)) for f in _fields(protocol, "stream"))


def set_request_model(body: dict[str, Any], model: str, protocol: Protocol | None = None) -> None:
    body[_fields(protocol, "model")[0]] = model


def looks_like_response(obj: dict[str, Any]) -> bool:
    """A stored JSON body that is a response or an error, not a request."""
    return sniff_response(obj) is not None or any(c.is_error_body(obj) for c in all_codecs())


# ----------------------------------------------------------------------------- clients and formats
def client_protocol_of_headers(headers: Mapping[str, str]) -> Protocol | None:
    """The protocol whose vendor's client markers are in ``headers`` (None: none)."""
    c = client_of_headers({k.lower(): v for k, v in headers.items()})
    return c.protocol if c is not None else None


def model_list_client(headers: Mapping[str, str]) -> Protocol | None:
    """Which format a model-list request wants (vendors share ``GET …/models``): the vendor whose
    client markers are present, else None (the default's)."""
    return client_protocol_of_headers(headers)


def counts_tokens(protocol: Protocol) -> bool:
    """The protocol has a token counting endpoint."""
    return get(protocol).wire.counter is not None


def fallback_error_frame(protocol: Protocol, message: str) -> bytes:
    """The client's native SSE error frame when the normal path failed: the codec's frame for a
    plain ``api_error``; if even that fails, a bare SSE event carrying the message."""
    try:
        return get(protocol).error_frame(Error(kind=ErrorKind.API_ERROR, message=message, status=500))
    except Exception:  # noqa: BLE001 - the last resort must not fail
        return b"data: " + orjson.dumps({"error": {"message": message}}) + b"\n\n"


def _upstream_models(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The entries of an upstream model list, whatever the vendor calls the list."""
    for v in obj.values():
        if isinstance(v, list) and all(isinstance(m, dict) for m in v):
            return v
    return None


def _model_id(m: dict[str, Any]) -> str | None:
    for k in ("id", "name"):
        v = m.get(k)
        if isinstance(v, str) and v:
            return v.removeprefix("models/")
    return None


def convert_models(obj: Any, kind: str, client: Protocol | None, client_names: list[str],
                   requested: str | None) -> dict | None:
    """A model list (or one model) from the upstream's format into the client's (``client`` None:
    the default's), with ``client_names`` (the route's model map) added to the list."""
    if not isinstance(obj, dict):
        return None
    c = get(client or DEFAULT_PROTOCOL)
    if kind == "model":
        return c.wire.model_entry(requested or _model_id(obj) or "", obj)
    data = _upstream_models(obj)
    if data is None:
        return None
    items: list[dict] = []
    seen: set[str] = set()
    for name in client_names:
        if name not in seen:
            seen.add(name)
            items.append(c.wire.model_entry(name, None))
    for m in data:
        mid = _model_id(m)
        if mid is not None and mid not in seen:
            seen.add(mid)
            items.append(c.wire.model_entry(mid, m))
    return c.wire.model_list(items)
