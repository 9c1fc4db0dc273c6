"""Auxiliary endpoints of a route: model lists in the client's format, local token estimates."""

from __future__ import annotations

from typing import Any

import orjson
from mitmproxy import http

from proxai_core import translate_error

from ..config.routes import RouteSet
from ..wire.protocols import DEFAULT_PROTOCOL, convert_models
from .replies import set_body
from .state import FlowState

__all__ = ["estimate_tokens", "finish_models"]


def estimate_tokens(body: Any) -> int:
    """About 4 characters per token over every string value except the model name."""
    total = 0
    stack = [v for k, v in body.items() if k != "model"] if isinstance(body, dict) else [body]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return max(1, (total + 3) // 4)


def finish_models(resp: http.Response, state: FlowState, content: bytes, routes: RouteSet) -> None:
    """The upstream's model list (or model, or error) in the client's format, with the route's
    client-side model names added."""
    client = state.client_protocol or DEFAULT_PROTOCOL
    upstream = state.upstream_protocol or DEFAULT_PROTOCOL
    if resp.status_code >= 400:
        st, native = translate_error(resp.status_code, content, upstream, client)
        set_body(resp, st, orjson.dumps(native), "application/json")
        return
    try:
        obj = orjson.loads(content)
    except orjson.JSONDecodeError:
        return
    route = next((r for r in routes if r.name == state.route), None)
    names = route.models.client_names() if route is not None else []
    out = convert_models(obj, state.kind, state.client_protocol, names, state.extra.get("model_id"))
    if out is not None:
        set_body(resp, resp.status_code, orjson.dumps(out), "application/json")
