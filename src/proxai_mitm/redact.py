"""Credentials out of what gets stored (option ``proxai_redact``, default true).

What is redacted
----------------
* Header values of :data:`SECRET_HEADERS` (``authorization``, ``proxy-authorization``,
  ``x-api-key``, ``api-key``, ``x-goog-api-key``, ``cookie``, ``set-cookie``, ...) and of any header
  whose *name* says it is a secret (``...-api-key``, ``...-token``, ``...-secret``, ``...-auth``).
  The auth scheme word is kept (``Bearer <redacted>``, ``Basic <redacted>``); cookies keep their
  names (``session=<redacted>; theme=<redacted>``) and ``set-cookie`` its attributes.
  ``openai-organization`` / ``openai-project`` / ``anthropic-version`` are not secrets and are kept.
* URLs: values of the query parameters in :data:`SECRET_PARAMS` (``key``, ``api_key``, ``token``,
  ``access_token``, ``sig``, ...) and the password of a ``user:password@`` userinfo. The placeholder
  is percent-encoded (``key=%3Credacted%3E``) so the URL stays valid.
* Free text (bodies, metadata strings, the comment): common key shapes (:func:`redact_text`):
  ``sk-…`` (OpenAI, OpenRouter), ``sk-ant-…`` (Anthropic), ``AIza…`` (Google), ``gsk_…`` (Groq),
  ``xai-…``, ``hf_…``, GitHub tokens, AWS access key ids, JWTs, ``Bearer <token>``, and JSON string
  values of keys such as ``"api_key"``, ``"password"``, ``"access_token"``.

When to call it (the live request must keep its credentials)
------------------------------------------------------------
mitmproxy's ``Save`` addon (``-w``) writes ``flow.get_state()`` of the *live* flow object from its
own ``response`` / ``error`` hook; there is no separate copy to redact. ``Save`` sits after script
addons in the chain, so the addon calls :func:`redact_flow` at the end of *its* ``response`` and
``error`` hooks: by then the request has already been sent upstream (the credentials did their job)
and the redacted state is what ``Save`` serializes (and what the UI shows from then on). Never call
it in ``request`` / ``requestheaders`` / ``responseheaders``: that would strip the key from the
request still to be sent. A client replay of a redacted flow sends ``<redacted>`` — by design.

Everything here is idempotent and never raises on odd input.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, MutableMapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = [
    "REDACTED",
    "SECRET_HEADERS",
    "SECRET_PARAMS",
    "redact_flow",
    "redact_header_value",
    "redact_headers",
    "redact_text",
    "redact_url",
    "redact_value",
]

REDACTED = "<redacted>"
_REDACTED_URL = "%3Credacted%3E"

#: Headers whose values are credentials (compared lower-case).
SECRET_HEADERS = frozenset({
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "anthropic-api-key",
    "openai-api-key",
    "cookie",
    "set-cookie",
    "x-auth-token",
    "x-access-token",
    "x-amz-security-token",
    "ocp-apim-subscription-key",
})

#: A header *name* that says "secret" (custom gateways: ``x-portkey-api-key``, ``helicone-auth``).
_SECRET_HEADER_NAME = re.compile(
    r"(?:^|[-_])(?:api[-_]?key|apikey|secret|token|password|passwd|auth|credential|credentials|session)"
    r"(?:$|[-_])",
    re.IGNORECASE,
)

#: Query parameters whose values are credentials (compared lower-case, after unquoting).
SECRET_PARAMS = frozenset({
    "key",
    "api_key",
    "api-key",
    "apikey",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth",
    "sig",
    "signature",
    "secret",
    "client_secret",
    "password",
    "x-goog-api-key",
    "x-amz-security-token",
    "x-amz-signature",
    "x-amz-credential",
    "code_verifier",
})

_URLISH = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'{}<>]+$")
_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s+\S")

# Key shapes in free text. Each pattern keeps a recognizable prefix (group 1) and redacts the rest.
_TEXT_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(sk-ant-)[A-Za-z0-9_\-]{8,}"), r"\1" + REDACTED),
    (re.compile(r"\b(sk-)(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{16,}"), r"\1" + REDACTED),
    (re.compile(r"\b(AIza)[0-9A-Za-z_\-]{30,}"), r"\1" + REDACTED),
    (re.compile(r"\b(gsk_)[A-Za-z0-9]{20,}"), r"\1" + REDACTED),
    (re.compile(r"\b(xai-)[A-Za-z0-9]{20,}"), r"\1" + REDACTED),
    (re.compile(r"\b(hf_)[A-Za-z0-9]{30,}"), r"\1" + REDACTED),
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{30,}"), r"\1" + REDACTED),
    (re.compile(r"\b(github_pat_)[A-Za-z0-9_]{30,}"), r"\1" + REDACTED),
    (re.compile(r"\b((?:AKIA|ASIA))[0-9A-Z]{16}\b"), r"\1" + REDACTED),
    (re.compile(r"\b(eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), r"\1" + REDACTED),
    (re.compile(r"\b(Bearer\s+)(?!<redacted>)(?=[A-Za-z\-._~+/]*\d)[A-Za-z0-9\-._~+/]{8,}=*", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"\b(Basic\s+)(?!<redacted>)(?=[A-Za-z+/]*\d)[A-Za-z0-9+/]{8,}=*"), r"\1" + REDACTED),
    # JSON (or JSON-ish) string values of secret keys: "api_key": "xyz" -> "api_key": "<redacted>"
    (re.compile(
        r"""(["'](?:api[_-]?key|apiKey|x-api-key|access_token|refresh_token|id_token|client_secret|"""
        r"""secret|password|passwd|authorization)["']\s*:\s*["'])(?!<redacted>)[^"'\\\n]+(["'])""",
        re.IGNORECASE),
     r"\1" + REDACTED + r"\2"),
]


# ----------------------------------------------------------------------------- text and values
def redact_text(text: str) -> str:
    """Mask common key shapes inside free text (bodies, metadata, comments)."""
    if not text or not isinstance(text, str):
        return text
    for pat, repl in _TEXT_PATTERNS:
        text = pat.sub(repl, text)
    return text


def _is_secret_header(name: str) -> bool:
    n = name.lower()
    return n in SECRET_HEADERS or bool(_SECRET_HEADER_NAME.search(n))


def _redact_cookie(value: str, set_cookie: bool) -> str:
    if set_cookie:
        first, sep, attrs = value.partition(";")
        name, eq, _ = first.partition("=")
        head = f"{name.strip()}={REDACTED}" if eq else REDACTED
        return head + (sep + attrs if sep else "")
    out = []
    for piece in value.split(";"):
        name, eq, _ = piece.partition("=")
        out.append(f"{name.strip()}={REDACTED}" if eq else REDACTED)
    return "; ".join(out)


def redact_header_value(name: str, value: str) -> str:
    """The stored form of one header value (``name`` decides how)."""
    n = name.lower()
    if n == "cookie":
        return _redact_cookie(value, False)
    if n == "set-cookie":
        return _redact_cookie(value, True)
    if _is_secret_header(n):
        if REDACTED in value:
            return value
        m = _SCHEME.match(value)
        if m and " " in value.strip():
            return f"{m.group(1)} {REDACTED}"
        return REDACTED
    return redact_text(value)


def redact_headers(headers: Any) -> None:
    """Redact credentials in place: a mitmproxy ``Headers`` (multi-valued) or any dict-like."""
    if headers is None:
        return
    if hasattr(headers, "get_all") and hasattr(headers, "set_all"):
        seen: set[str] = set()
        for name in list(headers.keys()):
            low = name.lower()
            if low in seen:
                continue
            seen.add(low)
            values = headers.get_all(name)
            new = [redact_header_value(low, v) for v in values]
            if new != values:
                headers.set_all(name, new)
        return
    for name in list(headers.keys()):
        value = headers[name]
        if isinstance(value, str):
            new = redact_header_value(str(name), value)
        elif isinstance(value, (bytes, bytearray)):
            new = redact_header_value(str(name), bytes(value).decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape")
        elif isinstance(value, list):
            new = [redact_header_value(str(name), v) if isinstance(v, str) else v for v in value]
        else:
            continue
        if new != value:
            headers[name] = new


def _redact_query(query: str) -> str:
    if not query:
        return query
    out = []
    for piece in query.split("&"):
        name, eq, value = piece.partition("=")
        if eq and unquote(name).lower() in SECRET_PARAMS and value and value != _REDACTED_URL:
            out.append(f"{name}={_REDACTED_URL}")
        else:
            out.append(redact_text(piece))
    return "&".join(out)


def redact_url(url: str) -> str:
    """A URL (or a path with a query) with query-string keys and userinfo passwords masked."""
    if not url or not isinstance(url, str):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _pw = userinfo.partition(":")
        if colon:
            netloc = f"{user}:{_REDACTED_URL}@{hostport}"
        elif _looks_secret_user(user):
            netloc = f"{_REDACTED_URL}@{hostport}"
    query = _redact_query(parts.query)
    path = redact_text(parts.path)
    if netloc == parts.netloc and query == parts.query and path == parts.path:
        return url
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


def _looks_secret_user(user: str) -> bool:
    """A userinfo without a password is sometimes the key itself (``https://KEY@host``)."""
    return redact_text(unquote(user)) != unquote(user) or len(user) >= 24


def redact_value(value: Any, _key: str | None = None) -> Any:
    """Redact a JSON-like value recursively (metadata): strings through :func:`redact_text`,
    values under secret-looking keys (header names, query parameter names) replaced."""
    if isinstance(value, dict):
        return {k: redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        # header pairs come back from the flow file as 2-item lists: [name, value]
        if len(value) == 2 and all(isinstance(x, (str, bytes)) for x in value):
            name = value[0].decode("latin-1") if isinstance(value[0], bytes) else value[0]
            if _is_secret_header(name):
                return [value[0], redact_value(value[1], name)]
        return [redact_value(v, _key) for v in value]
    if isinstance(value, tuple):
        # header pairs stored as (name, value)
        if len(value) == 2 and all(isinstance(x, (str, bytes)) for x in value):
            name = value[0].decode("latin-1") if isinstance(value[0], bytes) else value[0]
            return (value[0], redact_value(value[1], name))
        return tuple(redact_value(v, _key) for v in value)
    if isinstance(value, str):
        if _key is not None and (_is_secret_header(_key) or _key.lower() in SECRET_PARAMS):
            return redact_header_value(_key, value) if value else value
        if _URLISH.match(value):
            return redact_url(value)
        return redact_text(value)
    if isinstance(value, (bytes, bytearray)):
        try:
            s = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return value
        new = redact_value(s, _key)
        return new.encode("utf-8") if new != s else value
    return value


# ----------------------------------------------------------------------------- flows
def _redact_body(msg: Any) -> None:
    """Mask key shapes inside a text body, only when one is actually found (bodies are stored
    byte-exact otherwise, so replay keys and content-lengths stay what they were)."""
    if msg is None or getattr(msg, "raw_content", None) is None:
        return
    try:
        content = msg.get_content(strict=False)
    except Exception:  # noqa: BLE001 - undecodable content-encoding: leave it
        return
    if not content:
        return
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return
    new = redact_text(text)
    if new != text:
        try:
            msg.content = new.encode("utf-8")
        except Exception:  # noqa: BLE001
            return


def _redact_request(req: Any, bodies: bool = True) -> None:
    redact_headers(req.headers)
    path = req.path
    new = redact_url(path)
    if new != path:
        req.path = new
    if bodies:
        _redact_body(req)


def redact_flow(flow: Any, *, bodies: bool = True) -> None:
    """Redact what gets stored of ``flow`` in place (see the module docstring for *when*).

    Request headers, URL (path + query), response headers (``set-cookie`` ...), the metadata tree,
    the comment, the flow's backup (the pre-edit state mitmproxy also saves) and — when ``bodies``
    — key shapes inside request/response bodies.
    """
    req = getattr(flow, "request", None)
    if req is not None:
        _redact_request(req, bodies)
    resp = getattr(flow, "response", None)
    if resp is not None:
        redact_headers(resp.headers)
        if bodies:
            _redact_body(resp)
    md = getattr(flow, "metadata", None)
    if isinstance(md, MutableMapping):
        for k in list(md.keys()):
            md[k] = redact_value(md[k], str(k))
    comment = getattr(flow, "comment", None)
    if isinstance(comment, str) and comment:
        flow.comment = redact_text(comment)
    _redact_backup(flow, lambda f: redact_flow(f, bodies=bodies))


def _redact_backup(flow: Any, fn: Callable[[Any], None]) -> None:
    backup = getattr(flow, "_backup", None)
    if not backup:
        return
    try:
        cls = type(flow)
        state = copy.deepcopy(backup)
        bf = cls.from_state(state)
        bf._backup = None
        fn(bf)
        new = bf.get_state()
        new["backup"] = None
        flow._backup = new
    except Exception:  # noqa: BLE001 - a backup we cannot read is dropped rather than leaked
        flow._backup = None
