"""What an upstream error tells the user beyond the provider's words: where the key came from.

An upstream 401 / 403 on a route that injects a key from an environment variable reads to the client
like its own key was wrong (``invalid x-api-key``). The client's error message, the StopInfo (and so
the comment and the log line) say which variable the key came from; never the key itself.
"""

from __future__ import annotations

from typing import Any

import orjson
from mitmproxy import http

from proxai_core import Plan, StopInfo

from ..config.routes import Route, Upstream
from .replies import set_body
from .state import FlowState

__all__ = ["KEY_FROM", "key_origin", "note_key_origin"]

#: ``state.extra`` key: where the injected key came from (set by the router)
KEY_FROM = "key_from"
#: statuses that say the credential was refused
_AUTH_STATUSES = frozenset({401, 403})


def key_origin(route: Route | Upstream) -> str:
    """``$VARIABLE, route name`` for a route that injects a key from the environment."""
    where = "route default" if route.name == "default" else f"route {route.name!r}"
    return f"${route.api_key_env}, {where}"


def note_key_origin(state: FlowState, resp: http.Response) -> None:
    """Add ``(the key came from $VAR, route …)`` to a 401 / 403 error's message in the client's body
    and in the StopInfo, when the router injected the key from the environment."""
    origin = state.extra.get(KEY_FROM)
    status = state.upstream_status if state.upstream_status is not None else resp.status_code
    if not origin or status not in _AUTH_STATUSES:
        return
    note = f"(the key came from {origin})"
    try:
        body = orjson.loads(resp.content or b"")
    except orjson.JSONDecodeError:
        body = None
    if _add_note(body, note):
        set_body(resp, resp.status_code, orjson.dumps(body), "application/json")
        if state.translation is Plan.OBSERVE:
            state.translation = Plan.ERROR  # the client's body differs now: the record keeps the upstream's
    stop = state.stop
    if stop is not None and note not in (stop.message or ""):
        message = f"{stop.message} {note}" if stop.message else note
        state.stop = StopInfo(stop.reason, stop.raw, stop.category, message, stop.recommended_model, stop.detail)


def _add_note(body: Any, note: str) -> bool:
    """Every protocol's error body keeps its text at ``error.message`` (Anthropic, OpenAI, Gemini)."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return False
    msg = err.get("message")
    if not isinstance(msg, str) or note in msg:
        return False
    err["message"] = f"{msg} {note}" if msg else note
    return True
