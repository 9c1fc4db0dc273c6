"""Translation: the one place that decides, once per flow, what translation runs, and runs it.

:func:`plan` decides from the response head (status, content type) and the flow's state, in
``responseheaders``; the decision is stored in ``state.translation`` (and so in the record).
``responseheaders`` installs the stream callable for ``stream`` / streamed ``observe``;
``response`` runs the body translations; ``error`` finishes a stream cut by a disconnect.
Flows read from a file (``mitmdump -nr``) are left to the annotation addon.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from mitmproxy import ctx, http

from proxai_core import Plan, error_stop_info, stop_of_error
from proxai_core.codecs import get
from proxai_core.neutral import Error, ErrorKind

from ..config.options import RouteOptions, check_deferred, options_error
from ..flow.complete import apply_outcome, decode_or_error, unreadable
from ..flow.errorhints import note_key_origin
from ..flow.modellist import finish_models
from ..flow.record import LIMIT_OPTIONS, safe_body_limit
from ..flow.replies import native_error, set_body
from ..flow.state import FlowState, flow_state, open_exchange
from ..redaction.scrubber import exact_redactor
from ..wire.bodies import DEFAULT_LIMIT, BodyError, codings, offload
from ..wire.protocols import fallback_error_frame
from ..wire.streaming import ErrorOnce, StreamHandler
from .idle import IdleWatch

logger = logging.getLogger(__name__)

__all__ = ["IDLE_TIMEOUT", "ErrorOnce", "Translator", "plan"]

#: default seconds of upstream silence after which a stream is ended (below mitmproxy's tcp_timeout
#: of 600 s, above the longest silent reasoning we know of)
IDLE_TIMEOUT = 300
_SSE = "text/event-stream"
#: complete bodies from this size (compressed ones always) are decoded in a worker thread
THREAD_BYTES = 1 << 20


def plan(state: FlowState, resp: http.Response) -> Plan:
    """What translation a flow's response gets, from its head: the proxy's own answers and model lists
    here, a generation's by its exchange (status, content type)."""
    if state.synthetic:
        return Plan.SYNTHETIC
    if state.kind in ("models", "model"):
        return Plan.MODELS
    if state.upstream_protocol is None or state.client_protocol is None:
        return Plan.ERROR if resp.status_code >= 400 else Plan.NONE
    if state.kind not in ("generate", "count_tokens") and resp.status_code < 400:
        return Plan.NONE
    return open_exchange(state).respond(state.upstream_protocol, resp.status_code,
                                        resp.headers.get("content-type", ""), headers=resp.headers,
                                        routed=state.route is not None,
                                        whole=resp.headers.get("content-length", "").strip() == "0")


class Translator:
    """Runs the planned translation of each LLM flow's response (see the module docstring)."""

    def __init__(self, options: RouteOptions) -> None:
        self.options = options
        self.body_limit = DEFAULT_LIMIT
        self.idle = IdleWatch()

    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_idle_timeout", int, IDLE_TIMEOUT,
            "Seconds an LLM stream may go without any upstream byte before ProxAI ends it with the "
            "client's native error event (StopInfo interrupted). 0: off (mitmproxy's tcp_timeout then "
            "cuts the connection instead).",
        )
        check_deferred(ints=("proxai_idle_timeout",))

    def configure(self, updated: set[str]) -> None:
        if updated & LIMIT_OPTIONS:
            self.body_limit = safe_body_limit()  # read once: an option lookup costs a copy
        if "proxai_idle_timeout" in updated:
            idle = int(ctx.options.proxai_idle_timeout)
            if idle < 0:
                raise options_error(f"proxai_idle_timeout: must be 0 (off) or a number of seconds, got {idle}")
            self.idle.timeout = float(idle)

    def done(self) -> None:
        self.idle.stop()

    # ------------------------------------------------------------------------- hooks
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = flow_state(flow)
        resp = flow.response
        if state is None or resp is None or not flow.live or state.synthetic:
            return
        try:
            state.translation = plan(state, resp)
        except Exception as exc:  # noqa: BLE001 - a failing exchange must not break the flow
            self._unplanned(flow, state, resp, exc)
            return
        if state.translation not in (Plan.OBSERVE, Plan.NONE) or state.replay is not None:
            # what the upstream answered, before the status and headers are rewritten for the client
            # (a pass-through flow's own response shows them: no copy)
            state.upstream_status = resp.status_code
            state.upstream_headers = [(k, v) for k, v in resp.headers.items(multi=True)
                                      if not k.lower().startswith("x-proxai-replay")]
        if state.exchange is not None and state.exchange.streaming:
            self._install_stream(flow, state, resp)

    def _unplanned(self, flow: http.HTTPFlow, state: FlowState, resp: http.Response, exc: Exception) -> None:
        """No exchange could plan the response (a ProxAI bug): passed through when nothing had to be
        translated, else the client's native error frame."""
        logger.error("proxai: cannot plan the response: %s", exc, exc_info=exc)
        state.warnings.append(f"stream translator unavailable: {exc}")
        if state.upstream_protocol is state.client_protocol or state.client_protocol is None:
            state.translation = Plan.NONE
            return
        state.translation = Plan.ERROR
        state.handler = resp.stream = ErrorOnce(
            fallback_error_frame(state.client_protocol, f"proxai cannot translate this stream: {exc}"))
        # (the frame is in the client's own stream framing: SSE, or e.g. Bedrock's event stream)
        self._client_stream_headers(flow, resp, get(state.client_protocol).wire.stream_type
                                    or "text/event-stream; charset=utf-8")

    def _install_stream(self, flow: http.HTTPFlow, state: FlowState, resp: http.Response) -> None:
        ex = state.exchange
        assert ex is not None and state.client_protocol is not None
        passthrough = state.translation is Plan.OBSERVE
        handler = StreamHandler(ex, state.client_protocol, passthrough=passthrough,
                                content_encoding=resp.headers.get("content-encoding"))
        state.handler = resp.stream = handler
        self.idle.add(flow, handler)
        if not passthrough:
            self._client_stream_headers(flow, resp, ex.client_content_type)

    @staticmethod
    def _client_stream_headers(flow: http.HTTPFlow, resp: http.Response, content_type: str) -> None:
        """The head of a stream ProxAI writes: its content type, no length, chunked on HTTP/1.1."""
        h = resp.headers
        for name in ("content-length", "content-encoding", "content-md5", "etag"):
            h.pop(name, None)
        h["content-type"] = content_type
        h["cache-control"] = "no-cache"
        if flow.request.http_version == "HTTP/1.1":
            h["transfer-encoding"] = "chunked"
        else:
            h.pop("transfer-encoding", None)

    def response(self, flow: http.HTTPFlow) -> Any:
        self.idle.discard(flow)
        state = flow_state(flow)
        resp = flow.response
        if not flow.live or state is None or state.synthetic or resp is None:
            return None
        if state.handler is None:
            if state.translation is None:
                state.translation = plan(state, resp)
            raw, ce = resp.raw_content, resp.headers.get("content-encoding")
            if raw is not None and (codings(ce) or len(raw) > THREAD_BYTES):
                return self._response_off_loop(flow, state, raw, ce)  # only this flow waits
        self._finish(flow, state, None)
        return None

    async def _response_off_loop(self, flow: http.HTTPFlow, state: FlowState, raw: bytes, ce: str | None) -> None:
        content = await offload(decode_or_error, raw, ce, self.body_limit)
        clean = None
        if state.translation == "error" and isinstance(content, bytes):
            clean = await offload(_secretless, state, content)  # a big error body: scanned off the loop too
        self._finish(flow, state, content, clean)

    def _finish(self, flow: http.HTTPFlow, state: FlowState, content: bytes | BodyError | None,
                clean: bytes | None = None) -> None:
        try:
            if state.handler is not None:
                finish_stream(flow, state)
            elif flow.response is not None:
                self._finish_body(flow, state, flow.response, content, clean)
        except Exception as exc:
            logger.exception("proxai: response handling failed")
            state.warnings.append(f"response handling failed: {type(exc).__name__}: {exc}")
            if state.route is not None and state.handler is None and flow.response is not None:
                st, body = native_error(502, "api_error", f"proxai failed to translate the response: {exc}",
                                        state.client_protocol)
                set_body(flow.response, st, orjson.dumps(body), "application/json")
                if state.stop is None:
                    state.stop = error_stop_info(st, body)

    def error(self, flow: http.HTTPFlow) -> None:
        self.idle.discard(flow)
        if not flow.live:
            return
        state = flow_state(flow)
        if state is None or state.annotated:
            return
        msg = flow.error.msg if flow.error else "flow failed"
        if flow.response is not None and not state.synthetic:
            # the upstream connection broke inside the response (a client disconnect is not a cut)
            state.upstream_cut = "client" not in msg.lower()
        if state.handler is not None:
            finish_stream(flow, state, interrupted=msg)
        elif state.stop is None:
            state.stop = stop_of_error(Error(kind=ErrorKind.INTERRUPTED, message=msg, status=502))

    # ------------------------------------------------------------------------- complete bodies
    def _finish_body(self, flow: http.HTTPFlow, state: FlowState, resp: http.Response,
                     content: bytes | BodyError | None, clean: bytes | None = None) -> None:
        if content is None and resp.raw_content is not None:
            content = decode_or_error(resp.raw_content, resp.headers.get("content-encoding"), self.body_limit)
        if content is None:
            return
        how = state.translation
        if isinstance(content, BodyError):
            unreadable(flow, state, content)
            return
        if how not in (Plan.NONE, Plan.OBSERVE):
            state.upstream_text = content.decode("utf-8", "replace")
        if how is Plan.MODELS:
            finish_models(resp, state, content, self.options.routes)
        elif how is Plan.ERROR:
            content = _without_secrets(state, resp, content, clean)
            if state.exchange is not None:
                apply_outcome(state, resp, state.exchange.complete(content))
            note_key_origin(state, resp)
        elif state.exchange is not None and how not in (Plan.NONE, Plan.SYNTHETIC):
            apply_outcome(state, resp, state.exchange.complete(content))


def _secretless(state: FlowState, content: bytes) -> bytes:
    """A routed flow's upstream error may echo the key the route injected (raw or encoded): the
    client never gets it back, whether the error is translated or passed through as it is."""
    if state.route is None or not state.secrets:
        return content
    return exact_redactor(state.secrets).data(content)


def _without_secrets(state: FlowState, resp: http.Response, content: bytes, clean: bytes | None) -> bytes:
    """``content`` without the flow's secrets (``clean``: already computed off the loop)."""
    if clean is None:
        clean = _secretless(state, content)
    if clean is not content:  # the pass-through case; a translation replaces the body anyway
        try:
            resp.content = clean  # encoded again as the upstream had encoded it
        except ValueError:
            resp.headers.pop("content-encoding", None)
            resp.content = clean
    return clean


def finish_stream(flow: http.HTTPFlow, state: FlowState, interrupted: str | None = None) -> None:
    """End of a streamed response (or its cut): StopInfo, usage, recording copies."""
    handler = state.handler
    if isinstance(handler, ErrorOnce):
        state.stop = stop_of_error(Error(kind=ErrorKind.INTERRUPTED, message="stream translator unavailable", status=502))
        _keep_client_body(flow, handler.frame if handler.sent else b"")
        return
    assert handler is not None
    handler.finish(interrupted)
    state.keep_upstream = bool(handler.interrupted or handler.failed)
    if state.translation is not Plan.OBSERVE or state.keep_upstream:
        state.upstream_text = handler.upstream_bytes.decode("utf-8", "replace")
    state.upstream_chunks = handler.chunk_times
    state.truncated.extend(handler.truncations)  # recording caps (recordcap.py), once per copy
    ex = handler.exchange
    state.stop = ex.stop
    if state.stop is None and (interrupted or not handler.observe_ok):
        state.stop = stop_of_error(Error(kind=ErrorKind.INTERRUPTED, message=interrupted or "stream not observed",
                                         status=502))
    state.usage = ex.usage
    for w in handler.extra_warnings:
        if w not in state.warnings:
            state.warnings.append(w)
    if ex.model and not state.upstream_model:
        state.upstream_model = ex.model
    _keep_client_body(flow, handler.client_bytes)


def _keep_client_body(flow: http.HTTPFlow, data: bytes) -> None:
    """A streamed body is not stored by mitmproxy (unless store_streamed_bodies): keep what the
    client got, so the saved flow shows it. Headers stay as sent (content-encoding included)."""
    if flow.response is not None:
        flow.response.raw_content = data
