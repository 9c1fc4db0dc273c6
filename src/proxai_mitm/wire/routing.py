"""Which requests are LLM requests, where a routed one goes, and what its headers become.

Pure functions over plain values (no mitmproxy objects), so they are cheap to test.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl, urlencode

from proxai_core import Protocol
from proxai_core.codecs import Codec, all_codecs, foreign_headers, get, match_path
from proxai_core.codecs.base import SNIFF_CONTENT

from ..config.routes import BaseURL

__all__ = [
    "FORWARD_HEADERS",
    "Endpoint",
    "forwardable",
    "client_credential",
    "credential_query",
    "recognize",
    "rewrite_headers",
    "body_protocol",
    "upstream_target",
]

_VERSIONED = re.compile(r"/v\d+(?:alpha|beta)?\d*$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A recognized LLM endpoint.

    kind: ``generate`` | ``count_tokens`` | ``models`` (list) | ``model`` (one, ``model_id``).
    ``protocol`` is the client's protocol (None for model lists: vendors share ``GET …/models``;
    the format is chosen from the request headers). Protocols that name the model and the method
    in the URL give ``model_id`` (the model), ``stream`` (None: the body says) and ``sse``.
    """

    kind: str
    protocol: Protocol | None
    prefix: str
    query: str = ""
    model_id: str | None = None
    websocket: bool = False
    stream: bool | None = None
    sse: bool = True
    #: the path after ``prefix`` (query excluded)
    tail: str = ""

    @property
    def path(self) -> str:
        """The client's request path (query included)."""
        return self.prefix + self.tail + (f"?{self.query}" if self.query else "")

    @property
    def generate_paths(self) -> tuple[str, ...]:
        """The generation paths that share this endpoint's prefix (route matching of aux endpoints)."""
        if self.kind == "count_tokens" and self.protocol is not None:
            return (self.prefix + _generate_path(get(self.protocol), self.model_id, False),)
        return tuple(self.prefix + _generate_path(c, self.model_id, False) for c in all_codecs())


def _generate_path(c: Codec, model: str | None, stream: bool) -> str:
    """The generation path of a codec after the version prefix (query included)."""
    path_for = c.wire.endpoints.path_for
    return path_for(model or "", stream) if path_for is not None else c.wire.endpoints.generate


def recognize(method: str, path: str, headers: Mapping[str, str] | None = None) -> Endpoint | None:
    """Recognize by method and path (the registry's ``match_path``). The JSON body is checked by
    the caller."""
    method = method.upper()
    if method not in ("GET", "POST"):
        return None
    p, _, q = path.partition("?")
    ws = method == "GET" and (headers or {}).get("upgrade", "").lower() == "websocket"
    m = match_path(path, method, websocket=ws)
    if m is None:
        return None
    if len(p) > 1:
        p = p.rstrip("/")
    return Endpoint(m.kind, m.codec.protocol if m.codec is not None else None, m.prefix, q, m.model_id,
                    ws, m.stream, m.sse, p[len(m.prefix):])


def told_by_body(ep: Endpoint, path: str, written_in: Protocol | None) -> Endpoint:
    """``ep`` for the protocol the body is written in (``written_in``: :func:`body_protocol` of the
    body), where another protocol serves the same path (Amazon Bedrock's ``/model/{id}/count-tokens``
    counts a Converse or an InvokeModel request, as its body says); else ``ep`` as recognized."""
    if written_in is None or ep.protocol is None:
        return ep
    parse = get(written_in).wire.endpoints.parse_path
    facts = parse(path) if parse is not None else None
    if facts is None or facts.kind != ep.kind:
        return ep
    return replace(ep, protocol=written_in)


def body_protocol(body: Mapping[str, Any], client: Protocol | None = None) -> Protocol | None:
    """The protocol a request body is clearly written in, when that is not ``client``'s (for
    "wrong protocol" 400s). Only content-level evidence or stronger counts, and only when the
    client's own protocol sees no such evidence."""
    best: tuple[Any, int, Codec] | None = None
    own = None
    copy = dict(body)
    for i, c in enumerate(all_codecs()):
        e = c.sniff_request(copy)
        if e is None:
            continue
        if c.protocol is client:
            own = e
        if best is None or (e, -i) > (best[0], -best[1]):
            best = (e, i, c)
    if best is None or best[0][0] < SNIFF_CONTENT:
        return None
    if client is not None and own is not None and own[0] >= SNIFF_CONTENT:
        return None
    return best[2].protocol


def looks_like_llm(body: Any) -> bool:
    """A JSON object some protocol would read as a request (a model field, or a codec's evidence)."""
    if not isinstance(body, dict):
        return False
    return any(c.wire.fields.model in body for c in all_codecs()) or any(
        c.sniff_request(body) is not None for c in all_codecs())


def _base_prefix(base: BaseURL, target: Codec) -> tuple[str, str | None]:
    """(prefix, explicit endpoint path or None) of a base URL."""
    bp = base.path
    for c in all_codecs():
        g = c.wire.endpoints.generate
        if g.startswith("/") and "{" not in g and bp.endswith(g):
            return bp[: -len(g)], bp
    for c in all_codecs():
        ct = c.wire.endpoints.count_tokens
        if ct and ct.startswith("/") and "{" not in ct and bp.endswith(ct):
            return bp[: -len(ct)], None
    if _VERSIONED.search(bp) or "/deployments/" in bp:
        return bp, None
    ep = target.wire.endpoints
    if ep.parse_path is not None and ep.path_for is not None and ep.parse_path(bp + ep.path_for("m", False)):
        return bp, None  # a prefix the protocol itself recognizes (Vertex AI's project/location path)
    return bp + ep.default_prefix, None


_VERSION_SEGMENT = re.compile(r"/v\d+(?:alpha|beta)?\d*(?=/|$)")


def _same_host_prefix(ep: Endpoint, client: Codec | None, target: Codec) -> str:
    """The path prefix toward the client's own host (no base URL) for ``target``.

    The rule: the client's prefix is kept when it is the target's own — the same protocol, or a
    prefix whose versioned part is exactly the target's version prefix (``/v1`` for Chat,
    Responses and Anthropic). Otherwise it belongs to the client's protocol (Gemini's ``/v1beta``,
    a Vertex AI ``/v1/projects/…/publishers/google``, an Azure deployment) and the target's own
    version prefix replaces it; what the client put before its version segment (a gateway's own
    prefix such as ``/openai``) stays.
    """
    prefix = ep.prefix
    if client is target:
        return prefix
    m = _VERSION_SEGMENT.search(prefix)
    head = prefix[: m.start()] if m is not None else ""
    own = target.wire.endpoints.default_prefix
    return prefix if prefix == head + own else head + own


def _key_query_names() -> frozenset[str]:
    return frozenset(n for c in all_codecs() for n in c.wire.credentials.key_query)


def credential_query(query: str) -> str | None:
    """A key carried in the URL query (a protocol's ``key_query`` parameter), or None."""
    if not query:
        return None
    names = _key_query_names()
    for k, v in parse_qsl(query, keep_blank_values=True):
        if k in names and v.strip():
            return v.strip()
    return None


def _strip_credentials(query: str) -> str:
    """The query without credential parameters (they move to the target's own header)."""
    if not query:
        return query
    names = _key_query_names()
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(k in names for k, _ in pairs):
        return query
    return urlencode([(k, v) for k, v in pairs if k not in names])


def _join_query(extra: str, query: str = "") -> str:
    """``extra`` (the target path's own parameters, e.g. ``alt=sse``) then ``query`` without the
    names ``extra`` sets: a parameter is never sent twice."""
    if extra and query:
        own = {k for k, _ in parse_qsl(extra, keep_blank_values=True)}
        query = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in own])
    q = "&".join(p for p in (extra, query) if p)
    return f"?{q}" if q else ""


def upstream_target(
    ep: Endpoint,
    target: Protocol,
    base: BaseURL | None,
    *,
    scheme: str,
    host: str,
    port: int,
    model_id: str | None = None,
    stream: bool = False,
) -> tuple[str, str, int, str]:
    """(scheme, host, port, path-with-query) the routed request goes to.

    ``base`` None keeps scheme/host/port and the client's path prefix when it is the target's own
    (reverse mode, gateways); a prefix of another protocol becomes the target's (:func:`_same_host_prefix`).
    With a base URL: its path is the prefix; the target's version prefix (``/v1``) is added
    unless it already ends in a version segment (``/v1``, ``/api/v1``, ``/v1beta``) or names an
    Azure deployment; a base URL that already ends in the protocol's endpoint is used as it is.
    ``model_id`` / ``stream``: the upstream model and stream flag, for targets that keep them in
    the URL. Credential query parameters never travel (the key goes into the target's header).
    """
    tc = get(target)
    client = get(ep.protocol) if ep.protocol is not None else None
    if base is None:
        prefix, explicit, query = _same_host_prefix(ep, client, tc), None, ep.query
        if prefix != ep.prefix or (client is not None and client is not tc):
            query = ""  # the client's query (framing, credentials, beta flags) means nothing to another protocol
    else:
        scheme, host, port = base.scheme, base.host, base.port
        prefix, explicit = _base_prefix(base, tc)
        query = base.query
    query = _strip_credentials(query)
    model = model_id or ep.model_id
    if ep.kind == "generate":
        if client is tc and tc.wire.endpoints.parse_path is not None and base is None and model == ep.model_id:
            path, extra = prefix + ep.tail, ""  # the same URL-keyed protocol, same model: as the client wrote it
        else:
            gen = _generate_path(tc, model, stream)
            path, _, extra = gen.partition("?")
            if explicit and explicit.endswith(path):
                path = explicit
            else:
                path = prefix + path
        return scheme, host, port, path + _join_query(extra, query)
    if ep.kind == "count_tokens":
        count_path = tc.wire.endpoints.count_path_for
        if count_path is not None:  # the model is in the path: "…/models/m:countTokens"
            path = prefix + count_path(model or "")
        else:
            path = prefix + (tc.wire.endpoints.count_tokens or "")
    elif ep.kind == "models":
        path = prefix + tc.wire.endpoints.models
    else:
        path = prefix + tc.wire.endpoints.models + "/" + (model or "")
    return scheme, host, port, path + _join_query("", query)


def _key_headers() -> tuple[str, ...]:
    out: list[str] = []
    for c in all_codecs():
        for h in c.wire.credentials.key_headers:
            if h not in out:
                out.append(h)
    return tuple(out)


def _values(headers: Any) -> Mapping[str, str]:
    """The headers by lower-case name, each value as ``headers.get`` gives it (repeated fields joined
    by ", "), read in one pass over a mitmproxy ``Headers`` object's fields (each of its lookups
    scans them all and raises a KeyError for a missing name). Another mapping is returned as it is."""
    fields = getattr(headers, "fields", None)
    if not isinstance(fields, tuple):
        return headers
    out: dict[str, str] = {}
    for k, v in fields:
        name = k.lower().decode("utf-8", "surrogateescape")
        value = v.decode("utf-8", "surrogateescape")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _remove(headers: Any, unwanted: Callable[[str], bool]) -> None:
    """Remove every header whose lower-case name is ``unwanted``: one pass over a mitmproxy
    ``Headers`` object's fields (its ``pop`` scans them two or three times per name), a ``pop`` per
    name of another mapping."""
    fields = getattr(headers, "fields", None)
    if isinstance(fields, tuple):
        kept = tuple(f for f in fields if not unwanted(f[0].lower().decode("utf-8", "surrogateescape")))
        if len(kept) != len(fields):
            headers.fields = kept
        return
    for h in {n.lower() for n in headers.keys()}:
        if unwanted(h):
            headers.pop(h, None)


def client_credentials(headers: Mapping[str, str], query: str = "") -> list[str]:
    """Every key the client sent (bearer token, each protocol's key header, key query parameters)."""
    out: list[str] = []
    values = _values(headers)
    for name in _key_headers():
        v = values.get(name, "")
        if name == "authorization":
            v = v[7:] if v[:7].lower() == "bearer " else ""
        v = v.strip()
        if v and v not in out:
            out.append(v)
    names = _key_query_names()
    for k, v in parse_qsl(query, keep_blank_values=True) if query else ():
        if k in names and v.strip() and v.strip() not in out:
            out.append(v.strip())
    return out


def client_credential(headers: Mapping[str, str], query: str = "") -> str | None:
    """The client's key: a bearer token, a protocol's key header, or a key query parameter."""
    values = _values(headers)
    for name in _key_headers():
        v = values.get(name, "")
        if name == "authorization":
            if v[:7].lower() == "bearer " and v[7:].strip():
                return v[7:].strip()
        elif v:
            return v.strip()
    return credential_query(query)


#: what crosses to another host than the client addressed: framing, content negotiation, the
#: SDKs' harmless self-description and the target protocol's version headers. Everything else
#: (whatever its name: gateway keys, cookies, proxy credentials, tracing) stays behind.
FORWARD_HEADERS = frozenset({
    "host", "content-type", "content-length", "accept", "accept-language", "user-agent",
    "idempotency-key", "x-request-id",
})
#: the official SDKs' platform headers (x-stainless-lang, -os, -arch, -runtime, -retry-count, ...)
_FORWARD_PREFIXES = ("x-stainless-",)
#: AWS's request-signing and identity headers (x-amz-date, x-amz-security-token, ...): a client's
#: signature never crosses to another host (a route with auth signs the final request itself)
_NEVER_PREFIXES = ("x-amz-",)


@functools.cache
def _never_forward() -> frozenset[str]:
    """Credentials that never cross to another host, whatever a protocol declares as its own headers:
    every protocol's key and account headers, cookies and proxy credentials."""
    out = {"cookie", "proxy-authorization"}
    for c in all_codecs():
        out.update(c.wire.credentials.key_headers)
        out.update(c.wire.credentials.account_headers)
    return frozenset(out)


def _forward_by_target(target: Protocol) -> frozenset[str]:
    """The target protocol's own harmless headers (its vendor's and protocol's, never an account's)."""
    cr = get(target).wire.credentials
    return frozenset({*cr.vendor_headers, *cr.protocol_headers, *cr.default_headers}) - frozenset(
        {*cr.account_headers, *cr.key_headers})


def forwardable(name: str, target: Protocol) -> bool:
    """May this request header go to a host the client did not address?"""
    n = name.lower()
    if n in _never_forward() or n.startswith(_NEVER_PREFIXES):
        return False
    return n in FORWARD_HEADERS or n in _forward_by_target(target) or n.startswith(_FORWARD_PREFIXES)


def rewrite_headers(
    headers: Any,
    *,
    client: Protocol | None,
    target: Protocol,
    same_host: bool,
    key: str | None,
    upstream_host: str,
    body: bool = True,
) -> None:
    """Rewrite a mitmproxy ``Headers`` object in place for a routed request.

    ``key`` is the credential to send (the configured key, or the client's own when the host is
    the one it addressed); None sends none. Toward another host only :func:`forwardable` headers
    are kept (an allowlist), so no credential-bearing header can cross whatever its name.
    """
    tc = get(target)
    # one pass removes the client's keys, other vendors' headers, the body's old framing and, toward
    # another host, everything off the allowlist
    drop = {*_key_headers(), *foreign_headers(get(client) if client is not None else None, tc)}
    if body:
        drop.update(("content-encoding", "transfer-encoding"))
    if same_host:
        _remove(headers, drop.__contains__)
    else:
        allowed = _forward_by_target(target)
        drop.update(_never_forward())
        _remove(headers, lambda h: h in drop or h.startswith(_NEVER_PREFIXES)
                or not (h in FORWARD_HEADERS or h in allowed or h.startswith(_FORWARD_PREFIXES)))
    if key:
        headers.update(tc.wire.credentials.auth_headers(key, upstream_host))
    for name, value in tc.wire.credentials.default_headers.items():
        if name not in headers:
            headers[name] = value
    headers["accept-encoding"] = "identity"
    if body:
        headers["content-type"] = "application/json"
