"""Failover: a routed generation whose route has fallbacks is answered by the first upstream that
does not fail before the client got a byte. The flow stays one mitmproxy flow.

Two paths (docs/architecture.md weighs them with figures):

- **Direct** (the route's own upstream answered within SEEN_TTL and is not cooling): attempt 1 goes
  over mitmproxy's own connection, at no cost. When its response head carries a failover status,
  ``responseheaders`` takes the flow's stream over before anything went to the client: the fallbacks
  are tried from here (:func:`~..failover.server.attempt`), the answer's head replaces the flow's
  response, and its body is handed to mitmproxy's stream as if the first upstream had sent it, while
  that upstream's own remaining events are dropped (:class:`_Takeover`).
- **Through the attempt server** (an upstream not known to answer, or cooling): ``request`` sends the
  flow to the loopback :class:`~..failover.server.AttemptServer` with a one-time token naming its
  :class:`~..failover.plan.FailoverPlan`; connect, TLS and header-timeout failures fail over there.

Either way ``responseheaders`` (before the translation) tells the flow which upstream answered, so
the answer is translated from that upstream's protocol, and puts the request that upstream got into
the flow (what the user sees and records). :class:`FallbackMark` (before the annotation) writes the attempts into the record
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

import orjson
from mitmproxy import ctx, http
from mitmproxy.proxy.layers.http import (
    ErrorCode,
    ResponseData,
    ResponseEndOfMessage,
    ResponseProtocolError,
    ResponseTrailers,
)

from proxai_core import Plan, StopInfo, error_stop_info

from ..config.options import RouteOptions
from ..failover.client import Pool, tls_context
from ..failover.plan import HOP_BY_HOP, Attempt, FailoverPlan
from ..failover.server import (
    BODY_IDLE,
    TOKEN_HEADER,
    AttemptServer,
    Outcome,
    attempt,
    cool,
    cool_name,
    limited,
    reason_of,
    reset_hint,
)
from ..flow.errorhints import KEY_FROM, key_origin
from ..flow.state import FlowState, flow_state
from ..limits.store import CooldownStore
from ..wire import reach
from .idle import HEADER_TIMEOUT
from .limits import Limits
from .router import FAILOVER

logger = logging.getLogger(__name__)

__all__ = ["ATTEMPTS", "FallbackMark", "Failover"]

#: ``state.extra`` keys: the attempts (plain values, for the record) and the token of a sent plan
ATTEMPTS = "attempts"
_TOKEN = "failover_token"
_DIRECT = "failover_direct"
#: an upstream that answered within this many seconds gets attempt 1 over mitmproxy's own connection
SEEN_TTL = 600.0
_TLS_OPTIONS = {"ssl_insecure", "ssl_verify_upstream_trusted_ca", "ssl_verify_upstream_trusted_confdir"}
_TASKS: set[asyncio.Task] = set()


class Failover:
    """Sends failover flows to the attempt server and reads back which upstream answered."""

    def __init__(self, options: RouteOptions, replaying: Callable[[], bool] = lambda: False,
                 limits: Limits | None = None) -> None:
        self.options = options
        self.replaying = replaying
        #: cooled upstreams and keys: the one store (this process's, or shared through Redis)
        self.limits = limits if limits is not None else Limits(options)
        self.server: AttemptServer | None = None
        self.pool = Pool()
        self.header_timeout = float(HEADER_TIMEOUT)
        self._lock: asyncio.Lock | None = None
        self._warned_mode = False
        #: cooldown name of an upstream -> when it last answered (monotonic); one entry per upstream
        #: of the routes file
        self._seen: dict[str, float] = {}

    def cooldowns(self) -> CooldownStore:
        return self.limits.store

    # ------------------------------------------------------------------------- options
    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        if updated & _TLS_OPTIONS:
            self.pool.close()
            self.pool.tls = tls_context(bool(getattr(opts, "ssl_insecure", False)),
                                        getattr(opts, "ssl_verify_upstream_trusted_ca", None) or None,
                                        getattr(opts, "ssl_verify_upstream_trusted_confdir", None) or None)
        if "proxai_header_timeout" in updated:
            self.header_timeout = float(opts.proxai_header_timeout) or float(HEADER_TIMEOUT)
            if self.server is not None:
                self.server.header_timeout = self.header_timeout
        on = any(r.fallbacks for r in self.options.routes)
        for name in ("request", "responseheaders", "response", "error"):
            if on:
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, None)  # mitmproxy skips a hook that is None
        modes = list(getattr(opts, "mode", None) or [])
        if on and not self._warned_mode and any(str(m).startswith("upstream") for m in modes):
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
        name = cool_name(plan.upstreams[0])
        if plan.first.skip is None and time.monotonic() - self._seen.get(name, -SEEN_TTL) < SEEN_TTL \
                and self.limits.until(name) is None:
            state.extra[_DIRECT] = name  # attempt 1 on mitmproxy's own connection
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
        if _DIRECT in state.extra:
            return self._direct(flow, state)
        if _TOKEN not in state.extra:
            return None
        plan: FailoverPlan = state.extra[FAILOVER]
        self._answered(flow, state, plan)
        return None

    def _answered(self, flow: http.HTTPFlow, state: FlowState, plan: FailoverPlan) -> None:
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
        self._seen[cool_name(up)] = time.monotonic()
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

    # ------------------------------------------------------------------------- the direct path
    def _direct(self, flow: http.HTTPFlow, state: FlowState) -> Any:
        plan: FailoverPlan = state.extra[FAILOVER]
        resp = flow.response
        assert resp is not None
        primary = plan.upstreams[0]
        took = _took(flow)
        if resp.status_code not in plan.route.failover_statuses:
            self._seen[state.extra[_DIRECT]] = time.monotonic()
            plan.answered = 0
            plan.attempts.append(Attempt(primary.name, primary.protocol.value, flow.request.host, resp.status_code,
                                         "answered", took))
            state.extra[ATTEMPTS] = [a.to_dict() for a in plan.attempts]
            return None
        found = reach.find(flow)
        if found is None:
            logger.warning("proxai: failover: cannot reach mitmproxy's stream for %s; the first upstream's "
                           "answer stands", flow.request.pretty_url)
            plan.attempts.append(Attempt(primary.name, primary.protocol.value, flow.request.host, resp.status_code,
                                         f"HTTP {resp.status_code}", took))
            state.extra[ATTEMPTS] = [a.to_dict() for a in plan.attempts]
            return None
        # from now on the first upstream's body is held back, before the stream handles any of it
        return self._take_over(flow, state, plan, took, _Takeover(found))

    async def _take_over(self, flow: http.HTTPFlow, state: FlowState, plan: FailoverPlan, took: float,
                         takeover: _Takeover) -> None:
        """The first upstream failed with a status before the client got a byte: try the others and
        answer the flow's stream with what they say (or let the first answer through after all)."""
        resp = flow.response
        assert resp is not None
        req = flow.request
        primary = plan.upstreams[0]
        head = [(k.lower().encode("latin-1"), v.encode("latin-1", "replace")) for k, v in resp.headers.items(multi=True)]
        held = takeover.body()  # what of the failed body has arrived: its message, its reset hint
        hint = reset_hint(primary, head, held)
        plan.attempts.append(Attempt(primary.name, primary.protocol.value, req.host, resp.status_code,
                                     reason_of(resp.status_code, held), took, hint))
        first = plan.first
        first.method, first.target, first.body = req.method, req.path, req.raw_content or b""
        first.headers = [(k.lower().encode("latin-1"), v.encode("latin-1", "replace"))
                         for k, v in req.headers.items(multi=True) if k.lower().encode("latin-1") not in HOP_BY_HOP]
        store = self.limits.store
        soonest = limited(primary, resp.status_code, head, held)
        if soonest is not None:
            await cool(store, primary, first, soonest)
            out = await attempt(plan, self.pool, store, self.header_timeout, start=1, soonest=soonest,
                                last=(0, None, b"", first))
        else:
            out = await attempt(plan, self.pool, store, self.header_timeout, start=0, tried=1,
                                last=(0, None, b"", first))
        state.extra[ATTEMPTS] = [a.to_dict() for a in plan.attempts]
        if plan.answered == 0 and out.head is None:
            await takeover.release()  # nothing better: the first upstream's own answer stands
            return
        takeover.commit()
        if out.head is not None:
            resp.status_code = out.head.status_code
            resp.reason = out.head.reason.decode("latin-1", "replace")
            resp.headers = http.Headers([(k, v) for k, v in out.head.headers])
            self._answered(flow, state, plan)
            chunks = out.upstream.body(BODY_IDLE) if out.upstream is not None else _once(out.data)
        else:
            assert plan.native is not None
            status, doc = plan.native
            body = orjson.dumps(doc)
            resp.status_code = status
            resp.reason = ""
            resp.headers = http.Headers([(b"content-type", b"application/json"),
                                         (b"content-length", str(len(body)).encode()), *out.extra])
            self._answered(flow, state, plan)
            chunks = _once(body)
        task = asyncio.get_running_loop().create_task(self._pump(takeover, chunks, out))
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    async def _pump(self, takeover: _Takeover, chunks: Any, out: Outcome) -> None:
        """The answer's body into the flow's stream as it arrives; a cut becomes the stream's error."""
        sid = takeover.stream.stream_id
        try:
            async for chunk in chunks:
                if not await takeover.inject([ResponseData(sid, chunk)]):
                    raise ConnectionError("the client went away")
        except (TimeoutError, ConnectionError, OSError) as e:
            if out.upstream is not None:
                out.upstream.close()
            await takeover.inject([ResponseProtocolError(sid, f"fallback answer broke off: {e}",
                                                         ErrorCode.GENERIC_SERVER_ERROR)])
            return
        except Exception:
            logger.exception("proxai: failover: relaying the fallback's answer failed")
            if out.upstream is not None:
                out.upstream.close()
            await takeover.inject([ResponseProtocolError(sid, "fallback answer failed", ErrorCode.GENERIC_SERVER_ERROR)])
            return
        if out.upstream is not None:
            self.pool.release(out.upstream)
        await takeover.inject([ResponseEndOfMessage(sid)])

    def response(self, flow: http.HTTPFlow) -> None:
        self._forget(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        state = self._forget(flow)
        if state is not None and state.extra.get(_DIRECT) and flow.response is None:
            self._seen.pop(state.extra[_DIRECT], None)  # its next requests go through the attempt server
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


_RESPONSE_EVENTS = (ResponseData, ResponseEndOfMessage, ResponseTrailers, ResponseProtocolError)
#: events of the first upstream's failed answer held back (its body: error bodies are small)
MAX_HELD = 256


class _Takeover:
    """Stands in for a flow's stream in its HTTP layer while another upstream may answer it.

    Made in ``responseheaders``: the first upstream's response events (those already waiting in the
    stream's queue too) are held back. :meth:`commit`: another upstream answers, those events are
    dropped from then on, and :meth:`inject` hands the answer's events to the stream, which handles
    them as an upstream's (hooks, stream callable, the client). :meth:`release`: the first answer
    stands after all; the held events go to the stream and the stream takes its place back.
    """

    __slots__ = ("found", "stream", "inner", "carrier", "events", "held", "holding")

    def __init__(self, found: reach.Reach) -> None:
        self.found = found
        self.stream = found.stream
        self.inner = found.pairs[-1][0]
        self.carrier: Any = None
        self.events: list[Any] = []
        self.holding = True
        queue = self.stream._paused_event_queue  # delivered while its responseheaders hook runs
        self.held = [ev for ev in queue if isinstance(ev, _RESPONSE_EVENTS)]
        keep = [ev for ev in queue if not isinstance(ev, _RESPONSE_EVENTS)]
        queue.clear()
        queue.extend(keep)
        self.inner.streams[self.stream.stream_id] = self

    def handle_event(self, event: Any) -> Any:
        if event is self.carrier:
            for ev in self.events:
                yield from self.stream.handle_event(ev)
        elif isinstance(event, _RESPONSE_EVENTS):
            if self.holding and len(self.held) < MAX_HELD:
                self.held.append(event)  # the first upstream's: held while undecided, then dropped
        else:
            yield from self.stream.handle_event(event)

    def body(self) -> bytes:
        return b"".join(ev.data for ev in self.held if isinstance(ev, ResponseData))[:256 * 1024]

    def commit(self) -> None:
        self.holding = False
        self.held = []

    async def release(self) -> None:
        held, self.held, self.holding = self.held, [], False
        await self.inject(held)
        if self.inner.streams.get(self.stream.stream_id) is self:
            self.inner.streams[self.stream.stream_id] = self.stream

    async def inject(self, events: list[Any]) -> bool:
        """False when the stream is gone (the client left, the flow ended)."""
        if self.inner.streams.get(self.stream.stream_id) is not self:
            return False
        key = reach._route_key()
        self.carrier = reach._carrier(reach._Route(self.stream.flow.client_conn, key))
        self.events = events
        for layer, below in self.found.pairs:
            layer.connections[key] = below
        try:
            await self.found.handler.server_event(self.carrier)
        finally:
            for layer, _ in self.found.pairs:
                layer.connections.pop(key, None)
        return True


async def _once(data: bytes) -> Any:
    if data:
        yield data


def _took(flow: http.HTTPFlow) -> float:
    resp, req = flow.response, flow.request
    start, end = getattr(req, "timestamp_start", None), getattr(resp, "timestamp_start", None)
    return (end - start) * 1000 if start and end else 0.0


def _authority(scheme: str, host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"

