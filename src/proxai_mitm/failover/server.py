"""The loopback attempt server: mitmproxy sends a failover flow here, and it tries the route's
upstreams in order until one answers with something that is not a failover status.

mitmproxy cannot send a flow's request again once its server answered, and a streamed body comes
from the flow's own server connection. So a flow whose route has fallbacks is sent to this server
(HTTP/1.1 on 127.0.0.1, an ephemeral port) with a one-time token naming its :class:`FailoverPlan`.
The server sends attempt 1, 2, … itself (:mod:`.client`), returns the first good answer with its
bytes relayed as they arrive, and notes in the plan which upstream answered, so the addon translates
the answer from that upstream's protocol. Before the first byte goes back to mitmproxy nothing is
committed; after it, an upstream that breaks off breaks this connection too (the client's stream
ends ``interrupted``, never silently retried).

Any local process can connect: a request without a live token gets a 404, a connection idle for
IDLE_TIMEOUT seconds between requests is closed, at most MAX_CONNECTIONS are open.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import h11
import orjson

from proxai_core.codecs import get

from ..config.routes import Upstream
from ..flow.replies import native_error
from ..limits.limited import cooling_headers, limited_for
from ..limits.store import CooldownStore
from .client import ERROR_BODY, Connection, Pool, UpstreamError
from .plan import HOP_BY_HOP, Attempt, FailoverPlan, Prepared

logger = logging.getLogger(__name__)

__all__ = ["IDLE_TIMEOUT", "MAX_CONNECTIONS", "MAX_PLANS", "TOKEN_HEADER", "AttemptServer", "Outcome", "attempt", "cool",
           "cool_name", "hint_body", "limited", "reset_hint"]

#: the private request header naming a flow's plan (removed before anything is sent upstream)
TOKEN_HEADER = "x-proxai-attempt"
IDLE_TIMEOUT = 60.0
MAX_CONNECTIONS = 1024
#: plans registered and not yet taken (a flow killed before it reached the server leaves one)
MAX_PLANS = 4096
#: a request body beyond this is refused (the router caps client bodies far below)
MAX_REQUEST_BODY = 256 * 1024 * 1024
#: the longest wait between two tries of the same upstream; a longer reset hint moves on instead
MAX_RETRY_WAIT = 10.0
#: seconds a relayed body may go without a byte (mitmproxy's own idle watch ends streams sooner)
BODY_IDLE = 900.0
_READ = 65536
_TOKEN = TOKEN_HEADER.encode()


def reason_of(status: int, body: bytes) -> str:
    """A short reason from an error body (its message, when the body says one)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"HTTP {status}"
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        err = doc[0].get("error")
    msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
    return f"HTTP {status}: {msg[:200]}" if isinstance(msg, str) and msg else f"HTTP {status}"


class AttemptServer:
    """Loopback HTTP/1.1 server running failover plans (see the module docstring).

    ``cooldowns()``: the store of cooled upstreams and keys in effect (the Limits addon's, awaited on
    the loop this server runs on: mitmproxy's); ``header_timeout``: seconds an attempt waits for a
    response head when its route does not say.
    """

    def __init__(self, pool: Pool, cooldowns: Callable[[], CooldownStore], header_timeout: float = 300.0,
                 host: str = "127.0.0.1") -> None:
        self.pool = pool
        self.cooldowns = cooldowns
        self.header_timeout = header_timeout
        self.host = host
        self.port = 0
        self._plans: dict[str, FailoverPlan] = {}
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._on_connect, self.host, 0)
            self.port = self._server.sockets[0].getsockname()[1]
            logger.debug("proxai failover attempt server on %s:%d", self.host, self.port)

    def close(self) -> None:
        srv, self._server = self._server, None
        if srv is not None:
            srv.close()
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        for t in list(self._tasks):
            t.cancel()
        self.pool.close()
        self._plans.clear()

    def register(self, plan: FailoverPlan) -> str:
        """A one-time token for ``plan`` (the oldest untaken plan goes when there are too many)."""
        if len(self._plans) >= MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        token = secrets.token_urlsafe(18)
        self._plans[token] = plan
        return token

    def forget(self, token: str) -> None:
        self._plans.pop(token, None)

    # ------------------------------------------------------------------------- connections
    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=256 * 1024)
        try:
            while True:
                req = await self._read_request(conn, reader)
                if req is None:
                    break
                if not await self._serve(conn, writer, *req):
                    break
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
        except (TimeoutError, ConnectionError, h11.ProtocolError, asyncio.CancelledError) as e:
            logger.debug("proxai failover: connection ended: %r", e)
        except Exception:
            logger.exception("proxai failover: connection failed")
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.transport.abort() if conn.our_state is not h11.IDLE else writer.close()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader
                            ) -> tuple[h11.Request, bytes] | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await asyncio.wait_for(reader.read(_READ), IDLE_TIMEOUT))
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_REQUEST_BODY:
                    return None
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return request, bytes(body)
            else:  # ConnectionClosed
                return None

    async def _serve(self, conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request,
                     body: bytes) -> bool:
        token = ""
        headers: list[tuple[bytes, bytes]] = []
        for k, v in request.headers:
            if k == _TOKEN:
                token = v.decode("latin-1")
            elif k not in HOP_BY_HOP:
                headers.append((k, v))
        plan = self._plans.pop(token, None)
        if plan is None:
            await _write(conn, writer, 404, [(b"content-type", b"application/json")],
                         orjson.dumps({"error": {"message": "proxai failover: no such attempt"}}))
            return True
        first = plan.first
        first.method, first.target, first.headers, first.body = (
            request.method.decode("ascii"), request.target.decode("latin-1"), headers, body)
        return await self.run(plan, conn, writer)

    # ------------------------------------------------------------------------- attempts
    async def run(self, plan: FailoverPlan, conn: h11.Connection, writer: asyncio.StreamWriter) -> bool:
        """Try the plan's upstreams in order; relay the first good answer. False: the connection
        to mitmproxy is unusable afterwards."""
        out = await attempt(plan, self.pool, self.cooldowns(), self.header_timeout)
        if out.upstream is not None:
            assert out.head is not None
            return await self._relay(conn, writer, out.head, out.upstream)
        if out.head is not None:  # every upstream failed: the last answer, from its upstream's protocol
            await _write(conn, writer, out.head.status_code, _forwardable(out.head.headers), out.data)
            return True
        assert plan.native is not None
        status, doc = plan.native
        await _write(conn, writer, status, [(b"content-type", b"application/json"), *out.extra], orjson.dumps(doc))
        return True

    async def _relay(self, conn: h11.Connection, writer: asyncio.StreamWriter, head: h11.Response,
                     upstream: Any) -> bool:
        """The upstream's answer to mitmproxy as it arrives; a cut upstream cuts this connection."""
        writer.write(conn.send(h11.Response(status_code=head.status_code, headers=_forwardable(head.headers),
                                            reason=head.reason)) or b"")
        try:
            async for chunk in upstream.body(BODY_IDLE):
                writer.write(conn.send(h11.Data(data=chunk)) or b"")
                await asyncio.wait_for(writer.drain(), BODY_IDLE)
        except (TimeoutError, ConnectionError, OSError, h11.ProtocolError) as e:
            logger.debug("proxai failover: relayed answer broke off: %r", e)
            upstream.close()
            writer.transport.abort()
            return False
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        self.pool.release(upstream)
        await asyncio.wait_for(writer.drain(), BODY_IDLE)
        return True


@dataclass(slots=True)
class Outcome:
    """What the attempts came to: a good answer (``upstream``: its connection, the body still to
    read), the last failed answer (``head`` and ``data``), or none (the plan's ``native`` answer,
    with ``extra`` headers)."""

    head: h11.Response | None = None
    upstream: Connection | None = None
    data: bytes = b""
    extra: list[tuple[bytes, bytes]] = field(default_factory=list)


async def attempt(plan: FailoverPlan, pool: Pool, store: CooldownStore, header_timeout: float, *,
                  start: int = 0, tried: int = 0, soonest: float | None = None,
                  last: tuple[int, h11.Response | None, bytes, Prepared] | None = None) -> Outcome:
    """Try the plan's upstreams from ``start`` (``tried``: tries of that one already made), noting
    each attempt and cooling limited upstreams and keys; sets ``plan.answered`` / ``plan.prepared``
    or ``plan.native``."""
    route = plan.route
    timeout = route.attempt_timeout or header_timeout
    upstreams = plan.upstreams
    untils = await store.untils([cool_name(up) for up in upstreams[start:]])
    for index in range(start, len(upstreams)):
        up = upstreams[index]
        until = untils[index - start] if not (index == start and tried) else None
        left = max(until - time.time(), 0.0) if until is not None else None
        if left:
            soonest = left if soonest is None else min(soonest, left)
            plan.attempts.append(Attempt(up.name, up.protocol.value, _host(up, plan.first), None,
                                         f"cooling down ({left:.1f} s left)", 0.0, left))
            continue
        prep = plan.first if index == 0 else plan.prepare(up)
        if isinstance(prep, str) or prep.skip:
            why = prep if isinstance(prep, str) else prep.skip or ""
            plan.attempts.append(Attempt(up.name, up.protocol.value, _host(up, plan.first), None, why, 0.0,
                                         None if isinstance(prep, str) else prep.wait))
            if not isinstance(prep, str) and prep.wait is not None:  # every key of its pool is cooling
                soonest = prep.wait if soonest is None else min(soonest, prep.wait)
            continue
        hint: float | None = None
        for n in range(tried if index == start else 0, route.retries + 1):
            if n:  # the upstream's own reset hint, else the route's backoff, doubled each time
                await asyncio.sleep(min(hint if hint is not None else route.backoff * 2 ** (n - 1), MAX_RETRY_WAIT))
                hint = None
            started = time.monotonic()
            try:
                conn, head = await pool.request(prep.scheme, prep.host, prep.port, prep.method, prep.target,
                                                prep.headers, prep.body, timeout)
            except UpstreamError as e:
                plan.attempts.append(Attempt(up.name, up.protocol.value, prep.host, None, f"{e.kind}: {e}",
                                             (time.monotonic() - started) * 1000))
                continue
            if head.status_code not in route.failover_statuses:
                plan.attempts.append(Attempt(up.name, up.protocol.value, prep.host, head.status_code,
                                             "answered", (time.monotonic() - started) * 1000))
                plan.answered, plan.prepared = index, prep
                return Outcome(head, conn)
            try:
                data = await conn.read_body(ERROR_BODY, timeout)
            except (TimeoutError, ConnectionError, OSError, h11.ProtocolError):
                data = b""
            pool.release(conn)
            hint = reset_hint(up, head.headers, data)
            plan.attempts.append(Attempt(up.name, up.protocol.value, prep.host, head.status_code,
                                         reason_of(head.status_code, data), (time.monotonic() - started) * 1000,
                                         hint))
            last = (index, head, data, prep)
            wait = limited(up, head.status_code, head.headers, data)
            if wait is not None:
                await cool(store, up, prep, wait)
                soonest = wait if soonest is None else min(soonest, wait)
                break  # cooled: the next upstream, not another try of this one
    if last is not None and soonest is None:  # (head None: the first upstream's own answer, already there)
        index, last_head, data, prep = last
        plan.answered, plan.prepared = index, prep
        return Outcome(last_head, None, data)
    if soonest is not None:
        plan.native = native_error(429, "rate_limit",
                                   f"proxai: every upstream of route {route.name!r} is rate limited or "
                                   f"overloaded; retry in {soonest:.0f} s", plan.client_protocol)
        return Outcome(extra=[(k.encode(), v.encode()) for k, v in cooling_headers(soonest).items()])
    tried_all = "; ".join(f"{a.upstream}: {a.reason}" for a in plan.attempts)
    plan.native = native_error(502, "api_error", f"proxai: no upstream of route {route.name!r} answered "
                               f"({tried_all})", plan.client_protocol)
    return Outcome()


async def cool(store: CooldownStore, up: Upstream, prep: Prepared, wait: float) -> None:
    """Cool the pooled key the request carried, else the upstream, for ``wait`` seconds."""
    for name in prep.cool or (cool_name(up),):
        await store.cool(name, time.time() + wait)


@functools.lru_cache(maxsize=1024)
def cool_name(up: Upstream) -> str:
    """An upstream's name in the cooldown store: where it is and which credential variable (never a
    key); the same in every mitmdump sharing the store."""
    where = str(up.base_url) if up.base_url is not None else "client-host"
    return f"upstream:{where}|{up.protocol.value}|{up.api_key_env or up.auth or ''}"


def reset_hint(up: Upstream, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> float | None:
    """Seconds the upstream asks to wait (its protocol's reset hints, headers or error body)."""
    return get(up.protocol).wire.retry_after(_header_map(headers), hint_body(body))


def limited(up: Upstream, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> float | None:
    """An answer that says the upstream (or the key it was sent) is limited: the seconds it cools
    (the same rule as a pooled key's, :func:`~..limits.limited.limited_for`); None otherwise."""
    return limited_for(status, _header_map(headers), hint_body(body), up.protocol)


def hint_body(body: bytes) -> dict[str, Any] | None:
    """An error body's JSON object (a one-element array's too), or None."""
    try:
        doc = orjson.loads(body) if body[:1] in (b"{", b"[") else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, list):  # an error as a one-element array
        doc = doc[0] if doc and isinstance(doc[0], dict) else None
    return doc if isinstance(doc, dict) else None


def _header_map(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}


def _host(up: Upstream, first: Prepared) -> str:
    return up.base_url.host if up.base_url is not None else first.host


def _forwardable(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Response headers without hop-by-hop ones (h11 frames the body itself); the length stays."""
    return [(k, v) for k, v in headers if k not in HOP_BY_HOP or k == b"content-length"]


async def _write(conn: h11.Connection, writer: asyncio.StreamWriter, status: int,
                 headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    headers = [(k, v) for k, v in headers if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
    writer.write(conn.send(h11.Data(data=body)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await asyncio.wait_for(writer.drain(), IDLE_TIMEOUT)
