"""Credentials of routes with ``auth``: the final upstream request is signed or authorized here.

SigV4 covers the method, the URL, the headers and the body exactly as they are sent, so this runs
after everything that may rewrite a request: in ProxAI's list it comes after routing, model mapping,
body translation, replay redirection and probing; inside mitmproxy it moves itself, once running, to
the end of mitmproxy's own addon chain, after the scripts loaded after ProxAI and mitmproxy's own
request editors (``modify_body``, ``modify_headers``, ``map_remote``), which run after the scripts.
(A request edited by hand after an intercept is sent with the signature it had.) A credential that needs
fetching or renewing (instance metadata, SSO, a token endpoint) is fetched in a worker thread with a
bounded timeout, never on the event loop; only the flows that wait for it wait. A missing or failing
credential answers the client in its own protocol (401, or 502 when a service failed), naming the
profile or variable, never a secret. Every secret sent is added to the flow's secrets, so recordings,
exports, the record and log lines never carry it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mitmproxy import ctx, http

from ..config.options import RouteOptions
from ..config.routes import Route
from ..flow.replies import reply
from ..flow.state import FlowState, flow_state
from ..wire.credentials import AUTH_HEADERS, CredentialError, Source, Unavailable, make_source

logger = logging.getLogger(__name__)

__all__ = ["REFRESH_TIMEOUT", "LastSigner", "Signer"]

#: longest wait for a credential refresh (SSO, instance metadata, a token endpoint)
REFRESH_TIMEOUT = 20.0
#: bodies from this size are hashed for SigV4 in a worker thread
THREAD_BYTES = 1 << 20


class Signer:
    """Signs or authorizes the requests of routes whose target has ``auth``."""

    def __init__(self, options: RouteOptions) -> None:
        self.options = options
        self._sources: dict[str, Source] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: the addon at the end of mitmproxy's chain that signs instead of this one (while running)
        self.last: LastSigner | None = None

    def configure(self, updated: set[str]) -> None:
        self._switch()

    def _switch(self) -> None:
        # off unless some route has a credential source (mitmproxy skips a hook that is None), and
        # off here while the addon at the end of mitmproxy's chain signs
        on = any(r.auth for r in self.options.routes)
        if on and self.last is None:
            self.__dict__.pop("request", None)
        else:
            self.request = None  # type: ignore[assignment]
        if self.last is not None:
            self.last.switch(on)

    def running(self) -> None:
        try:
            addons = ctx.master.addons
        except AttributeError:  # no master (unit tests)
            return
        if self.last is not None or addons.get("scriptloader") is None or addons.get(LastSigner.name):
            return  # not loaded by mitmproxy's script loader: the place in ProxAI's list is the last
        last = LastSigner(self)
        addons.add(last)
        self.last = last
        self._switch()

    def done(self) -> None:
        last, self.last = self.last, None
        if last is not None:
            try:
                ctx.master.addons.remove(last)
            except Exception:  # noqa: BLE001 - mitmproxy shutting down: nothing left to remove
                pass

    def source(self, auth: str) -> Source:
        s = self._sources.get(auth)
        if s is None:
            s = self._sources[auth] = make_source(auth)
        return s

    def _route(self, state: FlowState | None) -> Route | None:
        if state is None or state.route is None or state.replay is not None:
            return None  # unrouted, or answered by the replay server (nothing leaves the machine)
        for r in self.options.routes:
            if r.name == state.route:
                return r if r.auth else None
        return None

    def request(self, flow: http.HTTPFlow) -> Any:
        return self.sign(flow)

    def sign(self, flow: http.HTTPFlow) -> Any:
        """Sign or authorize ``flow``'s request if its route has ``auth`` (a coroutine when a
        credential must be fetched, or the body is big)."""
        if not flow.live or flow.response or flow.error:
            return None
        state = flow_state(flow)
        route = self._route(state)
        if route is None or state is None:
            return None
        assert route.auth is not None
        src = self.source(route.auth)
        if src.ready() and len(flow.request.raw_content or b"") < THREAD_BYTES:
            try:
                self._apply(flow, state, src)
            except CredentialError as e:
                self._fail(flow, state, src, e)
            return None
        return self._refresh_then_apply(flow, state, route.auth, src)

    async def _refresh_then_apply(self, flow: http.HTTPFlow, state: FlowState, auth: str, src: Source) -> None:
        try:
            if not src.ready():
                lock = self._locks.setdefault(auth, asyncio.Lock())
                async with lock:  # one refresh at a time per source; the others wait for it
                    if not src.ready():
                        try:
                            await asyncio.wait_for(asyncio.to_thread(src.refresh), REFRESH_TIMEOUT)
                        except TimeoutError:
                            raise Unavailable(f"{src.label}: no answer within {REFRESH_TIMEOUT:.0f} s") from None
            await asyncio.to_thread(self._apply, flow, state, src)
        except CredentialError as e:
            self._fail(flow, state, src, e)
        except Exception as e:  # noqa: BLE001 - a library's unforeseen error: answered, never a traceback
            logger.warning("proxai: route %r: credential error %s", state.route, type(e).__name__)
            self._fail(flow, state, src, Unavailable(f"{src.label}: {type(e).__name__}"))

    @staticmethod
    def _apply(flow: http.HTTPFlow, state: FlowState, src: Source) -> None:
        req = flow.request
        for h in AUTH_HEADERS:  # the client's own (same host) and any earlier signature
            req.headers.pop(h, None)
        host = req.host_header or _authority(req.scheme, req.host, req.port)
        if "host" not in req.headers and not req.is_http2:
            req.headers["host"] = host  # the host SigV4 covers is sent as it was signed
        headers = {k: v for k, v in req.headers.items()}
        url = f"{req.scheme}://{host}{req.path}"
        added = src.authorize(req.method, url, headers, req.raw_content or b"", req.pretty_host)
        req.headers.update(added)
        sig = added["authorization"].rpartition("Signature=")[2] if "Signature=" in added["authorization"] else ""
        new = tuple(s for s in (*src.secrets(), sig) if len(s) >= 8 and s not in state.secrets)
        if new:
            state.secrets = (*state.secrets, *new)

    @staticmethod
    def _fail(flow: http.HTTPFlow, state: FlowState, src: Source, e: CredentialError) -> None:
        status = 502 if isinstance(e, Unavailable) else 401
        logger.warning("proxai: route %r: %s", state.route, e)
        reply(flow, state, status, "authentication" if status == 401 else "api_error",
              f"proxai: route {state.route!r}: {e}")


class LastSigner:
    """The signer's ``request`` hook at the end of mitmproxy's addon chain."""

    name = "proxai_signer"

    def __init__(self, signer: Signer) -> None:
        self.signer = signer

    def switch(self, on: bool) -> None:
        if on:
            self.__dict__.pop("request", None)
        else:
            self.request = None  # type: ignore[assignment]

    def request(self, flow: http.HTTPFlow) -> Any:
        if self.signer.last is self:
            return self.signer.sign(flow)
        return None


def _authority(scheme: str, host: str, port: int) -> str:
    h = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return h if port == (443 if scheme == "https" else 80) else f"{h}:{port}"
