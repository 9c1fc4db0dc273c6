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
* The flow's own secrets (:func:`flow_secrets`: values of its credential headers, cookies and
  credential query parameters, the access key id and signature of an AWS SigV4 ``authorization``,
  plus what the caller passes: the client's credential a route removed, the injected key, the
  credentials and signature a route's ``auth`` sent), wherever they appear and however they are written (JSON, percent,
  HTML and base64 forms, see scrubber.py): bodies (an upstream error echoing the key), metadata
  strings, the comment, the error message. One placeholder everywhere: ``<redacted>``.
* Free text (bodies, metadata strings, the comment): common key shapes: ``sk-…`` (OpenAI,
  OpenRouter), ``sk-ant-…`` (Anthropic), ``AIza…`` (Google), ``gsk_…`` (Groq), ``xai-…``, ``hf_…``,
  GitHub tokens, AWS access key ids, JWTs, ``Bearer <token>``, and JSON string values of keys such
  as ``"api_key"``, ``"password"``, ``"access_token"``. Both in one linear pass (scrubber.py);
  compressed bodies are scanned as they decode (redact_body.py).

When it runs (the live flow keeps its credentials)
--------------------------------------------------
mitmproxy's ``Save`` (``-w``) serializes ``flow.get_state()`` in its ``response`` / ``error`` hook,
before a non-streamed response is even sent. The recorder gives every flow a ``get_state`` that
returns :func:`redacted_state` (a redacted copy; the live flow is untouched), and for big flows
:func:`redact_ahead` prepares that copy on the worker thread first (RedactAhead, the last ProxAI
addon), so the event loop never scans megabytes. :func:`redact_flow` redacts a flow in place
(offline tools, tests). A client replay of a redacted flow sends ``<redacted>`` — by design.

Everything here is idempotent and never raises on odd input.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from proxai_core.codecs import all_codecs

from ..wire.bodies import offload
from ..wire.credentials import seen_secrets
from .redact_body import redact_body
from .scrubber import REDACTED, Redactor

__all__ = [
    "REDACTED",
    "Redactor",
    "flow_secrets",
    "redacted_state",
    "SECRET_HEADERS",
    "SECRET_PARAMS",
    "redact_flow",
    "redact_header_value",
    "redact_headers",
    "redact_text",
    "redact_url",
    "redact_value",
]

_REDACTED_URL = "%3Credacted%3E"

#: Headers whose values are credentials (compared lower-case): every protocol's key headers and
#: the usual others.
SECRET_HEADERS = frozenset({h for c in all_codecs() for h in c.wire.credentials.key_headers}) | frozenset({
    "authorization",
    "proxy-authorization",
    "anthropic-api-key",
    "openai-api-key",
    "cookie",
    "set-cookie",
    "x-auth-token",
    "x-access-token",
    "ocp-apim-subscription-key",
})

#: A header *name* that says "secret" (custom gateways: ``x-portkey-api-key``, ``helicone-auth``).
_SECRET_HEADER_NAME = re.compile(
    r"(?:^|[-_])(?:api[-_]?key|apikey|secret|token|password|passwd|auth|credential|credentials|session)"
    r"(?:$|[-_])",
    re.IGNORECASE,
)

#: Query parameters whose values are credentials (compared lower-case, after unquoting): every
#: protocol's key parameters and key header names, and the usual others.
SECRET_PARAMS = frozenset({n for c in all_codecs() for n in (*c.wire.credentials.key_query, *c.wire.credentials.key_headers)
                           if n != "authorization"}) | frozenset({
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
    "x-amz-signature",
    "x-amz-credential",
    "code_verifier",
})

_URLISH = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'{}<>]+$")
_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s+\S")

_PLAIN = Redactor()


# ----------------------------------------------------------------------------- text and values
def redact_text(text: str, redactor: Redactor | None = None) -> str:
    """Mask the flow's secrets (``redactor``) and common key shapes inside free text."""
    return (redactor or _PLAIN).text(text)


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


def redact_header_value(name: str, value: str, r: Redactor | None = None) -> str:
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
    return redact_text(value, r)


def redact_headers(headers: Any, r: Redactor | None = None) -> None:
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
            redacted = [redact_header_value(low, v, r) for v in values]
            if redacted != values:
                headers.set_all(name, redacted)
        return
    for name in list(headers.keys()):
        value = headers[name]
        new: Any
        if isinstance(value, str):
            new = redact_header_value(str(name), value, r)
        elif isinstance(value, (bytes, bytearray)):
            new = redact_header_value(str(name), bytes(value).decode("utf-8", "surrogateescape"), r).encode(
                "utf-8", "surrogateescape")
        elif isinstance(value, list):
            new = [redact_header_value(str(name), v, r) if isinstance(v, str) else v for v in value]
        else:
            continue
        if new != value:
            headers[name] = new


def _redact_query(query: str, r: Redactor | None) -> str:
    if not query:
        return query
    out = []
    for piece in query.split("&"):
        name, eq, value = piece.partition("=")
        if eq and unquote(name).lower() in SECRET_PARAMS and value and value != _REDACTED_URL:
            out.append(f"{name}={_REDACTED_URL}")
        else:
            out.append(redact_text(piece, r))
    return "&".join(out)


def redact_url(url: str, r: Redactor | None = None) -> str:
    """A URL (or a path with a query) with query-string keys and userinfo passwords masked."""
    if not url or not isinstance(url, str):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url, r)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _pw = userinfo.partition(":")
        if colon:
            netloc = f"{user}:{_REDACTED_URL}@{hostport}"
        elif _looks_secret_user(user):
            netloc = f"{_REDACTED_URL}@{hostport}"
    query = _redact_query(parts.query, r)
    path = redact_text(parts.path, r)
    if netloc == parts.netloc and query == parts.query and path == parts.path:
        return url
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


def _looks_secret_user(user: str) -> bool:
    """A userinfo without a password is sometimes the key itself (``https://KEY@host``)."""
    return redact_text(unquote(user)) != unquote(user) or len(user) >= 24


def redact_value(value: Any, _key: str | None = None, r: Redactor | None = None) -> Any:
    """Redact a JSON-like value recursively (metadata): strings through :func:`redact_text`,
    values under secret-looking keys (header names, query parameter names) replaced."""
    if isinstance(value, dict):
        return {k: redact_value(v, str(k), r) for k, v in value.items()}
    if isinstance(value, list):
        # header pairs come back from the flow file as 2-item lists: [name, value]
        if len(value) == 2 and all(isinstance(x, (str, bytes)) for x in value):
            name = value[0].decode("latin-1") if isinstance(value[0], bytes) else value[0]
            if _is_secret_header(name):
                return [value[0], redact_value(value[1], name, r)]
        return [redact_value(v, _key, r) for v in value]
    if isinstance(value, tuple):
        # header pairs stored as (name, value)
        if len(value) == 2 and all(isinstance(x, (str, bytes)) for x in value):
            name = value[0].decode("latin-1") if isinstance(value[0], bytes) else value[0]
            return (value[0], redact_value(value[1], name, r))
        return tuple(redact_value(v, _key, r) for v in value)
    if isinstance(value, str):
        if _key is not None and (_is_secret_header(_key) or _key.lower() in SECRET_PARAMS):
            return redact_header_value(_key, value, r) if value else value
        if _URLISH.match(value):
            return redact_url(value, r)
        return redact_text(value, r)
    if isinstance(value, (bytes, bytearray)):
        new = (r or _PLAIN).data(bytes(value))
        return value if new == value else new
    return value


# ----------------------------------------------------------------------------- flows
def flow_secrets(flow: Any, extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The exact secrets of one flow: values of its credential headers (the client's, and the key
    injected upstream), credential query parameters, cookies, plus ``extra`` (e.g. the client's
    credential a route removed from the request)."""
    out = [s for s in extra if isinstance(s, str)]
    for part in ("request", "response"):
        msg = getattr(flow, part, None)
        headers = getattr(msg, "headers", None)
        if headers is None:
            continue
        for name, value in headers.items(multi=True):
            low = name.lower()
            if low in ("cookie", "set-cookie"):
                pieces = value.split(";") if low == "cookie" else value.split(";")[:1]
                out += [p.partition("=")[2].strip() for p in pieces]
            elif _is_secret_header(low):
                m = _SCHEME.match(value)
                out.append(value.split(None, 1)[1] if m and " " in value.strip() else value)
                if low == "authorization":  # a SigV4 signature's access key id and signature, each alone
                    out += seen_secrets({low: value})
    req = getattr(flow, "request", None)
    if req is not None:
        query = req.path.partition("?")[2]
        for piece in query.split("&"):
            name, eq, value = piece.partition("=")
            if eq and unquote(name).lower() in SECRET_PARAMS:
                out.append(unquote(value))
    return tuple(s.strip() for s in out if s and len(s.strip()) >= 8 and REDACTED not in s)


def redact_flow(flow: Any, *, bodies: bool = True, secrets: Iterable[str] = ()) -> None:
    """Redact what gets stored of ``flow`` in place (see the module docstring for *when*).

    The flow's own secrets (:func:`flow_secrets` plus ``secrets``) are removed everywhere: headers,
    URL, bodies, the metadata tree, the comment and the backup; so are the known key shapes.
    """
    r = Redactor(flow_secrets(flow, secrets))
    _redact_flow(flow, r, bodies)


def _redact_flow(flow: Any, r: Redactor, bodies: bool) -> None:
    req = getattr(flow, "request", None)
    if req is not None:
        redact_headers(req.headers, r)
        path = req.path
        new = redact_url(path, r)
        if new != path:
            req.path = new
        if bodies:
            redact_body(req, r)
    resp = getattr(flow, "response", None)
    if resp is not None:
        redact_headers(resp.headers, r)
        if bodies:
            redact_body(resp, r)
    err = getattr(flow, "error", None)
    if err is not None and isinstance(getattr(err, "msg", None), str):
        err.msg = redact_text(err.msg, r)
    md = getattr(flow, "metadata", None)
    if isinstance(md, MutableMapping):
        for k in list(md.keys()):
            md[k] = redact_value(md[k], str(k), r)
    comment = getattr(flow, "comment", None)
    if isinstance(comment, str) and comment:
        flow.comment = redact_text(comment, r)
    _redact_backup(flow, lambda f: _redact_flow(f, r, bodies))


_AHEAD = "_proxai_redacted"


def redacted_state(flow: Any, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """A redacted copy of ``flow.get_state()``; the live flow is not touched. Returns what
    :func:`redact_ahead` prepared when the flow has not changed since."""
    cls = type(flow)
    state = cls.get_state(flow)
    ahead = flow.__dict__.get(_AHEAD)
    if ahead is not None and ahead[0] == state:  # bodies compare by identity first: cheap
        return ahead[1]
    return _redact_state(cls, copy.deepcopy(state), flow_secrets(flow, secrets))


def _redact_state(cls: Any, own: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """``own``: a deep copy nobody else touches (it may be redacted in a worker thread)."""
    tmp = cls.from_state(own)
    _redact_flow(tmp, Redactor(secrets), True)
    return cls.get_state(tmp)


async def redact_ahead(flow: Any, secrets: Iterable[str] = ()) -> None:
    """Prepare the redacted state in a worker thread (big flows), so the writer that calls
    ``get_state`` right after (mitmproxy's ``Save``) does not scan megabytes on the event loop."""
    cls = type(flow)
    state = cls.get_state(flow)
    snapshot = copy.deepcopy(state)  # bytes and str are shared, not copied: cheap
    red = await offload(_redact_state, cls, copy.deepcopy(state), flow_secrets(flow, secrets))
    flow.__dict__[_AHEAD] = (snapshot, red)


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
