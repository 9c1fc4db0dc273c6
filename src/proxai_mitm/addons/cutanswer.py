"""An upstream that breaks off before the client got a byte: the client's native 502, not mitmproxy's page.

When a connected upstream closes the connection before its response headers or inside a complete
(non-streamed) body, mitmproxy answers the client with its own text/html 502 page, which no SDK can
read, and gives addons no way to change it. In the ``error`` hook the flow's stream still waits for
that hook: this addon sends the client a 502 in its own protocol on the stream (reach.answer, any proxy
mode), then marks the stream's client side as errored so that mitmproxy drops the stream without
sending its page. The flow keeps its error and the upstream's partial response; the translation addon
has already made its StopInfo ``interrupted``. A failed connect is left to probe.py.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from mitmproxy import flow as mflow
from mitmproxy import http

from ..flow.replies import native_error
from ..flow.state import FlowState, flow_state
from ..wire import reach

logger = logging.getLogger(__name__)

__all__ = ["CutAnswer"]

#: the stream states in which the client has received nothing of the response yet
_NOTHING_SENT = ("state_wait_for_response_headers", "state_consume_response_body")


def cut_response(state: FlowState, reason: str) -> http.Response:
    """The client's native 502 for an upstream that broke off."""
    status, body = native_error(502, "api_error", f"proxai: the upstream connection broke off before the "
                                f"response was complete: {reason}", state.client_protocol)
    return http.Response.make(status, orjson.dumps(body), {
        "content-type": "application/json", "x-should-retry": "true", "x-proxai-error": "upstream-cut"})


class CutAnswer:
    """Answers LLM flows whose connected upstream failed before the client got anything."""

    def error(self, flow: http.HTTPFlow) -> Any:
        if not flow.live or flow.error is None or flow.error.msg == mflow.Error.KILLED_MESSAGE:
            return None
        if flow.response is not None and flow.response.stream:
            return None  # streamed: the client has the headers already
        state = flow_state(flow)
        if state is None or state.synthetic or state.client_protocol is None:
            return None
        server = flow.server_conn
        if server is None or (server.via is None and server.timestamp_tcp_setup is None):
            return None  # a direct connection never made: probe.py's case (a via connection has no TCP setup)
        found = reach.find(flow)
        # the request was complete (a client error leaves client_state errored) and nothing was sent
        if found is None or found.client_state != "state_done" or found.state not in _NOTHING_SENT:
            return None
        return self._answer(flow, state, found)

    async def _answer(self, flow: http.HTTPFlow, state: FlowState, found: reach.Reach) -> None:
        reason = flow.error.msg if flow.error else "upstream failed"
        resp = cut_response(state, reason)
        try:
            await reach.answer(found, resp)
        except Exception:  # noqa: BLE001 - mitmproxy's own page then
            logger.exception("proxai: could not answer %s natively", flow.request.pretty_url)
            return
        stream = found.stream
        # mitmproxy sends its error page only while the client side is not errored: ours went out
        stream.client_state = stream.state_errored
        state.warnings.append(f"the upstream broke off before the response was complete ({reason}); "
                              f"the client got a native {resp.status_code} error")
        logger.info("proxai: %s: upstream broke off (%s): answered %d", flow.request.pretty_url, reason,
                    resp.status_code)
