"""Answers ProxAI gives itself: native error bodies in the client's protocol, body replacement."""

from __future__ import annotations

from typing import Any

import orjson
from mitmproxy import http
from mitmproxy.net.http import status_codes

from proxai_core import Plan, Protocol, error_stop_info
from proxai_core.codecs import get
from proxai_core.codecs import native_error as _native
from proxai_core.errors import parse_error
from proxai_core.neutral import Error, ErrorKind

from ..wire.protocols import DEFAULT_PROTOCOL
from .state import FlowState

__all__ = ["native_error", "reply", "reply_body", "set_body"]


def native_error(status: int, kind: str, message: str, protocol: Protocol | None) -> tuple[int, dict]:
    """A native error body of the client's protocol; ``kind`` is a neutral error kind
    (``invalid_request``, ``authentication``, ``api_error``, ...)."""
    return _native(Error(kind=ErrorKind(kind), message=message, status=status), protocol or DEFAULT_PROTOCOL)


def error_headers(protocol: Protocol | None, status: int, body: dict[str, Any]) -> dict[str, str]:
    """The headers a protocol gives its error bodies (an AWS client reads the error's type from
    ``x-amzn-errortype``), for a native body ProxAI wrote."""
    headers = get(protocol or DEFAULT_PROTOCOL).errors.headers
    return headers(parse_error(status, orjson.dumps(body))) if headers is not None else {}


def set_body(resp: http.Response, status: int, content: bytes, content_type: str) -> None:
    """Replace a response's status and body (framing headers dropped: mitmproxy sets its own)."""
    resp.status_code = status
    resp.reason = status_codes.RESPONSES.get(status, "")
    for h in ("content-encoding", "transfer-encoding", "content-length"):
        resp.headers.pop(h, None)
    resp.headers["content-type"] = content_type
    resp.content = content


def reply(flow: http.HTTPFlow, state: FlowState, status: int, kind: str, message: str,
          extra_headers: dict[str, str] | None = None) -> None:
    """Answer the client with its native error; the flow never reaches the upstream."""
    st, body = native_error(status, kind, message, state.client_protocol)
    reply_body(flow, state, st, body, extra_headers)


def reply_body(flow: http.HTTPFlow, state: FlowState, status: int, body: dict[str, Any],
               extra_headers: dict[str, str] | None = None) -> None:
    headers = {"content-type": "application/json", "x-should-retry": "false" if status < 500 else "true"}
    headers.update(error_headers(state.client_protocol, status, body))
    if extra_headers:
        headers.update(extra_headers)
    flow.response = http.Response.make(status, orjson.dumps(body), headers)
    state.synthetic = True
    state.translation = Plan.SYNTHETIC
    if state.kind in ("generate", "count_tokens"):
        state.stop = error_stop_info(status, body)
