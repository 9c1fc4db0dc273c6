"""The codec registry: one :class:`~.base.Codec` per protocol, asked by everything outside ``codecs/``.

The registry's list is the :class:`~proxai_core.protocol.Protocol` enum: member ``X`` is served by
``proxai_core.codecs.<x>`` (its ``CODEC``). Every codec is loaded and checked when this module is
imported (each one reads the others' error names). See ``docs/dev/codec-contract.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module

from ..errors import add_error_names
from ..neutral import Error, ErrorKind
from ..protocol import Protocol
from .base import Codec, Evidence, JSONObject

__all__ = [
    "Codec",
    "PathMatch",
    "all_codecs",
    "check_codec",
    "client_of_headers",
    "foreign_headers",
    "get",
    "match_path",
    "native_error",
    "sniff",
    "sniff_request",
    "sniff_response",
    "sniff_stream",
    "translation_error_response",
]


def check_codec(c: object, p: Protocol) -> Codec:
    """``c`` if it is a whole codec of ``p``, else a TypeError saying what is wrong."""
    where = f"{__name__}.{p.name.lower()}.CODEC"
    if not isinstance(c, Codec) or c.protocol is not p:
        raise TypeError(f"{where} is not the codec of {p.value}")
    missing = [k.value for k in ErrorKind if k not in c.errors.statuses]
    if missing:
        raise TypeError(f"{where}: errors.statuses has no status for the error kinds {', '.join(missing)}")
    for table in ("types", "codes"):
        wrong = sorted(n for n, k in getattr(c.errors, table).items() if not isinstance(k, ErrorKind))
        if wrong:
            raise TypeError(f"{where}: errors.{table} maps {', '.join(wrong)} to no ErrorKind")
    return c


def _load(p: Protocol) -> Codec:
    # (a dynamic import: the module's name is the enum member's, so a new protocol needs no edit here)
    c = check_codec(import_module(f"{__name__}.{p.name.lower()}").CODEC, p)
    add_error_names(c.errors.types, c.errors.codes, c.errors.type_header)
    return c


_ALL: tuple[Codec, ...] = tuple(_load(p) for p in Protocol)
_BY_PROTOCOL: dict[Protocol, Codec] = {c.protocol: c for c in _ALL}
_BY_KEY: dict[str, Codec] = {k: c for c in _ALL for k in (c.protocol.value, c.name)}


def get(key: Protocol | str) -> Codec:
    """The codec of a protocol: its enum member, its value ("openai_chat_completions") or its short
    name ("chat"). Unknown names raise ValueError listing the known ones."""
    c = _BY_PROTOCOL.get(key) if isinstance(key, Protocol) else _BY_KEY.get(key)
    if c is not None:
        return c
    names = ", ".join(f"{c.protocol.value} ({c.name})" for c in _ALL)
    raise ValueError(f"unknown protocol {key!r}; expected one of: {names}")


def all_codecs() -> tuple[Codec, ...]:
    """Every codec, in registry (enum) order."""
    return _ALL


# ----------------------------------------------------------------------------- paths
@dataclass(frozen=True, slots=True)
class PathMatch:
    """A recognized endpoint path. ``kind``: "generate" | "count_tokens" | "models" | "model";
    ``codec`` None where vendors share the path (the model list); ``prefix`` is the path before the
    endpoint (e.g. "/v1", "/api/v1", "/openai/deployments/x"); ``model_id`` for "model"."""

    kind: str
    codec: Codec | None
    prefix: str
    model_id: str | None = None
    #: protocols that name the model and the method in the URL: the stream flag it gives (None:
    #: in the body) and whether a stream is SSE; ``model_id`` is the model
    stream: bool | None = None
    sse: bool = True


def _suffixes() -> list[tuple[str, str, Codec]]:
    out: list[tuple[str, str, Codec]] = []
    for c in all_codecs():
        out.append((c.wire.endpoints.generate, "generate", c))
        if c.wire.endpoints.count_tokens:
            out.append((c.wire.endpoints.count_tokens, "count_tokens", c))
    out.sort(key=lambda t: -len(t[0]))  # longest first: "/messages/count_tokens" before "/messages"
    return out


def match_path(path: str, method: str = "POST", *, websocket: bool = False) -> PathMatch | None:
    """The endpoint a path or URL (query and trailing slash ignored) names: POST generation and
    token-counting endpoints (longest suffix wins); GET model list / one model; a GET websocket
    upgrade of a generation endpoint served as a websocket."""
    p = path.split("?", 1)[0].split("#", 1)[0]
    if "://" in p:  # a whole URL (stored flows): its path
        p = "/" + p.split("://", 1)[1].partition("/")[2]
    if len(p) > 1:
        p = p.rstrip("/")
    if method.upper() == "GET" and websocket:
        for c in all_codecs():
            if c.wire.endpoints.websocket and p.endswith(c.wire.endpoints.generate):
                return PathMatch("generate", c, p[: -len(c.wire.endpoints.generate)])
        return None
    if method.upper() == "GET":
        models = {c.wire.endpoints.models for c in all_codecs()}
        for m in models:
            if p.endswith(m):
                return PathMatch("models", None, p[: -len(m)])
            head, sep, mid = p.rpartition(m + "/")
            if sep and mid and "/" not in mid:
                return PathMatch("model", None, head, mid)
        return None
    for c in all_codecs():
        parse = c.wire.endpoints.parse_path
        facts = parse(path) if parse is not None else None
        if facts is not None:
            return PathMatch(facts.kind, c, facts.prefix, facts.model, facts.stream, facts.sse)
    for suffix, kind, c in _suffixes():
        if p.endswith(suffix):
            return PathMatch(kind, c, p[: -len(suffix)])
    return None


def client_of_headers(headers: Mapping[str, str]) -> Codec | None:
    """The first codec whose vendor's client markers are in ``headers`` (lower-case names)."""
    for c in all_codecs():
        if any(h in headers for h in c.wire.credentials.client_markers):
            return c
    return None


def foreign_headers(client: Codec | None, target: Codec) -> frozenset[str]:
    """Headers of a client request (``client`` None: unknown) that must not reach ``target``: every
    other vendor's headers, and protocol-only headers unless the client speaks the target protocol."""
    drop: set[str] = set()
    for c in all_codecs():
        cr = c.wire.credentials
        if cr.vendor != target.wire.credentials.vendor:
            drop.update(cr.vendor_headers, cr.protocol_headers, cr.default_headers)
        if client is not target:
            drop.update(cr.protocol_headers)
    return frozenset(drop)


# ----------------------------------------------------------------------------- errors
def native_error(err: Error, target: Protocol | str) -> tuple[int, JSONObject]:
    """(status, body) of ``err`` in the client protocol's native shape."""
    return get(target).error_response(err)


def translation_error_response(exc: Exception, target: Protocol | str) -> tuple[int, JSONObject]:
    """A client mistake or an unrepresentable request: 400 invalid_request_error, never 500."""
    err = Error(kind=ErrorKind.INVALID_REQUEST, message=str(exc), status=400,
                param=getattr(exc, "field", None))
    return native_error(err, target)


# ----------------------------------------------------------------------------- sniffing
def _best(scores: list[tuple[Evidence, int, Codec]]) -> Codec | None:
    if not scores:
        return None
    return max(scores, key=lambda t: (t[0], -t[1]))[2]


def sniff_request(obj: JSONObject) -> Codec | None:
    """The protocol a request body is most likely written in (None: no codec sees evidence)."""
    return _best([(e, i, c) for i, c in enumerate(all_codecs()) if (e := c.sniff_request(obj)) is not None])


def sniff_response(obj: JSONObject) -> Codec | None:
    """The protocol a complete response (or error) body is most likely written in."""
    return _best([(e, i, c) for i, c in enumerate(all_codecs()) if (e := c.sniff_response(obj)) is not None])


def sniff_stream(head: bytes) -> Codec | None:
    """The protocol an SSE body is written in, from its first bytes."""
    return _best([(e, i, c) for i, c in enumerate(all_codecs()) if (e := c.sniff_stream(head)) is not None])


def sniff(obj: JSONObject, *, request: bool | None = None) -> Codec | None:
    """A stored JSON body: a request (True), a response (False), or either (None: response
    evidence first, then request evidence)."""
    if request is True:
        return sniff_request(obj)
    if request is False:
        return sniff_response(obj)
    return sniff_response(obj) or sniff_request(obj)
