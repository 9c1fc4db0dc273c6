"""Key pools and cooldowns: which key of a pool a request takes, and a limited key cooled.

The one cooldown store of the proxy: pooled keys (here) and the upstreams of fallback routes (the
failover addon and its attempt server, through :attr:`Limits.store` / :meth:`Limits.until`) cool in
it alike.

A route or fallback whose ``api_key_env`` names several variables takes its keys in turn
(:meth:`Limits.pick`, asked by the router); a key whose upstream answered 429 (rate limited) or
overloaded is cooled until the reset the answer gives (the upstream protocol's ``wire.retry_after``,
headers or error body; :data:`DEFAULT_COOL` without one) and skipped meanwhile. When every key of
the pool is cooling, the client gets its native 429 with the soonest ``retry-after``, and nothing is
sent upstream (a route with fallbacks goes on to them instead; the failover addon cools its keys).

Cooldowns live in this process, or with ``proxai_redis`` in Redis, shared by every mitmdump that
uses it: before a pooled or fallback request is routed, the ``request`` hook reads the pools' and
first upstreams' cooldowns from Redis into the process store (one round trip, only that flow
waits), so the choice itself never waits. Other routes do not reach this addon.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from mitmproxy import ctx, http

from proxai_core import Protocol

from ..config.options import RouteOptions, options_error
from ..config.routes import Route, Upstream
from ..failover.server import cool_name
from ..flow.replies import reply
from ..flow.state import FlowState, flow_state
from ..limits.limited import DEFAULT_COOL, LIMITED_STATUSES, cooling_headers, limited_for
from ..limits.pools import Pick, pick_key, pool_keys
from ..limits.store import CooldownStore, ProcessStore, RedisStore, key_name
from ..wire import routing
from ..wire.bodies import BodyError, decode

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_COOL", "POOL_KEY", "Limits", "limited_wait"]

#: ``state.extra`` key: the store name of the pool key a flow was sent with
POOL_KEY = "pool_key"
#: error bodies larger than this are not read for a reset hint (the headers still are)
HINT_BODY_LIMIT = 64 * 1024
_SCHEMES = ("redis://", "rediss://", "unix://")


class Limits:
    """Key pools and the cooldown store (see the module docstring)."""

    def __init__(self, options: RouteOptions | None = None) -> None:
        self.options = options
        #: what a hook reads without waiting (also the shared store's copy and fallback)
        self.local = ProcessStore()
        #: the async store: this process's, or Redis's (proxai_redis)
        self.store: CooldownStore = self.local
        self._writes: set[asyncio.Task] = set()

    # ------------------------------------------------------------------------- lifecycle
    def configure(self, updated: set[str]) -> None:
        if "proxai_redis" in updated:
            url = (getattr(ctx.options, "proxai_redis", "") or "").strip()
            if url and not url.startswith(_SCHEMES):
                raise options_error(f"proxai_redis: expected a redis://, rediss:// or unix:// URL, got {url!r}")
            self._close()
            self.store = RedisStore(url, self.local) if url else self.local
            if url:
                logger.info("proxai: cooldowns shared through Redis at %s", url.split("@")[-1])
        # hooks only where a route has a pool or fallbacks (None is skipped by the dispatch)
        if self._pooled():
            self.__dict__.pop("response", None)
        else:
            self.response = None  # type: ignore[assignment]
        if self._shares() and self.store is not self.local:
            self.__dict__.pop("request", None)
        else:
            self.request = None  # type: ignore[assignment]

    def done(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.store is self.local:
            return
        try:
            self._keep(asyncio.get_running_loop().create_task(self.store.close()))
        except RuntimeError:  # no loop left: the connections go with the process
            pass

    def _keep(self, task: asyncio.Task) -> None:
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def _pooled(self) -> list[Route]:
        routes = self.options.routes if self.options is not None else ()
        return [r for r in routes if len(r.key_envs) > 1]

    def _shares(self) -> bool:
        """Whether a route reads cooldowns before it is routed: a pool, or fallbacks."""
        routes = self.options.routes if self.options is not None else ()
        return any(r.fallbacks or len(r.key_envs) > 1 for r in routes)

    def _shared_names(self) -> list[str]:
        """What a routed request may read from the shared store: every key of every upstream's pool
        (a variable's key is read now: it may change), and the first upstream of a route with
        fallbacks."""
        routes = self.options.routes if self.options is not None else ()
        out: list[str] = []
        for r in routes:
            for up in r.upstreams:
                if len(up.key_envs) > 1:
                    out.extend(key_name(k) for _, k in pool_keys(up.key_envs))
            if r.fallbacks:
                out.append(cool_name(r.upstreams[0]))
        return out

    # ------------------------------------------------------------------------- the router's questions
    def pick(self, route: Route | Upstream, state: FlowState | None) -> Pick:
        """The key a pooled route or fallback sends this flow with; remembered in the flow's state
        when given (this addon then cools it; a fallback route's attempts cool their own keys)."""
        pick = pick_key(route.name, route.key_envs, self.local)
        if pick.key is not None and state is not None:
            state.extra[POOL_KEY] = key_name(pick.key)
        return pick

    def until(self, name: str) -> float | None:
        """When ``name``'s cooldown ends (as this process knows it now), or None."""
        return self.local.view(name)

    def cool(self, name: str, wait: float) -> Any:
        """``name`` cools for ``wait`` seconds; with Redis, the awaitable that tells Redis (bounded by
        the store's timeout), else None."""
        until = time.time() + wait
        self.local.put(name, until)
        return self.store.cool(name, until) if self.store is not self.local else None

    @staticmethod
    def all_cooling(flow: http.HTTPFlow, state: FlowState, route: Route, wait: float) -> None:
        """Every key of the pool is cooling: the client's native 429, with the soonest reset."""
        headers = cooling_headers(wait)
        state.warnings.append(f"every key of route {route.name!r} is cooling down; answered by the proxy")
        reply(flow, state, 429, "rate_limit",
              f"proxai: every key of route {route.name!r} is rate limited; retry in {headers['retry-after']} s",
              extra_headers=headers)

    # ------------------------------------------------------------------------- hooks
    def request(self, flow: http.HTTPFlow) -> Any:
        """With Redis: the pools' and first upstreams' cooldowns, read into the process store before
        the router picks."""
        if not flow.live or flow.response or flow.error:
            return None
        req = flow.request
        if routing.recognize(req.method, req.path, req.headers) is None:
            return None
        names = self._shared_names()
        return self.store.untils(names) if names else None

    def response(self, flow: http.HTTPFlow) -> Any:
        """A pooled key the upstream limited: cooled until the reset the answer gives."""
        state = flow_state(flow)
        resp = flow.response
        name = state.extra.get(POOL_KEY) if state is not None else None
        if name is None or resp is None or state is None or state.synthetic:
            return None
        wait = limited_wait(resp, state.upstream_protocol)
        if wait is None:
            return None
        logger.info("proxai: a key of route %r is limited (HTTP %d); skipped for %.1f s",
                    state.route, resp.status_code, wait)
        return self.cool(name, wait)  # with Redis this flow waits for it to know (bounded)


def limited_wait(resp: http.Response, protocol: Protocol | None) -> float | None:
    """An upstream answer that says "limited" (429, or overloaded: 529, 503): how long to cool what
    it limited (the protocol's reset hint, else :data:`DEFAULT_COOL`); None for any other answer."""
    if resp.status_code not in LIMITED_STATUSES:
        return None
    return limited_for(resp.status_code, resp.headers, _error_body(resp), protocol)


def _error_body(resp: http.Response) -> dict[str, Any] | None:
    """The upstream's error body, parsed when small (the hint may be in it)."""
    raw = resp.raw_content
    if not raw or len(raw) > HINT_BODY_LIMIT:
        return None
    try:
        obj = orjson.loads(decode(raw, resp.headers.get("content-encoding"), HINT_BODY_LIMIT))
    except (BodyError, orjson.JSONDecodeError):
        return None
    if isinstance(obj, list) and len(obj) == 1:  # a Gemini stream without alt=sse: a JSON array
        obj = obj[0]
    return obj if isinstance(obj, dict) else None
