"""Failover: a routed generation whose route has fallbacks is answered by the first upstream that
does not fail before the client got a byte.

:class:`Failover` (after the router and replay): ``request`` sends the flow to the loopback
:class:`~..failover.server.AttemptServer` with a one-time token naming the flow's
:class:`~..failover.plan.FailoverPlan`; ``responseheaders`` (before the translation) tells the flow
which upstream answered, so the answer is translated from that upstream's protocol, and puts the
request that upstream got back into the flow (what the user sees and records). The flow stays one
mitmproxy flow. :class:`FallbackMark` (before the annotation) writes the attempts into the record
and marks a fallback answer in the StopInfo (``detail["fallback"]``), which the comment shows.

A route without fallbacks is never touched: both addons switch their hooks off while no route has
fallbacks, and a flow without a plan returns at its first test.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mitmproxy import ctx, http

from proxai_core import Plan, StopInfo, error_stop_info

from ..config.options import RouteOptions
from ..failover.client import Pool, tls_context
from ..failover.plan import FailoverPlan
from ..failover.server import COOLING, DEFAULT_COOLDOWN, TOKEN_HEADER, AttemptServer, reset_hint
from ..flow.errorhints import KEY_FROM, key_origin
from ..flow.state import FlowState, flow_state
from ..limits.store import CooldownStore, ProcessStore, RedisStore
from .idle import HEADER_TIMEOUT
from .router import FAILOVER, POOL_KEY

logger = logging.getLogger(__name__)

__all__ = ["ATTEMPTS", "FallbackMark", "Failover"]

#: ``state.extra`` keys: the attempts (plain values, for the record) and the token of a sent plan
ATTEMPTS = "attempts"
_TOKEN = "failover_token"
_TLS_OPTIONS = {"ssl_insecure", "ssl_verify_upstream_trusted_ca", "ssl_verify_upstream_trusted_confdir"}
_TASKS: set[asyncio.Task] = set()


class Failover:
    """Sends failover flows to the attempt server and reads back which upstream answered."""

    def __init__(self, options: RouteOptions, replaying: Callable[[], bool] = lambda: False) -> None:
        self.options = options
        self.replaying = replaying
        #: cooled upstreams and keys: this process's, or shared through Redis (proxai_redis)
        self.store: ProcessStore | RedisStore = ProcessStore()
        self.server: AttemptServer | None = None
        self.pool = Pool()
        self.header_timeout = float(HEADER_TIMEOUT)
        self._lock: asyncio.Lock | None = None
        self._warned_mode = False

    def local(self) -> ProcessStore:
        """The store read synchronously (a shared store keeps what it learns from Redis there)."""
        return self.store.local if isinstance(self.store, RedisStore) else self.store

    def cooldowns(self) -> CooldownStore:
        return self.store

    # ------------------------------------------------------------------------- options
    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if "proxai_redis" in updated:
            url = str(opts.proxai_redis).strip()
            self.store = RedisStore(url) if url else ProcessStore()
        if updated & _TLS_OPTIONS:
            self.pool.close()
            self.pool.tls = tls_context(bool(getattr(opts, "ssl_insecure", False)),
                                        getattr(opts, "ssl_verify_upstream_trusted_ca", None) or None,
                                        getattr(opts, "ssl_verify_upstream_trusted_confdir", None) or None)
        if "proxai_header_timeout" in updated:
            self.header_timeout = float(opts.proxai_header_timeout) or float(HEADER_TIMEOUT)
            if self.server is not None:
                self.server.header_timeout = self.header_timeout
        on = any(r.fallbacks or r.key_pool for r in self.options.routes)
        for name in ("request", "responseheaders", "response", "error"):
            if on:
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, None)  # mitmproxy skips a hook that is None
        if on and not self._warned_mode and str(getattr(opts, "mode", [""])[0]).startswith("upstream"):
            self._warned_mode = True
            logger.warning("proxai: fallback routes connect to their upstreams directly, not through the "
                           "upstream proxy of mitmproxy's upstream mode")

    def done(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.close()

    async def _ensure_server(self) -> AttemptServer:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.server is None:
                server = AttemptServer(self.pool, self.cooldowns, self.header_timeout)
                await server.start()
                self.server = server
            return self.server

    # ------------------------------------------------------------------------- hooks
    def request(self, flow: http.HTTPFlow) -> Any:
        state = flow_state(flow)
        if state is None or not flow.live or flow.response is not None or flow.error is not None:
            return None
        plan = state.extra.get(FAILOVER)
        if plan is None or state.replay is not None or self.replaying():
            return None
        if self.server is None or not self.server.running:
            return self._start_then_send(flow, state, plan)
        self._send(flow, state, plan, self.server)
        return None

    async def _start_then_send(self, flow: http.HTTPFlow, state: FlowState, plan: FailoverPlan) -> None:
        self._send(flow, state, plan, await self._ensure_server())

    @staticmethod
    def _send(flow: http.HTTPFlow, state: FlowState, plan: FailoverPlan, server: AttemptServer) -> None:
        req = flow.request
        host_header = req.host_header
        token = server.register(plan)
        state.extra[_TOKEN] = token
        req.url = f"http://127.0.0.1:{server.port}{req.path}"
        if host_header:
            req.host_header = host_header  # the upstream's own Host header travels on
        req.headers[TOKEN_HEADER] = token

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = flow_state(flow)
        if state is None:
            return
        if _TOKEN not in state.extra:
            if POOL_KEY in state.extra and flow.response is not None and flow.response.status_code in COOLING:
                self._cool_key(state, flow.response)
            return
        plan: FailoverPlan = state.extra[FAILOVER]
        req = flow.request
        req.headers.pop(TOKEN_HEADER, None)
        state.extra[ATTEMPTS] = [a.to_dict() for a in plan.attempts]
        if plan.answered is None:  # the attempt server answered itself, in the client's protocol
            state.synthetic = True
            state.translation = Plan.SYNTHETIC
            if plan.native is not None:
                state.stop = error_stop_info(*plan.native)
            return
        up = plan.upstreams[plan.answered]
        prep = plan.prepared
        state.upstream_protocol = up.protocol
        state.translated = up.protocol is not state.client_protocol
        if prep is not None and prep.request is not None:  # a fallback: the flow shows what it was sent
            sent = prep.request
            req.url, req.headers, req.content = sent.url, sent.headers, sent.content
        elif prep is not None:
            host_header = req.host_header
            req.url = f"{prep.scheme}://{_authority(prep.scheme, prep.host, prep.port)}{prep.target}"
            if host_header:
                req.host_header = host_header
        if prep is not None and prep.model:
            state.upstream_model = prep.model
        if plan.answered:
            state.extra[KEY_FROM] = key_origin(up) if up.api_key_env else state.extra.get(KEY_FROM)

    def _cool_key(self, state: FlowState, resp: http.Response) -> None:
        """A pooled key the upstream limited (a route without fallbacks) is skipped until its reset."""
        route = self.options.routes.find_name(state.route) if state.route else None
        if route is None:
            return
        hint = reset_hint(route.upstreams[0], [(k.encode("latin-1"), v.encode("latin-1", "replace"))
                                               for k, v in resp.headers.items(multi=True)], b"")
        until = time.time() + (hint if hint is not None else DEFAULT_COOLDOWN)
        self.local().put(state.extra[POOL_KEY], until)
        if isinstance(self.store, RedisStore):
            task = asyncio.get_running_loop().create_task(self.store.cool(state.extra[POOL_KEY], until))
            _TASKS.add(task)
            task.add_done_callback(_TASKS.discard)

    def response(self, flow: http.HTTPFlow) -> None:
        self._forget(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        state = self._forget(flow)
        if state is not None and ATTEMPTS not in state.extra:
            plan = state.extra.get(FAILOVER)
            if isinstance(plan, FailoverPlan):
                state.extra[ATTEMPTS] = [a.to_dict() for a in plan.attempts]

    def _forget(self, flow: http.HTTPFlow) -> FlowState | None:
        state = flow_state(flow)
        if state is None:
            return None
        token = state.extra.pop(_TOKEN, None)
        if token is not None and self.server is not None:
            self.server.forget(token)
        return state


class FallbackMark:
    """The StopInfo of an answer that came from a fallback says so (``detail["fallback"]``: the
    upstream's name and protocol)."""

    def response(self, flow: http.HTTPFlow) -> None:
        self._mark(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._mark(flow)

    @staticmethod
    def _mark(flow: http.HTTPFlow) -> None:
        state = flow_state(flow)
        if state is None or not flow.live:
            return
        plan = state.extra.get(FAILOVER)
        if not isinstance(plan, FailoverPlan) or not plan.answered or state.stop is None:
            return
        up = plan.upstreams[plan.answered]
        stop = state.stop
        detail = {**stop.detail, "fallback": f"{up.name} ({up.protocol.value})"}
        state.stop = StopInfo(stop.reason, stop.raw, stop.category, stop.message, stop.recommended_model, detail)


def _authority(scheme: str, host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"

