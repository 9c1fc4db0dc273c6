"""Which requests are LLM requests, where a routed one goes, and what its headers become.

Pure functions over plain values (no mitmproxy objects), so they are cheap to test.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxai_core import Protocol

from .config import BaseURL

__all__ = [
    "ENDPOINT_PATH",
    "FORWARD_HEADERS",
    "Endpoint",
    "forwardable",
    "client_credential",
    "is_azure_host",
    "recognize",
    "rewrite_headers",
    "sniff_protocol",
    "upstream_target",
]

#: generation endpoint of each protocol (after the version prefix)
ENDPOINT_PATH = {
    Protocol.CHAT: "/chat/completions",
    Protocol.RESPONSES: "/responses",
    Protocol.ANTHROPIC: "/messages",
}
_SUFFIXES = tuple((s, p) for p, s in ENDPOINT_PATH.items())
_COUNT_TOKENS = "/messages/count_tokens"
_MODEL_ONE = re.compile(r"^(.*)/models/([^/]+)$")
_VERSIONED = re.compile(r"/v\d+(?:alpha|beta)?\d*$")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A recognized LLM endpoint.

    kind: ``generate`` | ``count_tokens`` | ``models`` (list) | ``model`` (one, ``model_id``).
    ``protocol`` is the client's protocol (None for model lists: both OpenAI and Anthropic serve
    ``GET /v1/models``; the format is chosen from the request headers).
    """

    kind: str
    protocol: Protocol | None
    prefix: str
    query: str = ""
    model_id: str | None = None
    websocket: bool = False

    @property
    def generate_paths(self) -> tuple[str, ...]:
        """The generation paths that share this endpoint's prefix (route matching of aux endpoints)."""
        if self.kind == "count_tokens":
            return (self.prefix + "/messages",)
        return tuple(self.prefix + s for s, _ in _SUFFIXES)


def recognize(method: str, path: str, headers: Mapping[str, str] | None = None) -> Endpoint | None:
    """Recognize by method and path suffix. The JSON body is checked by the caller."""
    p, _, q = path.partition("?")
    if len(p) > 1:
        p = p.rstrip("/")
    method = method.upper()
    if method == "POST":
        if p.endswith(_COUNT_TOKENS):
            return Endpoint("count_tokens", Protocol.ANTHROPIC, p[: -len(_COUNT_TOKENS)], q)
        for suffix, proto in _SUFFIXES:
            if p.endswith(suffix):
                return Endpoint("generate", proto, p[: -len(suffix)], q)
        return None
    if method == "GET":
        upgrade = (headers or {}).get("upgrade", "")
        if upgrade.lower() == "websocket":
            if p.endswith("/responses"):
                return Endpoint("generate", Protocol.RESPONSES, p[: -len("/responses")], q, websocket=True)
            return None
        if p.endswith("/models"):
            return Endpoint("models", None, p[: -len("/models")], q)
        m = _MODEL_ONE.match(p)
        if m and m.group(2):
            return Endpoint("model", None, m.group(1), q, model_id=m.group(2))
    return None


def sniff_protocol(body: Mapping[str, Any]) -> Protocol | None:
    """A best guess of which protocol a request body is written in (for "wrong protocol" 400s).

    Only decisive shapes count: ``input`` without ``messages`` is Responses; ``messages`` with a
    top-level ``system`` or ``max_tokens`` + content blocks typed ``tool_use``/``tool_result`` is
    Anthropic; a ``messages`` list with a ``system``/``developer``/``tool`` role is Chat.
    """
    has_input = "input" in body
    msgs = body.get("messages")
    if has_input and msgs is None:
        return Protocol.RESPONSES
    if not isinstance(msgs, list):
        return None
    roles = {m.get("role") for m in msgs if isinstance(m, dict) and isinstance(m.get("role"), str)}
    if roles & {"system", "developer", "tool", "function"}:
        return Protocol.CHAT
    for m in msgs:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking"):
                    return Protocol.ANTHROPIC
                if isinstance(b, dict) and b.get("type") in ("image_url", "input_audio"):
                    return Protocol.CHAT
    return None


def looks_like_llm(body: Any) -> bool:
    return isinstance(body, dict) and ("model" in body or "messages" in body or "input" in body)


def _base_prefix(base: BaseURL) -> tuple[str, str | None]:
    """(prefix, explicit endpoint path or None) of a base URL."""
    bp = base.path
    for suffix, _ in _SUFFIXES:
        if bp.endswith(suffix):
            return bp[: -len(suffix)], bp
    if bp.endswith(_COUNT_TOKENS):
        return bp[: -len(_COUNT_TOKENS)], None
    if _VERSIONED.search(bp) or "/deployments/" in bp:
        return bp, None
    return bp + "/v1", None


def upstream_target(
    ep: Endpoint,
    target: Protocol,
    base: BaseURL | None,
    *,
    scheme: str,
    host: str,
    port: int,
    model_id: str | None = None,
) -> tuple[str, str, int, str]:
    """(scheme, host, port, path-with-query) the routed request goes to.

    ``base`` None keeps scheme/host/port and the client's path prefix (reverse mode, gateways).
    With a base URL: its path is the prefix, ``/v1`` is added unless it already ends in a version
    segment (``/v1``, ``/api/v1``, ``/v1beta``) or names an Azure deployment; a base URL that
    already ends in the protocol's endpoint (``…/responses``) is used as it is.
    """
    if base is None:
        prefix, explicit, query = ep.prefix, None, ep.query
    else:
        scheme, host, port = base.scheme, base.host, base.port
        prefix, explicit = _base_prefix(base)
        query = base.query
    if ep.kind == "generate":
        path = explicit if explicit and explicit.endswith(ENDPOINT_PATH[target]) else prefix + ENDPOINT_PATH[target]
    elif ep.kind == "count_tokens":
        path = prefix + _COUNT_TOKENS
    elif ep.kind == "models":
        path = prefix + "/models"
    else:
        path = prefix + "/models/" + (model_id or ep.model_id or "")
    return scheme, host, port, path + (f"?{query}" if query else "")


def is_azure_host(host: str) -> bool:
    h = host.lower()
    return h.endswith((".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"))


def client_credential(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    for name in ("x-api-key", "api-key"):
        v = headers.get(name)
        if v:
            return v.strip()
    return None


#: headers that carry or identify the client's account: dropped even toward the same host when the
#: credential is replaced
_ACCOUNT_HEADERS = (
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "openai-organization",
    "openai-project",
    "chatgpt-account-id",
    "anthropic-organization-id",
)
_ANTHROPIC_ONLY = ("anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access")
_OPENAI_ONLY = ("openai-beta", "openai-organization", "openai-project", "chatgpt-account-id")

#: what crosses to another host than the client addressed: framing, content negotiation, the
#: SDKs' harmless self-description and the target protocol's version headers. Everything else
#: (whatever its name: gateway keys, cookies, proxy credentials, tracing) stays behind.
FORWARD_HEADERS = frozenset({
    "host", "content-type", "content-length", "accept", "accept-language", "user-agent",
    "idempotency-key", "x-request-id",
})
_FORWARD_BY_TARGET = {
    Protocol.ANTHROPIC: frozenset(_ANTHROPIC_ONLY),
    Protocol.CHAT: frozenset({"openai-beta"}),
    Protocol.RESPONSES: frozenset({"openai-beta"}),
}
#: the official SDKs' platform headers (x-stainless-lang, -os, -arch, -runtime, -retry-count, ...)
_FORWARD_PREFIXES = ("x-stainless-",)


def forwardable(name: str, target: Protocol) -> bool:
    """May this request header go to a host the client did not address?"""
    n = name.lower()
    return n in FORWARD_HEADERS or n in _FORWARD_BY_TARGET.get(target, ()) or n.startswith(_FORWARD_PREFIXES)


ANTHROPIC_VERSION = "2023-06-01"


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
    for h in ("authorization", "x-api-key", "api-key"):
        headers.pop(h, None)
    if not same_host:
        for h in {n.lower() for n in headers.keys()}:
            if not forwardable(h, target):
                headers.pop(h, None)
    if target is Protocol.ANTHROPIC:
        if client is not Protocol.ANTHROPIC:
            for h in _OPENAI_ONLY:
                headers.pop(h, None)
        if key:
            headers["x-api-key"] = key
        if "anthropic-version" not in headers:
            headers["anthropic-version"] = ANTHROPIC_VERSION
    else:
        for h in _ANTHROPIC_ONLY:
            headers.pop(h, None)
        if client is not target:
            headers.pop("openai-beta", None)
        if key:
            if is_azure_host(upstream_host):
                headers["api-key"] = key
            else:
                headers["authorization"] = f"Bearer {key}"
    headers["accept-encoding"] = "identity"
    if body:
        headers.pop("content-encoding", None)
        headers.pop("transfer-encoding", None)
        headers["content-type"] = "application/json"
