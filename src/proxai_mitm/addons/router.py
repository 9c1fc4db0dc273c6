"""Routing and request rewrite: which route takes a request, where it goes, with which credential.

``requestheaders`` refuses a WebSocket upgrade on a routed ``/responses`` (426: the client falls back
to HTTP streaming). ``request`` recognizes LLM requests (generation, token counting, model lists),
creates the flow's :class:`~.state.FlowState`, and for a routed request translates the body, rewrites
URL and headers (:meth:`Router.forward`, the one retarget sequence) or answers natively (400 / 401).
Offline flows (``mitmdump -nr``) are never rewritten.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
from mitmproxy import ctx, http

from proxai_core import Plan, Protocol, TranslationError, dumps, error_response, error_stop_info
from proxai_core.codecs import get

from ..config.options import RouteOptions
from ..config.routes import Route, Upstream
from ..failover.plan import HOP_BY_HOP, FailoverPlan, Prepared
from ..flow.errorhints import KEY_FROM, key_origin
from ..flow.modellist import estimate_tokens
from ..flow.record import LIMIT_OPTIONS, safe_body_limit
from ..flow.replies import reply, reply_body
from ..flow.session import session_header
from ..flow.state import FlowState, flow_state, open_exchange, set_flow_state
from ..limits.store import key_name
from ..wire import routing
from ..wire.bodies import DEFAULT_LIMIT, BodyError, codings, decode, offload, too_large_reply
from ..wire.credentials import seen_secrets
from ..wire.protocols import (
    DEFAULT_PROTOCOL,
    counts_tokens,
    model_list_client,
    request_model,
    request_stream,
    set_request_model,
)
from .limits import Limits

logger = logging.getLogger(__name__)

__all__ = ["FAILOVER", "REPLAY_PLACEHOLDER_KEY", "Router", "retarget"]

#: the upstream key sent to the replay server when none is configured (nothing leaves the machine)
REPLAY_PLACEHOLDER_KEY = "proxai-replay-no-key"
#: request bodies from this size (compressed ones always: a few bytes can inflate to the cap) are
#: decoded and parsed in a worker thread
THREAD_BYTES = 1 << 20
_INVALID = object()
#: the ``state.extra`` key of a flow's FailoverPlan (a route with fallbacks)
FAILOVER = "failover"


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def retarget(flow: http.HTTPFlow, scheme: str, host: str, port: int, path: str) -> None:
    set_url(flow.request, scheme, host, port, path)


def set_url(req: http.Request, scheme: str, host: str, port: int, path: str) -> None:
    if (scheme, host, port) != (req.scheme, req.host, req.port):
        default = 443 if scheme == "https" else 80
        authority = host if port == default else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            authority = f"[{host}]" if port == default else f"[{host}]:{port}"
        req.url = f"{scheme}://{authority}{path}"
    else:
        req.path = path


class Router:
    """Routes recognized LLM requests (see the module docstring)."""

    def __init__(self, options: RouteOptions, replay_only: Callable[[], bool] = lambda: False,
                 limits: Limits | None = None) -> None:
        self.options = options
        #: key pools and their cooldowns (read synchronously: routing never waits)
        self.limits = limits if limits is not None else Limits(options)
        #: replay answers every upstream request: no key is needed (nothing leaves the machine)
        self.replay_only = replay_only
        self.body_limit = DEFAULT_LIMIT
        #: proxai_refusal_in_content, for routes that do not say
        self.refusal_in_content = False

    def configure(self, updated: set[str]) -> None:
        if updated & LIMIT_OPTIONS:
            self.body_limit = safe_body_limit()  # read once: an option lookup costs a copy
        if "proxai_refusal_in_content" in updated:
            self.refusal_in_content = bool(ctx.options.proxai_refusal_in_content)
        # the WebSocket refusal concerns routed flows only: without routes the hook is off (None is
        # skipped by mitmproxy's dispatch)
        if self.options.routes:
            self.__dict__.pop("requestheaders", None)
        else:
            self.requestheaders = None  # type: ignore[assignment]

    # ------------------------------------------------------------------------- hooks
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if not flow.live or flow.response or flow.error:
            return
        req = flow.request
        if req.method != "GET" or req.headers.get("upgrade", "").lower() != "websocket":
            return
        ep = routing.recognize(req.method, req.path, req.headers)
        if ep is None or not ep.websocket:
            return
        path = req.path.partition("?")[0]
        route = self.options.routes.find(req.host, path, None, alt_paths=(path,))
        if route is None:
            return
        state = FlowState("websocket", ep.protocol, route.protocol, route=route.name, translated=True)
        set_flow_state(flow, state)
        reply(flow, state, 426, "invalid_request",
              "proxai: WebSocket transport is not available on a translated route; use HTTP streaming (SSE)",
              extra_headers={"connection": "close", "upgrade": "websocket"})

    def request(self, flow: http.HTTPFlow) -> Any:
        if not flow.live or flow.response or flow.error:
            return None
        req = flow.request
        ep = routing.recognize(req.method, req.path, req.headers)
        if ep is None or ep.websocket:
            return None
        if ep.kind in ("models", "model"):
            return self._handle(flow, ep, None)
        raw, ce = req.raw_content or b"", req.headers.get("content-encoding")
        if codings(ce) or len(raw) > THREAD_BYTES:
            return self._handle_off_loop(flow, ep, raw, ce)  # only this flow waits for its body
        return self._handle(flow, ep, parse_body(raw, ce, self.body_limit))

    async def _handle_off_loop(self, flow: http.HTTPFlow, ep: routing.Endpoint, raw: bytes, ce: str | None) -> None:
        body = await offload(parse_body, raw, ce, self.body_limit)
        self._handle(flow, ep, body)

    def _handle(self, flow: http.HTTPFlow, ep: routing.Endpoint, body: Body | BodyError | None) -> None:
        try:
            if isinstance(body, BodyError):
                if not self.options.routes and not codings(flow.request.headers.get("content-encoding")):
                    return  # nothing to translate and nothing inflated: a big plain body passes untouched
                bad_body(flow, ep, body)
            elif body is not None and ep.kind in ("generate", "count_tokens"):
                # the protocol the body is clearly written in, when not the endpoint's (read once)
                sniffed = routing.body_protocol(body[1], ep.protocol) \
                    if isinstance(body[1], dict) and ep.protocol is not None else None
                told = routing.told_by_body(ep, flow.request.path, sniffed)
                if told is not ep:  # a path two protocols serve: the body's own protocol
                    ep, sniffed = told, None
                if ep.kind == "generate":
                    self._generate(flow, ep, body, sniffed)
                else:
                    self._count_tokens(flow, ep, body)
            else:
                self._models(flow, ep)
        except Exception as exc:
            logger.exception("proxai: request handling failed")
            state = flow_state(flow)
            if state is None or state.route is None:
                set_flow_state(flow, None)
                return
            reply(flow, state, 500, "api_error", f"proxai failed to handle the request: {exc}")

    # ------------------------------------------------------------------------- endpoints
    def _generate(self, flow: http.HTTPFlow, ep: routing.Endpoint, parsed: Body,
                  sniffed: Protocol | None = None) -> None:
        req = flow.request
        raw, body, jerr = parsed
        model = ep.model_id or request_model(body)
        path = req.path.partition("?")[0]
        route = self.options.routes.find(req.host, path, model)
        client = ep.protocol
        assert client is not None
        if route is None:
            if routing.looks_like_llm(body):
                set_flow_state(flow, FlowState("generate", client, client, None, client_body=body,
                                          client_stream=_stream(ep, body), client_model=model,
                                          endpoint=ep, secrets=own_secrets(req.headers, None, req.path)))
            return
        if body is _INVALID and "json" not in req.headers.get("content-type", "").lower() \
                and raw.lstrip()[:1] not in (b"{", b"["):
            return  # not an LLM request after all (no JSON at all)
        is_obj = isinstance(body, dict)
        state = FlowState("generate", client, route.protocol, route.name, client_text=_text(raw),
                          client_body=body if is_obj else None,
                          client_stream=_stream(ep, body) if is_obj else bool(ep.stream),
                          client_model=model, translated=route.protocol is not client, endpoint=ep,
                          secrets=own_secrets(req.headers, route, req.path),
                          refusal_in_content=self.refusal_in_content if route.refusal_in_content is None
                          else route.refusal_in_content)
        set_flow_state(flow, state)
        if body is _INVALID:
            return reply(flow, state, 400, "invalid_request", f"request body is not valid JSON: {jerr}")
        if not is_obj:
            return reply(flow, state, 400, "invalid_request", "request body must be a JSON object")
        if sniffed is not None and sniffed is not client:
            return reply(flow, state, 400, "invalid_request",
                         f"this looks like a {sniffed.value} request body, but {path} expects {client.value}")

        def payload() -> bytes | None:
            try:
                up, state.upstream_model = upstream_body(state, route, body, model)
            except Exception as exc:
                untranslatable(flow, state, client, exc, "translate_request failed")
                return None
            if route.cache_hints is not False:
                add_cache_hints(flow, state, route, route, up, state.upstream_model)
            return encode_body(flow, state, up)

        def fallback_payload(up: Upstream) -> tuple[bytes, str | None]:
            out, up_model = upstream_body(state, up, body, model)
            if route.cache_hints is not False:
                add_cache_hints(flow, state, route, up, out, up_model)
            return dumps(out), up_model

        self.forward(flow, state, ep, route, payload, upstream_stream=state.client_stream,
                     fallback_payload=fallback_payload)

    def _count_tokens(self, flow: http.HTTPFlow, ep: routing.Endpoint, parsed: Body) -> None:
        req = flow.request
        raw, body, jerr = parsed
        model = ep.model_id or request_model(body)
        route = self.options.routes.find(req.host, req.path.partition("?")[0], model, alt_paths=ep.generate_paths)
        if route is None:
            return
        is_obj = isinstance(body, dict)
        state = FlowState("count_tokens", ep.protocol, route.protocol, route.name, client_text=_text(raw),
                          client_body=body if is_obj else None, client_model=model, endpoint=ep,
                          translated=route.protocol is not ep.protocol,
                          secrets=own_secrets(req.headers, route, req.path))
        set_flow_state(flow, state)
        if not is_obj:
            return reply(flow, state, 400, "invalid_request",
                         f"request body is not a valid JSON object{': ' + jerr if jerr else ''}")
        client = ep.protocol
        counter = get(client).wire.counter if client is not None else None
        if client is None or counter is None:  # recognized as a count only where the protocol has one
            return reply(flow, state, 404, "not_found", "this protocol has no token counting endpoint")
        if not counts_tokens(route.protocol):
            # the upstream cannot count: an honest local estimate in the client's shape, flagged as one
            state.warnings.append("input tokens estimated locally (about 4 characters per token); "
                                  f"the {route.protocol.value} upstream has no token counting endpoint")
            state.estimate = True
            state.count_tokens = estimate_tokens(body)
            state.synthetic = True
            state.translation = Plan.SYNTHETIC
            flow.response = http.Response.make(
                200, orjson.dumps(counter.answer(state.count_tokens)),
                {"content-type": "application/json", "x-proxai-estimate": "chars/4"},
            )
            return None

        def payload() -> bytes | None:
            mapped = route.models.map(model)
            in_url = get(route.protocol).wire.endpoints.path_for is not None
            if route.protocol is ep.protocol:
                up = dict(body)
                if mapped and not in_url:
                    set_request_model(up, mapped, route.protocol)
            else:  # the target's counting request for the same generation request
                try:
                    up = open_exchange(state).request_for(route.protocol, mapped or model)
                except Exception as exc:
                    untranslatable(flow, state, client, exc, "translating a count request failed")
                    return None
            state.upstream_model = mapped
            return encode_body(flow, state, up)

        self.forward(flow, state, ep, route, payload)

    def _models(self, flow: http.HTTPFlow, ep: routing.Endpoint) -> None:
        req = flow.request
        route = self.options.routes.find(req.host, req.path.partition("?")[0], ep.model_id,
                                         alt_paths=ep.generate_paths)
        if route is None:
            return
        state = FlowState(ep.kind, model_list_client(req.headers), route.protocol, route.name,
                          client_model=ep.model_id, endpoint=ep,
                          secrets=own_secrets(req.headers, route, req.path))
        state.extra = {"model_id": ep.model_id}
        set_flow_state(flow, state)
        state.upstream_model = route.models.map(ep.model_id) if ep.model_id else None
        self.forward(flow, state, ep, route, None, model_id=state.upstream_model)

    # ------------------------------------------------------------------------- the retarget sequence
    def forward(self, flow: http.HTTPFlow, state: FlowState, ep: routing.Endpoint, route: Route,
                payload: Callable[[], bytes | None] | None, *, model_id: str | None = None,
                upstream_stream: bool = False,
                fallback_payload: Callable[[Upstream], tuple[bytes, str | None]] | None = None) -> None:
        """Send a routed request to its upstream: target URL, credential (or a native 401), body
        (``payload`` returns the bytes, or None after answering the client), headers. A route with
        fallbacks also gets its :class:`FailoverPlan` (``fallback_payload``: the body and model for
        a fallback; the failover addon sends the flow to the attempt server)."""
        req = flow.request
        original = req.copy() if route.fallbacks and fallback_payload is not None else None
        content = None
        if payload is not None:
            content = payload()  # sets the upstream model
            if content is None:
                return None
        scheme, host, port, up_path = routing.upstream_target(
            ep, route.protocol, route.base_url, scheme=req.scheme, host=req.host, port=req.port,
            model_id=model_id or state.upstream_model, stream=upstream_stream)
        same_host = host.lower() == req.host.lower() and port == req.port
        failover = bool(route.fallbacks) and fallback_payload is not None and not self.replay_only()
        # a fallback route's attempts cool the key they carry: the flow does not remember it
        pick = self.limits.pick(route, None if failover else state) if route.key_pool else None
        cooling = pick.wait if pick is not None else None
        if cooling is not None and not failover:
            return self.limits.all_cooling(flow, state, route, cooling)
        key, kerr = (pick.key, None) if pick is not None and pick.key is not None \
            else (None, None) if cooling is not None \
            else self._key(route, same_host, req.headers, host, req.path)
        if kerr:
            return reply(flow, state, 401, "authentication", kerr)
        if route.api_key_env and key is not None and key != REPLAY_PLACEHOLDER_KEY:
            origin = replace(route, api_key_env=pick.env) if pick is not None and pick.env else route
            state.extra[KEY_FROM] = key_origin(origin)  # named if the upstream refuses the key
        retarget(flow, scheme, host, port, up_path)
        routing.rewrite_headers(req.headers, client=state.client_protocol, target=route.protocol,
                                same_host=same_host, key=key, upstream_host=host, body=content is not None)
        if content is not None:
            req.content = content
        if failover and original is not None and fallback_payload is not None:
            first = Prepared(req.method, scheme, host, port, up_path, [], b"", state.upstream_model,
                             cool=(key_name(key),) if route.key_pool and key else (),
                             skip=_all_cooling(route.name, cooling) if cooling is not None else None, wait=cooling)
            state.extra[FAILOVER] = FailoverPlan(
                route, first, functools.partial(self._prepare, state, ep, original, fallback_payload,
                                                upstream_stream),
                client_protocol=state.client_protocol)
        return None

    def _prepare(self, state: FlowState, ep: routing.Endpoint, original: http.Request,
                 payload: Callable[[Upstream], tuple[bytes, str | None]], upstream_stream: bool,
                 up: Upstream) -> Prepared | str:
        """The request for fallback ``up``, made from the client's request as :meth:`forward` makes
        the first one; or why it cannot be sent."""
        req = original.copy()
        try:
            content, up_model = payload(up)
        except Exception as exc:  # noqa: BLE001 - this upstream is skipped, the reason recorded
            return f"the request cannot be sent as {up.protocol.value}: {exc}"
        scheme, host, port, up_path = routing.upstream_target(
            ep, up.protocol, up.base_url, scheme=req.scheme, host=req.host, port=req.port,
            model_id=up_model, stream=upstream_stream)
        same_host = host.lower() == req.host.lower() and port == req.port
        pick = self.limits.pick(up, None) if up.key_pool else None
        if pick is not None and pick.wait is not None:
            return Prepared(req.method, scheme, host, port, up_path, [], b"", up_model,
                            skip=_all_cooling(up.name, pick.wait), wait=pick.wait)
        key, kerr = (pick.key, None) if pick is not None and pick.key is not None \
            else self._key(up, same_host, req.headers, host, req.path)
        if kerr:
            return kerr
        set_url(req, scheme, host, port, up_path)
        routing.rewrite_headers(req.headers, client=state.client_protocol, target=up.protocol,
                                same_host=same_host, key=key, upstream_host=host, body=True)
        req.content = content
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1", "replace"))
                   for k, v in req.headers.items(multi=True) if k.lower().encode("latin-1") not in HOP_BY_HOP]
        return Prepared(req.method, scheme, host, port, up_path, headers, content, up_model, req,
                        cool=(key_name(key),) if up.key_pool and key else ())

    def _key(self, route: Route | Upstream, same_host: bool, headers: Any, host: str,
             path: str = "") -> tuple[str | None, str | None]:
        """The credential to send upstream, or an error text (401) naming the variable (a key pool's
        keys come from :meth:`Limits.pick` first)."""
        if route.auth:
            return None, None  # the signer authorizes the final request (addons/signer.py)
        if route.api_key_env:
            value = os.environ.get(route.api_key_env)
            if value:
                return value.strip(), None
            if self.replay_only():
                return REPLAY_PLACEHOLDER_KEY, None
            where = route.key_where if isinstance(route, Upstream) else \
                "proxai_key_env" if route.name == "default" else f"route {route.name!r} target.api_key_env"
            return None, (f"proxai: the upstream key is missing: environment variable {', '.join(route.key_envs)} "
                          f"({where}) is not set in mitmproxy's environment")
        if same_host:
            return routing.client_credential(headers, path.partition("?")[2]), None
        if self.replay_only():
            return REPLAY_PLACEHOLDER_KEY, None
        hint = "proxai_key_env" if route.name == "default" else f"target.api_key_env in route {route.name!r}"
        return None, (f"proxai: route {route.name!r} sends this request to {host}, not the host the client "
                      f"addressed, so the client's credentials are not forwarded; set {hint} to the name "
                      f"of an environment variable holding the upstream key")



def add_cache_hints(flow: http.HTTPFlow, state: FlowState, route: Route, target: Route | Upstream,
                    up: dict[str, Any], model: str | None) -> None:
    """The target's prompt-caching hints on a body translated for ``target`` (the route's upstream or
    one of its fallbacks), keyed by the client's own session id where it sends one (else the
    conversation's stable prefix)."""
    req = flow.request
    ex = open_exchange(state)
    found = session_header(flow)
    if found is not None:
        ex.cache_key = f"proxai-{found[1]}"
    host = target.base_url.host if target.base_url is not None else req.host
    ex.add_cache_hints(target.protocol, up, model=model, host=host, explicit=route.cache_hints is True)


def _all_cooling(name: str, wait: float) -> str:
    """Why an upstream whose every key is cooling is not asked (an attempt's reason)."""
    return f"every key of {name!r} is rate limited; retry in {max(1, math.ceil(wait))} s"


def bad_body(flow: http.HTTPFlow, ep: routing.Endpoint, exc: BodyError) -> None:
    """A body over the cap (native 413) or not decodable (native 400): answered, never inflated."""
    state = FlowState(ep.kind, ep.protocol, ep.protocol, None, endpoint=ep,
                      warnings=[f"request body not read: {exc}"])
    set_flow_state(flow, state)
    flow.response = too_large_reply(exc, ep.protocol, request=True)
    state.synthetic = True
    state.translation = Plan.SYNTHETIC
    state.stop = error_stop_info(flow.response.status_code, flow.response.content or b"")


def upstream_body(state: FlowState, up: Route | Upstream, body: dict[str, Any], model: str | None
                  ) -> tuple[dict[str, Any], str | None]:
    """The client's request translated for upstream ``up`` (its protocol and model mapping), and the
    model the upstream is asked for; raises when the request cannot be translated."""
    out = open_exchange(state).request_for(up.protocol)
    if out is body:
        out = dict(body)
    in_url = get(up.protocol).wire.endpoints.path_for is not None
    if in_url:
        out.pop(get(up.protocol).wire.fields.model, None)  # the model travels in the URL
    mapped = up.models.map(request_model(out) or model)
    if mapped and not in_url:
        set_request_model(out, mapped, up.protocol)
    return out, (mapped or model) if in_url else request_model(out)


def untranslatable(flow: http.HTTPFlow, state: FlowState, client: Protocol, exc: Exception, what: str) -> None:
    """A request that cannot be translated gets the client's native error; an exception that is not a
    translation refusal is our bug and is logged with its traceback (call inside the ``except``)."""
    if not isinstance(exc, (TranslationError, ValueError, TypeError, KeyError, AttributeError)):
        logger.exception("proxai: %s", what)
    status, native = error_response(exc, client)
    reply_body(flow, state, status, native)


def encode_body(flow: http.HTTPFlow, state: FlowState, up: dict[str, Any]) -> bytes | None:
    try:
        return dumps(up)  # falls back to the stdlib past orjson's 254 levels
    except (TranslationError, TypeError) as exc:
        err = exc if isinstance(exc, TranslationError) else TranslationError(
            f"body: the request cannot be re-encoded ({exc})", field="body")
        status, native = error_response(err, state.client_protocol or DEFAULT_PROTOCOL)
        reply_body(flow, state, status, native)
        return None


def own_secrets(headers: Any, route: Route | None, path: str = "") -> tuple[str, ...]:
    """The flow's own secrets: the client's credential (header or query) and the key injected for
    the route."""
    out = [c for c in routing.client_credentials(headers, path.partition("?")[2]) if len(c) >= 8]
    out += [c for c in seen_secrets(headers) if len(c) >= 8 and c not in out]
    for env in route.key_envs if route is not None else ():
        v = os.environ.get(env, "").strip()
        if len(v) >= 8:
            out.append(v)
    if route is not None and route.fallbacks:
        for env in (e for up in route.fallbacks for e in up.key_envs):  # every key a fallback may send
            v = os.environ.get(env, "").strip()
            if len(v) >= 8 and v not in out:
                out.append(v)
    return tuple(out)


#: (decoded bytes, parsed JSON or _INVALID, JSON error text)
Body = tuple[bytes, Any, str | None]


def parse_body(raw: bytes, content_encoding: str | None, limit: int) -> Body | BodyError:
    """Decode (within ``limit``) and parse a request body; runs in a worker thread for big bodies."""
    try:
        data = decode(raw, content_encoding, limit)
    except BodyError as e:
        return e
    try:
        return data, orjson.loads(data), None
    except orjson.JSONDecodeError as e:
        return data, _INVALID, str(e)


def _stream(ep: routing.Endpoint, body: Any) -> bool:
    """The client's stream flag: the URL's where the protocol keeps it there, else the body's."""
    if ep.stream is not None:
        return ep.stream
    return request_stream(body, ep.protocol)
