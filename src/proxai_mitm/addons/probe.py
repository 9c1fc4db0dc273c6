"""Unreachable upstreams get the client's native 502, not mitmproxy's HTML page.

mitmproxy answers a failed connect itself (text/html 502) and gives addons no way to change that body.
So a routed request to an upstream that has not answered within ``SEEN_TTL`` seconds (the first
request to it, typically) or that failed within ``DEAD_TTL`` is preceded by a TCP connect: when that
fails the client gets a native 502. Steady traffic is never probed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mitmproxy import ctx, http

from proxai_core import stop_of_error
from proxai_core.neutral import Error, ErrorKind

from ..config.options import RouteOptions
from ..flow.replies import reply
from ..flow.state import FlowState, flow_state

logger = logging.getLogger(__name__)

__all__ = ["DEAD_TTL", "PROBE_TIMEOUT", "SEEN_TTL", "Probe"]

#: how long an upstream that refused a connection is probed before requests are sent to it
DEAD_TTL = 60.0
PROBE_TIMEOUT = 3.0
#: an upstream that answered within this many seconds is not probed before a request
SEEN_TTL = 600.0


def is_connect_error(msg: str) -> bool:
    m = msg.lower()
    if "client" in m:  # the client went away: says nothing about the upstream
        return False
    return any(s in m for s in ("connect", "errno", "resolve", "getaddrinfo", "name or service", "unreachable"))


class Probe:
    """Probes first contacts and recently dead upstreams of routed requests."""

    def __init__(self, options: RouteOptions | None = None, skip: Callable[[], bool] = lambda: False) -> None:
        self.options = options
        #: True while replay answers upstream requests (nothing to probe)
        self.skip = skip
        self._dead: dict[tuple[str, int], float] = {}
        self._seen: dict[tuple[str, int], float] = {}  # upstream -> last time it answered
        self.configure(set())  # no routes before the options are parsed

    def configure(self, updated: set[str]) -> None:
        """Flow hooks only while some route can send requests upstream (mitmproxy skips a hook that
        is None: pass-through flows pay no dispatch for probing). Runs after the routing and replay
        options are parsed (it comes after them in the addon list)."""
        on = self.options is None or (bool(self.options.routes) and not self.skip())
        for name in ("request", "responseheaders", "error"):
            if on:
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, None)

    def request(self, flow: http.HTTPFlow) -> Any:
        state = flow_state(flow)
        if state is None or state.route is None or not flow.live or flow.response or flow.error or self.skip():
            return None
        host, port = flow.request.host, flow.request.port
        now = time.monotonic()
        t = self._dead.get((host, port))
        if t is not None and now - t > DEAD_TTL:
            self._dead.pop((host, port), None)
            t = None
        if t is None and now - self._seen.get((host, port), -SEEN_TTL - 1) <= SEEN_TTL:
            return None
        if t is None:  # first contact
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # hooks called outside mitmproxy's loop (unit tests)
                return None
        if any(str(m).startswith(("upstream", "socks")) for m in getattr(ctx.options, "mode", []) or []):
            return None
        return self._probe(flow, state, host, port)

    async def _probe(self, flow: http.HTTPFlow, state: FlowState, host: str, port: int) -> None:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT)
        except (TimeoutError, OSError) as e:
            self._dead[(host, port)] = time.monotonic()
            reason = str(e) or type(e).__name__
            reply(flow, state, 502, "api_error", f"proxai: upstream {host}:{port} is unreachable: {reason}",
                  extra_headers={"x-should-retry": "true"})
            state.stop = stop_of_error(Error(kind=ErrorKind.INTERRUPTED, status=502,
                                             message=f"upstream {host}:{port} unreachable: {reason}"))
            return
        writer.close()
        self._dead.pop((host, port), None)
        self._seen[(host, port)] = time.monotonic()

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = flow_state(flow)
        if state is not None and flow.live and not state.synthetic:
            self._seen[(flow.request.host, flow.request.port)] = time.monotonic()

    def error(self, flow: http.HTTPFlow) -> None:
        state = flow_state(flow)
        if state is None or not flow.live or flow.response is not None or state.synthetic:
            return
        msg = flow.error.msg if flow.error else ""
        if is_connect_error(msg):
            self._dead[(flow.request.host, flow.request.port)] = time.monotonic()
            state.warnings.append(
                "the client got mitmproxy's own 502 page (a failed connect cannot be answered by an "
                "addon); retries within 60 s get a native 502"
            )
