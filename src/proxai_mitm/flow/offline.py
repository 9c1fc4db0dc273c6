"""Flows read from a file (``mitmdump -nr``): never rewritten; the annotation addon annotates them.

A flow the addon recorded keeps its record (read through :meth:`FlowRecord.of`, any schema version);
a flow recorded without the addon is observed from its stored bodies like a pass-through flow.
"""

from __future__ import annotations

import orjson
from mitmproxy import http

from proxai_core import Plan, stop_of_error
from proxai_core.neutral import Error, ErrorKind

from ..wire import routing
from ..wire.protocols import request_model, request_stream
from .record import FlowRecord, read_body
from .state import FlowState, flow_state, open_exchange, set_flow_state

__all__ = ["offline_state"]


def offline_state(flow: http.HTTPFlow) -> FlowState | None:
    """The state of a flow read from a file (``mitmdump -nr``): the recorded record when there is one
    (left as it is), else observed from the stored bodies like a pass-through flow."""
    state = flow_state(flow)
    if state is not None:
        return state
    rec = FlowRecord.of(flow)
    if rec is not None:
        state = FlowState(rec.kind, rec.client_protocol, rec.upstream_protocol, rec.route, annotated=True,
                          client_model=rec.client_model, upstream_model=rec.upstream_model,
                          stop=rec.stop_info(), translation=rec.translation)
        if rec.version < 2 or rec.client_model is None:  # schema 1 kept no models
            state.client_model = _model_of(rec.client_body(flow))
            state.upstream_model = state.upstream_model or _model_of(read_body(flow.request))
        set_flow_state(flow, state)
        return state
    req = flow.request
    ep = routing.recognize(req.method, req.path, req.headers)
    if ep is None or ep.kind != "generate" or ep.websocket:
        return None
    try:
        body = orjson.loads(read_body(req) or b"")
    except orjson.JSONDecodeError:
        body = None
    if not routing.looks_like_llm(body):
        return None
    state = FlowState("generate", ep.protocol, ep.protocol, None, client_body=body, endpoint=ep,
                      client_stream=ep.stream if ep.stream is not None else request_stream(body, ep.protocol),
                      translation=Plan.OBSERVE, client_model=ep.model_id or request_model(body, ep.protocol))
    set_flow_state(flow, state)
    resp = flow.response
    try:
        if resp is not None:
            content = read_body(resp)
            if content is None:
                state.warnings.append("response body not stored (streamed without store_streamed_bodies)")
            else:
                ex = open_exchange(state)
                ex.respond(ex.client.protocol, resp.status_code, resp.headers.get("content-type", ""), routed=False)
                ex.complete(content)
                state.stop, state.usage = ex.stop, ex.usage
                if ex.model and not state.upstream_model:
                    state.upstream_model = ex.model
        if flow.error is not None and (state.stop is None or state.stop.ok):
            state.stop = stop_of_error(Error(kind=ErrorKind.INTERRUPTED, message=flow.error.msg, status=502))
    except Exception as exc:  # noqa: BLE001 - annotation is best effort offline
        state.warnings.append(f"could not read the response: {type(exc).__name__}: {exc}")
    return state


def _model_of(body: bytes | None) -> str | None:
    try:
        obj = orjson.loads(body or b"")
    except orjson.JSONDecodeError:
        return None
    return request_model(obj)
