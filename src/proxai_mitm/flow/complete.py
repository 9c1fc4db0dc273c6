"""Complete response bodies: translated, replaced by a native error, or only observed.

The translation addon (translate.py) decides which (``plan``); these functions do it.
"""

from __future__ import annotations

from mitmproxy import http

from proxai_core import Outcome, Plan, error_stop_info
from proxai_core.exchange import SSE_TYPE

from ..wire.bodies import BodyError, decode, too_large_reply
from .replies import set_body
from .state import FlowState

__all__ = ["apply_outcome", "decode_or_error", "unreadable"]


def decode_or_error(raw: bytes, content_encoding: str | None, limit: int) -> bytes | BodyError:
    try:
        return decode(raw, content_encoding, limit)
    except BodyError as e:
        return e


def unreadable(flow: http.HTTPFlow, state: FlowState, exc: BodyError) -> None:
    """An upstream body over the cap or not decodable: passed through untouched when nothing had to
    be translated, else the client's native 502 (it is never inflated past the cap)."""
    state.warnings.append(f"upstream body not read: {exc}")
    if state.translation in (Plan.OBSERVE, Plan.NONE):
        return
    flow.response = too_large_reply(exc, state.client_protocol, request=False)
    state.stop = error_stop_info(flow.response.status_code, flow.response.content or b"")
    state.translation = Plan.ERROR


def apply_outcome(state: FlowState, resp: http.Response, outcome: Outcome) -> None:
    """What the flow's exchange made of a complete upstream body: the client's response (when it
    differs from the upstream's) and the observations."""
    ex = state.exchange
    assert ex is not None
    state.translation = ex.plan
    if state.kind == "generate":
        state.stop = ex.stop
        state.usage = ex.usage
    elif state.kind == "count_tokens":
        state.count_tokens = ex.tokens
    if ex.model and not state.upstream_model:
        state.upstream_model = ex.model
    if outcome.body is not None:
        set_body(resp, outcome.status, outcome.body, outcome.content_type or "application/json")
        for name, value in (outcome.headers or {}).items():
            resp.headers[name] = value
        if outcome.content_type == SSE_TYPE or ex.plan in (Plan.TO_STREAM, Plan.STREAM_WHOLE):
            resp.headers["cache-control"] = "no-cache"
