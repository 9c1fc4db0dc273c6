"""Complete response bodies: translated, replaced by a native error, or only observed.

The translation addon (translate.py) decides which (``plan``); these functions do it.
"""

from __future__ import annotations

from typing import Any

import orjson
from mitmproxy import http

from proxai_core import (
    StreamTranslator,
    dumps,
    error_stop_info,
    response_from_stream,
    stream_from_response,
    translate_error,
    translate_response_result,
)

from .bodies import BodyError, decode, too_large_reply
from .errorhints import note_key_origin
from .protocols import DEFAULT_PROTOCOL
from .replies import native_error, set_body
from .state import FlowState

__all__ = ["decode_or_error", "finish_error", "observe_body", "translate_body", "unreadable"]

_SSE = "text/event-stream"


def stream_type(state: FlowState) -> str:
    """The content type of the client's stream: SSE, or its protocol's JSON framing."""
    return "text/event-stream; charset=utf-8" if state.client_sse else "application/json; charset=utf-8"


def decode_or_error(raw: bytes, content_encoding: str | None, limit: int) -> bytes | BodyError:
    try:
        return decode(raw, content_encoding, limit)
    except BodyError as e:
        return e


def unreadable(flow: http.HTTPFlow, state: FlowState, exc: BodyError) -> None:
    """An upstream body over the cap or not decodable: passed through untouched when nothing had to
    be translated, else the client's native 502 (it is never inflated past the cap)."""
    state.warnings.append(f"upstream body not read: {exc}")
    if state.translation in ("observe", "none"):
        return
    flow.response = too_large_reply(exc, state.client_protocol, request=False)
    state.stop = error_stop_info(flow.response.status_code, flow.response.content or b"")
    state.translation = "error"


def finish_error(state: FlowState, resp: http.Response, content: bytes) -> None:
    client, upstream = state.client_protocol, state.upstream_protocol
    state.stop = error_stop_info(resp.status_code, content, resp.headers) if state.kind == "generate" else None
    if state.route is not None and (upstream is not client or not _is_json(content)):
        target = client or DEFAULT_PROTOCOL
        st, native = translate_error(resp.status_code, content, upstream or target, target)
        set_body(resp, st, orjson.dumps(native), "application/json")
    elif state.route is None or upstream is client:
        state.translation = "observe"
    note_key_origin(state, resp)


def translate_body(state: FlowState, resp: http.Response, content: bytes, how: str) -> None:
    client, upstream = state.client_protocol, state.upstream_protocol
    assert client is not None and upstream is not None
    if how == "stream_whole":  # a stream that arrived whole (e.g. empty): translated at once, honest ending
        t = StreamTranslator(upstream, client, state.client_body, path=state.client_path,
                             refusal_in_content=state.refusal_in_content)
        sse = t.feed(content) + t.close()
        state.stop = t.stop
        state.warnings.extend(t.warnings)
        set_body(resp, 200, sse, stream_type(state))
        resp.headers["cache-control"] = "no-cache"
        return
    if how == "collect":
        res = response_from_stream(content, upstream, client, state.client_body, path=state.client_path,
                                   refusal_in_content=state.refusal_in_content)
        _take_result(state, res)
        set_body(resp, res.status, dumps(res.body), "application/json")
        return
    try:
        obj = orjson.loads(content)
    except orjson.JSONDecodeError:
        obj, why = None, "a body that is not JSON"
    else:
        why = "JSON that is not an object"
    if not isinstance(obj, dict):
        state.warnings.append(f"upstream answered 2xx with {why}")
        st, native = native_error(502, "api_error", f"upstream answered with {why}", client)
        set_body(resp, st, orjson.dumps(native), "application/json")
        state.stop = error_stop_info(st, native)
        state.translation = "error"
        return
    if how == "to_stream":
        sse, stop, warnings = stream_from_response(obj, upstream, client, state.client_body, path=state.client_path,
                                                   refusal_in_content=state.refusal_in_content)
        state.stop = stop
        state.warnings.extend(warnings)
        try:
            _take_result(state, translate_response_result(obj, upstream, upstream), stop=False)
        except Exception:  # noqa: BLE001 - usage is best effort
            pass
        set_body(resp, 200, sse, stream_type(state))
        resp.headers["cache-control"] = "no-cache"
    else:
        res = translate_response_result(obj, upstream, client, state.client_body, status=resp.status_code,
                                        path=state.client_path, refusal_in_content=state.refusal_in_content)
        _take_result(state, res)
        set_body(resp, res.status, dumps(res.body), "application/json")


def observe_body(state: FlowState, content: bytes, content_type: str) -> None:
    """StopInfo, usage and model of an untouched complete body."""
    proto = state.upstream_protocol
    if proto is None:
        return
    if _SSE in content_type.lower() or (state.client_stream and content.lstrip()[:1] == b"["):
        # an SSE stream, or a stream framed as one JSON array (the codec's reader tells them apart)
        t = StreamTranslator(proto, proto, state.client_body, path=state.client_path)
        t.feed(content)
        t.close()
        state.stop, state.usage = t.stop, t.usage
        state.warnings.extend(t.warnings)
        if t.model and not state.upstream_model:
            state.upstream_model = t.model
        return
    try:
        obj = orjson.loads(content)
    except orjson.JSONDecodeError:
        state.warnings.append("upstream answered 2xx with a body that is not JSON")
        return
    if isinstance(obj, dict):
        _take_result(state, translate_response_result(obj, proto, proto))
    else:
        state.warnings.append("upstream answered 2xx with JSON that is not an object")


def _take_result(state: FlowState, res: Any, *, stop: bool = True) -> None:
    if stop:
        state.stop = res.stop
        state.warnings.extend(res.warnings)
    state.usage = res.usage
    if res.model and not state.upstream_model:
        state.upstream_model = res.model


def _is_json(content: bytes) -> bool:
    try:
        orjson.loads(content)
        return True
    except orjson.JSONDecodeError:
        return False
