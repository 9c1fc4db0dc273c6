"""Idle timeout for LLM streams: end a dead upstream stream with the client's native error.

mitmproxy only calls a ``flow.response.stream`` callable when upstream bytes arrive, and its own
``tcp_timeout`` just cuts the client's connection (the client sees a transport error, and the
recording says "client disconnected"). To end a silent stream properly we hand the flow's
``HttpStream`` an "end of message" event exactly like a real one (reach.py, in every proxy mode), so
mitmproxy calls the stream callable with ``b""`` (our handler answers with the native error frame,
StopInfo ``interrupted``), runs the ``response`` hook and ends the client's body cleanly (chunked
terminator / HTTP/2 END_STREAM). An HTTP/1 upstream connection is then closed so it is never reused
mid-body. When the stream cannot be reached (an incompatible mitmproxy) it is left to mitmproxy's
``tcp_timeout`` and one warning is logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ..wire import reach

logger = logging.getLogger(__name__)

__all__ = ["HEADER_TIMEOUT", "HeaderTimeout", "IdleWatch"]


class IdleWatch:
    """Watches the live streams; one periodic task per event loop, started on the first stream."""

    def __init__(self) -> None:
        self.timeout = 0.0
        self._streams: dict[str, tuple[Any, Any]] = {}  # flow id -> (flow, StreamHandler)
        self._task: asyncio.Task | None = None
        self._warned = False

    def add(self, flow: Any, handler: Any) -> None:
        if self.timeout <= 0:
            return
        self._streams[flow.id] = (flow, handler)
        if self._task is None or self._task.done():
            try:
                self._task = asyncio.get_running_loop().create_task(self._loop())
            except RuntimeError:  # no loop (unit tests calling hooks directly)
                self._task = None

    def discard(self, flow: Any) -> None:
        self._streams.pop(flow.id, None)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._streams.clear()

    async def _loop(self) -> None:
        while self._streams:
            timeout = self.timeout
            if timeout <= 0:
                self._streams.clear()
                break
            await asyncio.sleep(min(1.0, max(timeout / 4, 0.05)))
            now = time.monotonic()
            for fid, (flow, handler) in list(self._streams.items()):
                if handler.finished:
                    self._streams.pop(fid, None)
                elif now - handler.last_activity >= timeout:
                    self._streams.pop(fid, None)
                    try:
                        await self._end(flow, handler, now - handler.last_activity)
                    except Exception:  # noqa: BLE001 - never break the watchdog
                        logger.exception("proxai: idle timeout: could not end the stream")
        self._task = None

    async def _end(self, flow: Any, handler: Any, idle: float) -> None:
        from mitmproxy.proxy.layers.http import ResponseEndOfMessage

        msg = (f"upstream sent nothing for {idle:.0f} s (proxai_idle_timeout={self.timeout:g} s); "
               "the stream was ended before its terminal event")
        found = reach.find(flow)
        if found is None:
            if not self._warned:
                self._warned = True
                logger.warning("proxai: idle timeout: cannot reach mitmproxy's stream for %s; "
                               "leaving it to tcp_timeout", flow.request.pretty_url)
            return
        if found.state != "state_stream_response_body":
            return  # not streaming (any more): nothing to end
        handler.idle_message = msg
        await reach.deliver(found, [ResponseEndOfMessage(found.stream.stream_id)])
        logger.info("proxai: %s: %s", flow.request.pretty_url, msg)
        _close_http1_upstream(found, flow)


def _close_http1_upstream(found: reach.Reach, flow: Any) -> None:
    """An HTTP/1 upstream connection still inside a response must not be reused for another
    request: close it (HTTP/2: other streams live on)."""
    server = flow.server_conn
    conn = found.handler
    if server is not None and server.alpn != b"h2" and server in getattr(conn, "transports", {}):
        conn.close_connection(server)


# ----------------------------------------------------------------------------- before the headers
#: default seconds an upstream may take before its response headers (a non-streamed answer sends
#: them only when it is complete; mitmproxy's own tcp_timeout of 600 s would cut the client instead)
HEADER_TIMEOUT = 300


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("proxai: header timeout failed", exc_info=task.exception())


def timeout_response(flow: Any, seconds: float) -> Any:
    """A 504 in the protocol of the upstream request (the translation turns it into the client's)."""
    import orjson
    from mitmproxy import http

    from proxai_core.codecs import native_error
    from proxai_core.neutral import Error, ErrorKind

    from ..wire.protocols import DEFAULT_PROTOCOL
    from ..wire.routing import recognize

    ep = recognize(flow.request.method, flow.request.path)
    proto = (ep.protocol if ep is not None else None) or DEFAULT_PROTOCOL
    err = Error(kind=ErrorKind.TIMEOUT, status=504, message=(
        f"upstream sent no response headers within {seconds:g} s (proxai_header_timeout)"))
    status, body = native_error(err, proto)
    return http.Response.make(status, orjson.dumps(body), {
        "content-type": "application/json", "x-proxai-timeout": "headers"})


class HeaderTimeout:
    """``proxai_header_timeout``: an LLM request whose upstream sends no response headers in time
    gets a 504 in its own protocol (through the normal response path: translated, annotated,
    recorded) instead of hanging until mitmproxy's tcp_timeout. One timer per flow in flight."""

    def __init__(self) -> None:
        self.timeout = float(HEADER_TIMEOUT)
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_header_timeout", int, HEADER_TIMEOUT,
            "Seconds an LLM request may wait for the upstream's response headers before ProxAI answers "
            "the client with its native 504 timeout error. A non-streamed request gets its headers "
            "only once the whole answer is ready: raise it for very long generations. 0: off.",
        )

    def configure(self, updated: set[str]) -> None:
        from mitmproxy import ctx, exceptions

        if "proxai_header_timeout" in updated:
            value = ctx.options.proxai_header_timeout
            if value < 0:
                raise exceptions.OptionsError("proxai_header_timeout must be 0 (off) or a number of seconds")
            self.timeout = float(value)

    def request(self, flow: Any) -> None:
        if self.timeout <= 0 or not flow.live or flow.response is not None or flow.error is not None:
            return
        from ..flow.state import flow_state
        from ..wire.routing import recognize

        if flow_state(flow) is None and recognize(flow.request.method, flow.request.path) is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._cancel(flow)
        self._timers[flow.id] = loop.call_later(self.timeout, self._fire, flow)

    def _cancel(self, flow: Any) -> None:
        t = self._timers.pop(flow.id, None)
        if t is not None:
            t.cancel()

    def responseheaders(self, flow: Any) -> None:  # (a response set by an addon: the timer finds it)
        self._cancel(flow)

    def error(self, flow: Any) -> None:
        self._cancel(flow)

    def done(self) -> None:
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()

    def _fire(self, flow: Any) -> None:
        self._timers.pop(flow.id, None)
        task = asyncio.get_running_loop().create_task(self._answer(flow))
        task.add_done_callback(_log_failure)

    async def _answer(self, flow: Any) -> None:
        from mitmproxy.proxy.layers.http import ResponseData, ResponseEndOfMessage, ResponseHeaders

        if flow.response is not None or flow.error is not None:
            return
        found = reach.find(flow)
        if found is None:
            logger.warning("proxai: header timeout: cannot reach mitmproxy's stream for %s",
                           flow.request.pretty_url)
            return
        if found.state != "state_wait_for_response_headers":
            return  # the headers arrived meanwhile
        resp = timeout_response(flow, self.timeout)
        body = resp.raw_content or b""
        resp.content = b""  # the body arrives as data, like a real one
        resp.headers["content-length"] = str(len(body))
        sid = found.stream.stream_id
        await reach.deliver(found, [ResponseHeaders(sid, resp, False), ResponseData(sid, body),
                                    ResponseEndOfMessage(sid)])
        logger.info("proxai: %s: no response headers within %g s: answered 504", flow.request.pretty_url,
                    self.timeout)
        # the upstream may still answer: an HTTP/1 connection must not be reused for another request
        _close_http1_upstream(found, flow)
