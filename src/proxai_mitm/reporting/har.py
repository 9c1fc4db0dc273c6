"""HAR export (``--set hardump=x.har``, the ``save.har`` command) redacted, client-side, annotated.

mitmproxy's ``SaveHar`` builds one entry per flow with ``flow_entry``; this addon wraps that method
on mitmproxy's own instance, so both the option and the command go through it. Each entry is built
from a copy of the flow that

- is redacted like a recording (``proxai_redact``): credential headers, URLs, the flow's own
  secrets and key shapes in bodies (redact.py);
- pairs the client's request (method, URL, headers and body as the client sent them, captured in
  ``request`` before any rewrite) with the response the client got, not the translated upstream
  request; flows read from a file have no captured request: the URL is then the upstream's and the
  body the client's (from the flow record);
- has bodies decoded within the body cap (bodies.py): a compression bomb becomes a note, never
  inflated by the exporter;

and the entry carries the StopInfo: ``comment`` is its one-line description, ``_proxai`` the flow
record without its body copies (stop, usage, protocols, models, route, translation, warnings).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from mitmproxy import ctx, http

from ..flow.record import FlowRecord
from ..flow.state import flow_state
from ..redaction.redact import (
    Redactor,
    flow_secrets,
    redact_headers,
    redact_url,
    redact_value,
    redacted_state,
)
from ..wire.bodies import BodyError, body_limit, codings, decode

logger = logging.getLogger(__name__)

__all__ = ["HarExport", "har_flow"]

_CLIENT_ATTR = "_proxai_client_request"
#: record fields that are body copies: not repeated in the entry's ``_proxai``
_BODY_FIELDS = ("client_request", "upstream_response", "upstream_chunks", "upstream_headers")


def _redacting() -> bool:
    try:
        return bool(ctx.options.proxai_redact)
    except Exception:  # noqa: BLE001 - option not declared (tests, tools)
        return True


def _cap() -> int:
    try:
        return body_limit()
    except Exception:  # noqa: BLE001
        from ..wire.bodies import DEFAULT_LIMIT

        return DEFAULT_LIMIT


def _plain_body(msg: Any) -> None:
    """Decode a copy's body within the cap (mitmproxy's exporter would decode it without one)."""
    ce = msg.headers.get("content-encoding")
    if not codings(ce) or msg.raw_content is None:
        return
    try:
        msg.raw_content = decode(msg.raw_content, ce, _cap())
    except BodyError as e:
        msg.raw_content = f"[proxai: body not exported: {e}]".encode()
    msg.headers.pop("content-encoding", None)


def har_flow(flow: http.HTTPFlow) -> http.HTTPFlow:
    """The flow as the HAR shows it: redacted, the client's request with the client's response."""
    state = flow_state(flow)
    extra = state.secrets if state is not None else ()
    redact = _redacting()
    cls = type(flow)
    st = redacted_state(flow, extra) if redact else copy.deepcopy(cls.get_state(flow))
    out: http.HTTPFlow = cls.from_state(st)  # type: ignore[assignment]
    r = Redactor(flow_secrets(flow, extra)) if redact else None
    client = getattr(flow, _CLIENT_ATTR, None)
    if client is not None:
        req = out.request
        req.method, req.scheme, req.host, req.port, path, req.http_version, headers = client
        req.headers = headers.copy()
        req.path = redact_url(path, r) if r is not None else path
        if r is not None:
            redact_headers(req.headers, r)
    rec = FlowRecord.of(flow)
    if rec is not None and rec.client_request is not None:
        body = rec.client_request.encode("utf-8", "surrogatepass")
        out.request.headers.pop("content-encoding", None)
        out.request.raw_content = r.data(body) if r is not None else body
    _plain_body(out.request)
    if out.response is not None:
        _plain_body(out.response)
    return out


def _annotation(flow: http.HTTPFlow) -> tuple[str, dict[str, Any] | None]:
    rec = FlowRecord.of(flow)
    if rec is None:
        return "", None
    info = rec.stop_info()
    comment = info.describe() if info is not None else ""
    data = {k: v for k, v in rec.dump().items() if k not in _BODY_FIELDS}
    if _redacting():
        state = flow_state(flow)
        r = Redactor(flow_secrets(flow, state.secrets if state else ()))
        comment, data = r.text(comment), redact_value(data, None, r)
    return comment, data


def _interactive(master: Any) -> bool:
    """mitmproxy / mitmweb (not mitmdump): the user may run save.har at any time."""
    return type(master).__name__ != "DumpMaster"


class HarExport:
    """Keeps the client's request of each live flow and makes mitmproxy's HAR export use
    :func:`har_flow` and carry the StopInfo. Runs first among the ProxAI addons (before any rewrite)."""

    def __init__(self) -> None:
        self._wrapped: Any = None
        self._configured = False

    def load(self, loader: Any) -> None:
        self._wrap()

    def running(self) -> None:
        self._wrap()

    def configure(self, updated: set[str]) -> None:
        # mitmdump exports a HAR only with hardump; the interactive tools may run save.har any time.
        # Not needed: the capture hook is switched off (mitmproxy skips a hook that is None).
        if "hardump" not in updated and self._configured:
            return
        self._configured = True
        needed = bool(getattr(ctx.options, "hardump", "")) or _interactive(ctx.master)
        if needed:
            self.__dict__.pop("request", None)
        else:
            self.request = None  # type: ignore[assignment]

    def _wrap(self) -> None:
        savehar = ctx.master.addons.get("savehar")
        if savehar is None or self._wrapped is savehar:
            return
        original = savehar.flow_entry

        def flow_entry(flow: http.HTTPFlow, servers_seen: set[Any]) -> dict:
            try:
                view = har_flow(flow)
            except Exception:  # noqa: BLE001 - never export an unredacted flow by accident
                logger.exception("proxai: HAR: could not prepare %s; exported without bodies and headers",
                                 getattr(flow, "id", "?"))
                view = flow.copy()
                for msg in (view.request, view.response):
                    if msg is not None:
                        msg.headers = http.Headers()
                        msg.raw_content = b""
            entry = original(view, servers_seen)
            comment, record = _annotation(flow)
            if comment:
                entry["comment"] = comment
            if record is not None:
                entry["_proxai"] = record
            return entry

        savehar.flow_entry = flow_entry
        self._wrapped = savehar

    def request(self, flow: http.HTTPFlow) -> None:
        if not flow.live or hasattr(flow, _CLIENT_ATTR):
            return
        req = flow.request
        setattr(flow, _CLIENT_ATTR, (req.method, req.scheme, req.host, req.port, req.path, req.http_version,
                                     req.headers.copy()))
