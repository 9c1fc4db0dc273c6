"""Annotation: what every LLM flow carries after ProxAI saw it.

At the end of a flow (``response`` / ``error``, after the translation addon) the flow's state becomes
its :class:`~.record.FlowRecord` in ``flow.metadata["proxai"]``; the StopInfo becomes the flow's
comment and, for non-ok reasons, a marker; one INFO line is logged. A flow read from a file keeps its
record and gets the log line only; one recorded without the addon is observed from its bodies first
(offline.py).

A generation's session (session.py) is found here: the client's session header is read when the
request's headers arrive, before a route rewrites them; the prefix fingerprints when the flow ends
(after the client was answered), off the event loop for a big request.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

from mitmproxy import http

from proxai_core import StopReason

from ..flow.offline import offline_state
from ..flow.record import FlowRecord
from ..flow.session import note_session_header, session_header, session_of_state
from ..flow.state import FlowState, flow_state, record_dict, scrub
from ..wire.bodies import offload
from ..wire.escape import escape

logger = logging.getLogger(__name__)

__all__ = ["MARKERS", "Annotator", "log_line"]

#: one mitmproxy marker per non-ok reason (filter with ``~marker :no_entry:`` or by comment)
MARKERS: dict[StopReason, str] = {
    StopReason.REFUSAL: ":no_entry:",
    StopReason.MAX_OUTPUT: ":scissors:",
    StopReason.CONTEXT_FULL: ":package:",
    StopReason.PAUSED: ":pause_button:",
    StopReason.INTERRUPTED: ":electric_plug:",
    StopReason.REJECTED: ":x:",
    StopReason.OTHER: ":grey_question:",
}
_OUR_MARKERS = frozenset(MARKERS.values())
_LOGGED_ATTR = "_proxai_logged"
#: requests larger than this (bytes) are decoded and fingerprinted in the worker thread (below, it
#: takes about a millisecond)
SESSION_THREAD_BYTES = 256 * 1024


class Annotator:
    """Writes the record, comment and marker once per flow; logs one line."""

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        note_session_header(flow)  # before a route rewrites the headers (the router reads it too)

    def response(self, flow: http.HTTPFlow) -> Coroutine[Any, Any, None] | None:
        return self._finish(flow)

    def error(self, flow: http.HTTPFlow) -> Coroutine[Any, Any, None] | None:
        return self._finish(flow)

    @classmethod
    def _finish(cls, flow: http.HTTPFlow) -> Coroutine[Any, Any, None] | None:
        state = flow_state(flow) if flow.live else offline_state(flow)
        if state is None:
            return None
        if not state.annotated:
            if _wants_session(state) and _request_size(flow, state) > SESSION_THREAD_BYTES:
                return cls._finish_later(flow, state)  # only this flow waits for its fingerprints
            annotate(flow, state)
        cls._log(flow, state)
        return None

    @classmethod
    async def _finish_later(cls, flow: http.HTTPFlow, state: FlowState) -> None:
        state.session = await offload(session_of_state, state, session_header(flow))
        if not state.annotated:
            annotate(flow, state)
        cls._log(flow, state)

    @staticmethod
    def _log(flow: http.HTTPFlow, state: FlowState) -> None:
        if not getattr(flow, _LOGGED_ATTR, False):
            setattr(flow, _LOGGED_ATTR, True)
            if _info_shown():  # built only when a handler shows it (termlog_verbosity, mitmweb's event log)
                log_line(flow, state)


def _info_shown() -> bool:
    """True when an INFO record of this module's logger reaches a handler that would emit it (checked
    per flow: levels and handlers may change at any time)."""
    if not logger.isEnabledFor(logging.INFO):
        return False
    lg: logging.Logger | None = logger
    while lg is not None:
        if any(h.level <= logging.INFO for h in lg.handlers):
            return True
        lg = lg.parent if lg.propagate else None
    return logging.lastResort is not None and logging.lastResort.level <= logging.INFO


def _wants_session(state: FlowState) -> bool:
    return state.kind == "generate" and state.session is None


def _request_size(flow: Any, state: FlowState) -> int:
    if state.client_text is not None:
        return len(state.client_text)
    return len(getattr(getattr(flow, "request", None), "raw_content", None) or b"")


def annotate(flow: Any, state: FlowState) -> None:
    """Write the record, the comment and the marker."""
    if _wants_session(state):
        state.session = session_of_state(state, session_header(flow))
    state.annotated = True
    FlowRecord.write_dict(flow, record_dict(state))  # typed when read (FlowRecord.of)
    stop = state.stop
    if stop is not None:
        flow.comment = escape(scrub(stop.describe(), state.secrets) or "", multiline=True)
        marker = MARKERS.get(stop.reason)
        if marker:
            flow.marked = marker
        elif flow.marked in _OUR_MARKERS:
            flow.marked = ""


def log_line(flow: Any, state: FlowState) -> None:
    client = state.client_protocol.value if state.client_protocol else "?"
    upstream = state.upstream_protocol.value if state.upstream_protocol else "?"
    route = f"route {state.route}" if state.route else "pass-through"
    if state.replay is not None and state.replay.get("result") in ("hit", "miss", "forwarded"):
        route += f", replay {state.replay['result']}"
    if state.stop is not None:
        what = state.stop.describe()
    elif state.kind == "generate":
        what = "stop unknown (no response body)"
    elif state.kind == "websocket":
        what = "WebSocket upgrade refused (426): the client falls back to HTTP streaming"
    else:
        what = state.kind
    if len(what) > 240:
        what = what[:239] + "…"
    status = flow.response.status_code if getattr(flow, "response", None) is not None else "-"
    peer = getattr(getattr(flow, "client_conn", None), "peername", None)
    # one escape pass over the whole line (network text: no raw escapes; the rest has no controls)
    logger.info("%s", escape(f"proxai: {client} → {upstream} ({route}), {state.model or 'model ?'}, {status}: "
                             f"{scrub(what, state.secrets)}"), extra={"client": peer} if peer else None)
