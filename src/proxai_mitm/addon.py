"""The ProxAI mitmproxy addon: route, rewrite and stream-translate LLM traffic, annotate every flow.

Hook map (mitmproxy 12.3):

- ``load``: options, the "LLM" contentview. ``configure``: parse/validate them once (errors logged
  and raised); load the replay recordings.
- ``running`` / ``done``: start / stop the loopback replay server (``proxai_replay``; it also starts
  at the first request that needs it).
- ``requestheaders``: make what gets stored redacted (``proxai_redact``); refuse a WebSocket upgrade
  on a routed ``/responses`` fast (426).
- ``request``: recognize, route, rewrite URL/body/headers, or answer natively (400/401/502/426);
  with ``proxai_replay``, send the upstream request to the replay server.
- ``responseheaders``: record the upstream status/headers; install the stream callable for
  ``text/event-stream``.
- ``response``: translate complete bodies and errors; keep the client body of a stream; finalize and
  annotate.
- ``error``: disconnects and unreachable upstreams: StopInfo ``interrupted``; annotate.
- commands ``proxai.report`` and ``proxai.export``.

Offline reads (``flow.live`` false, ``mitmdump -nr``) are never rewritten; they are annotated.

Redaction: mitmproxy's ``Save`` (``-w``) serializes ``flow.get_state()`` inside the same ``response``
hook chain, *before* a non-streamed response is sent to the client. Redacting the live flow there
would strip ``set-cookie`` from what the client receives, so the addon leaves the live flow alone and
gives it a ``get_state`` that returns a redacted copy: what is stored (``-w``, ``save.file``, mitmweb's
download) is redacted, what goes over the wire is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import mitmproxy.types
import orjson
from mitmproxy import command, ctx, exceptions, http
from mitmproxy import flow as mflow
from mitmproxy.net.http import status_codes

from proxai_core import (
    Protocol,
    StreamTranslator,
    TranslationError,
    dumps,
    error_response,
    error_stop_info,
    response_from_stream,
    stop_of_error,
    stream_from_response,
    translate_error,
    translate_request,
    translate_response_result,
)
from proxai_core.neutral import Error

from . import contentview, routing
from .annotate import FlowState, annotate, log_line
from .config import ConfigError, Route, RouteSet, routes_from_options, routes_from_toml
from .idle import IdleWatch
from .redact import redact_flow
from .replay import MISS_HEADER, RecordingIndex, ReplayServer, canonical_key
from .report import export_command, report_command
from .streaming import StreamHandler, native_error_frame

logger = logging.getLogger(__name__)

__all__ = ["ProxAI"]

_STATE_ATTR = "_proxai_state"
_OPTIONS = ("proxai_target", "proxai_upstream", "proxai_key_env", "proxai_model", "proxai_config", "proxai_redact",
            "proxai_replay", "proxai_replay_fast", "proxai_replay_miss", "proxai_idle_timeout")
_BOOL_OPTIONS = ("proxai_redact", "proxai_replay_fast")
_INT_OPTIONS = ("proxai_idle_timeout",)
#: default seconds of upstream silence after which a stream is ended (below mitmproxy's tcp_timeout
#: of 600 s, above the longest silent reasoning we know of)
IDLE_TIMEOUT = 300
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off", ""}
REPLAY_MISS = ("error", "forward")
#: the upstream key sent to the replay server when none is configured (nothing leaves the machine)
REPLAY_PLACEHOLDER_KEY = "proxai-replay-no-key"
#: how long an upstream that refused a connection is probed before requests are sent to it
DEAD_TTL = 60.0
PROBE_TIMEOUT = 3.0
#: an upstream that answered within this many seconds is not probed before a request
SEEN_TTL = 600.0

_INVALID = object()


def get_state(flow: Any) -> FlowState | None:
    return getattr(flow, _STATE_ATTR, None)


def _set_state(flow: Any, state: FlowState | None) -> None:
    setattr(flow, _STATE_ATTR, state)


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    return data.decode("utf-8", "replace")


def native_error(status: int, etype: str, message: str, protocol: Protocol | None) -> tuple[int, dict]:
    """A native error body of the client's protocol (Anthropic-style input, any output)."""
    proto = protocol or Protocol.CHAT
    return translate_error(status, {"type": "error", "error": {"type": etype, "message": message}}, proto, proto)


def _set_body(resp: http.Response, status: int, content: bytes, content_type: str) -> None:
    resp.status_code = status
    resp.reason = status_codes.RESPONSES.get(status, "")
    for h in ("content-encoding", "transfer-encoding", "content-length"):
        resp.headers.pop(h, None)
    resp.headers["content-type"] = content_type
    resp.content = content


class ProxAI:
    """Translate and annotate live LLM traffic (OpenAI Chat / Responses, Anthropic Messages)."""

    def __init__(self) -> None:
        self.routes = RouteSet()
        self.redact = True
        self._dead: dict[tuple[str, int], float] = {}
        self._seen: dict[tuple[str, int], float] = {}  # upstream -> last time it answered
        self.replay_index: RecordingIndex | None = None
        self.replay_source = ""
        self.replay_fast = False
        self.replay_miss = "error"
        self.replay_server: ReplayServer | None = None
        self._replay_lock: asyncio.Lock | None = None
        self.idle = IdleWatch()

    # ------------------------------------------------------------------------- options
    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_target", str, "",
            "Translate every recognized LLM request to this protocol: openai_chat_completions, "
            "openai_responses or anthropic_messages. Empty: no translation (flows are only annotated).",
        )
        loader.add_option(
            "proxai_upstream", str, "",
            "Base URL of the upstream for proxai_target, e.g. https://api.anthropic.com. Empty: keep "
            "the request's own scheme, host and port (reverse mode, multi-protocol gateways).",
        )
        loader.add_option(
            "proxai_key_env", str, "",
            "Name of the environment variable holding the upstream API key. Required when "
            "proxai_upstream is another host than the client addressed (client keys are never forwarded there).",
        )
        loader.add_option(
            "proxai_model", str, "",
            "Upstream model: one name, or a map 'client=upstream,...' with globs and '*' as catch-all.",
        )
        loader.add_option(
            "proxai_config", str, "",
            "A TOML routes file ([[routes]] with name, match and target). When set it replaces "
            "proxai_target / proxai_upstream / proxai_key_env / proxai_model.",
        )
        loader.add_option(
            "proxai_redact", bool, True,
            "Keep credentials out of stored flows (headers, URLs, key shapes in bodies): what -w and "
            "save.file write is redacted, the live traffic is not. Keys never appear in proxai "
            "metadata, comments or logs either way.",
        )
        loader.add_option(
            "proxai_replay", str, "",
            "Answer upstream LLM requests from recordings: a .mitm file or a folder of them. Requests "
            "are matched on the upstream request (after translation) and the answers translated live "
            "for the client. Use with connection_strategy=lazy (set automatically).",
        )
        loader.add_option(
            "proxai_replay_fast", bool, False,
            "Replay streams as fast as possible instead of with the recorded pacing.",
        )
        loader.add_option(
            "proxai_replay_miss", str, "error",
            "What a request without a recording gets in replay: 'error' (a 404 in the client's "
            "protocol naming the request) or 'forward' (sent to the real upstream).",
        )
        loader.add_option(
            "proxai_idle_timeout", int, IDLE_TIMEOUT,
            "Seconds an LLM stream may go without any upstream byte before ProxAI ends it with the "
            "client's native error event (StopInfo interrupted). 0: off (mitmproxy's tcp_timeout then "
            "cuts the connection instead).",
        )
        contentview.register()
        self._check_deferred()

    def _check_deferred(self) -> None:
        """mitmproxy parses ``--set`` values of script options after ``load``; a bad bool makes the
        script silently not load. Say so loudly, naming the option."""
        try:
            deferred = ctx.options.deferred
        except Exception:  # noqa: BLE001 - not available outside a master
            return
        for name in _BOOL_OPTIONS:
            raw = getattr(deferred.get(name), "val", None)
            if isinstance(raw, list) and raw:
                v = str(raw[-1]).strip().lower()
                if v not in _BOOL_WORDS:
                    logger.error(
                        "proxai: invalid option %s=%r: expected true or false. "
                        "mitmproxy will not load the ProxAI addon until this is fixed.", name, raw[-1]
                    )
        for name in _INT_OPTIONS:
            raw = getattr(deferred.get(name), "val", None)
            if isinstance(raw, list) and raw and not str(raw[-1]).strip().lstrip("-").isdigit():
                logger.error(
                    "proxai: invalid option %s=%r: expected a whole number of seconds. "
                    "mitmproxy will not load the ProxAI addon until this is fixed.", name, raw[-1]
                )

    def configure(self, updated: set[str]) -> None:
        if not updated & set(_OPTIONS):
            return
        opts = ctx.options
        idle = int(getattr(opts, "proxai_idle_timeout", IDLE_TIMEOUT))
        if idle < 0:
            msg = f"proxai_idle_timeout: must be 0 (off) or a number of seconds, got {idle}"
            logger.error("proxai: invalid option %s", msg)
            raise exceptions.OptionsError(f"proxai: {msg}")
        self.idle.timeout = float(idle)
        replay_index, replay_miss = self._configure_replay(updated)
        try:
            if opts.proxai_config:
                routes = routes_from_toml(opts.proxai_config)
                ignored = [o for o in _OPTIONS[:4] if getattr(opts, o)]
                if ignored:
                    logger.warning("proxai: proxai_config is set; ignoring %s", ", ".join(ignored))
            else:
                routes = routes_from_options(
                    opts.proxai_target, opts.proxai_upstream, opts.proxai_key_env, opts.proxai_model
                )
                if not opts.proxai_target and (opts.proxai_upstream or opts.proxai_model or opts.proxai_key_env):
                    logger.warning(
                        "proxai: proxai_upstream / proxai_key_env / proxai_model have no effect "
                        "without proxai_target"
                    )
        except ConfigError as e:
            logger.error("proxai: invalid option %s", e)
            raise exceptions.OptionsError(f"proxai: {e}") from None
        changed = routes != self.routes
        self.routes = routes
        self.redact = bool(opts.proxai_redact)
        self.replay_fast = bool(opts.proxai_replay_fast)
        self.replay_miss = replay_miss
        if replay_index is not False:
            self._set_replay_index(replay_index, opts.proxai_replay)
        if self.replay_server is not None:
            self.replay_server.fast = self.replay_fast
        if getattr(opts, "connection_strategy", "lazy") == "eager":
            # eager would connect to the host the client named before our request hook retargets it
            # (and fail offline before any hook could answer)
            why = ("routes send requests to other hosts" if routes.retargets
                   else "replay answers from a loopback server" if self.replay_index is not None else None)
            if why:
                opts.update(connection_strategy="lazy")
                logger.info("proxai: connection_strategy set to lazy (%s)", why)
        if changed:
            for r in routes:
                logger.info("proxai: %s", r.describe())
                if r.api_key_env and not os.environ.get(r.api_key_env):
                    logger.warning(
                        "proxai: route %r: environment variable %s is not set; its requests will get 401",
                        r.name, r.api_key_env,
                    )
            if not routes:
                logger.info("proxai: no routes; LLM flows pass through and are annotated")

    # ------------------------------------------------------------------------- replay set-up
    def _configure_replay(self, updated: set[str]) -> tuple[Any, str]:
        """Validate the replay options; returns (new index, None to switch off, or False = unchanged;
        the miss policy). Raises OptionsError (after an ERROR line naming the option)."""
        opts = ctx.options
        miss = str(opts.proxai_replay_miss).strip().lower()
        if miss not in REPLAY_MISS:
            msg = f"proxai_replay_miss: must be one of {', '.join(REPLAY_MISS)}, got {opts.proxai_replay_miss!r}"
            logger.error("proxai: invalid option %s", msg)
            raise exceptions.OptionsError(f"proxai: {msg}")
        if "proxai_replay" not in updated:
            return False, miss
        path = str(opts.proxai_replay).strip()
        if not path:
            return None, miss
        try:
            index = RecordingIndex.load(path)
        except (FileNotFoundError, ValueError, OSError) as e:
            msg = f"proxai_replay: {str(e).removeprefix('proxai replay: ')}"
            logger.error("proxai: invalid option %s", msg)
            raise exceptions.OptionsError(f"proxai: {msg}") from None
        return index, miss

    def _set_replay_index(self, index: RecordingIndex | None, source: str) -> None:
        self.replay_index = index
        self.replay_source = source if index is not None else ""
        if index is None:
            if self.replay_server is not None:
                server, self.replay_server = self.replay_server, None
                server.close()
                logger.info("proxai: replay off")
            return
        logger.info("proxai: replay %d recording(s) from %s (%s; misses: %s)", len(index), source,
                    "fast" if self.replay_fast else "recorded pacing", self.replay_miss)
        if len(index) == 0:
            logger.warning("proxai: %s holds no replayable flow (flows without a response are skipped)", source)
        if self.replay_server is not None:
            self.replay_server.index = index  # swapped in place; the server keeps its port

    async def _ensure_replay_server(self) -> ReplayServer | None:
        index = self.replay_index
        if index is None:
            return None
        if self._replay_lock is None:
            self._replay_lock = asyncio.Lock()
        async with self._replay_lock:
            if self.replay_server is None:
                server = ReplayServer(index, fast=self.replay_fast)
                await server.start()
                self.replay_server = server
            return self.replay_server

    # `running` and `done` are synchronous: mitmproxy calls them synchronously when a script is
    # (re)loaded or removed. The server starts in a task (or at the first request that needs it).
    def running(self) -> None:
        if self.replay_index is not None and self.replay_server is None:
            _spawn(self._ensure_replay_server())

    def done(self) -> None:
        self.idle.stop()
        server, self.replay_server = self.replay_server, None
        if server is not None:
            server.close()

    # ------------------------------------------------------------------------- commands
    @command.command("proxai.report")
    def report(self, flows: Sequence[mflow.Flow]) -> str:
        """A table of the LLM exchanges among the flows: time, client → upstream protocol, model,
        stop reason, category, tokens, status, route, path (e.g. proxai.report @all)."""
        table = report_command(flows)
        logger.info("proxai report:\n%s", table)
        return table

    @command.command("proxai.export")
    def export(self, flows: Sequence[mflow.Flow], path: mitmproxy.types.Path) -> str:
        """Write the normalized LLM exchanges among the flows to a file, one JSON object per line
        (e.g. proxai.export @marked ~/refusals.jsonl)."""
        try:
            msg = export_command(flows, path)
        except OSError as e:
            raise exceptions.CommandError(f"proxai.export: {e}") from e
        logger.info("proxai: %s", msg)
        return msg

    # ------------------------------------------------------------------------- request side
    def requestheaders(self, flow: http.HTTPFlow) -> None:
        _store_redacted(flow, self)
        if not flow.live or flow.response or flow.error:
            return
        req = flow.request
        if req.method != "GET" or req.headers.get("upgrade", "").lower() != "websocket":
            return
        ep = routing.recognize(req.method, req.path, req.headers)
        if ep is None or not ep.websocket:
            return
        route = self.routes.find(req.host, req.path.partition("?")[0], None, alt_paths=(req.path.partition("?")[0],))
        if route is None:
            return
        state = FlowState("websocket", Protocol.RESPONSES, route.protocol, route=route.name, translated=True)
        _set_state(flow, state)
        self._reply(
            flow, state, 426, "invalid_request_error",
            "proxai: WebSocket transport is not available on a translated route; use HTTP streaming (SSE)",
            extra_headers={"connection": "close", "upgrade": "websocket"},
        )

    def request(self, flow: http.HTTPFlow) -> Any:
        if not flow.live or flow.response or flow.error:
            return None
        req = flow.request
        ep = routing.recognize(req.method, req.path, req.headers)
        if ep is None or ep.websocket:
            return None
        try:
            if ep.kind == "generate":
                res = self._generate(flow, ep)
            elif ep.kind == "count_tokens":
                res = self._count_tokens(flow, ep)
            else:
                res = self._models(flow, ep)
        except Exception as exc:
            logger.exception("proxai: request handling failed")
            state = get_state(flow) or FlowState(ep.kind, ep.protocol, ep.protocol)
            _set_state(flow, state)
            if state.route is None:
                _set_state(flow, None)
                return None
            self._reply(flow, state, 500, "api_error", f"proxai failed to handle the request: {exc}")
            return None
        if self.replay_index is not None and flow.response is None and flow.error is None \
                and (ep.kind != "generate" or get_state(flow) is not None):
            if inspect.iscoroutine(res):
                res.close()  # no probing of the real upstream: the replay server answers
            return self._to_replay(flow)
        return res

    # ------------------------------------------------------------------------- replay
    def _to_replay(self, flow: http.HTTPFlow) -> Any:
        """Send the (translated) upstream request to the replay server, or leave it for the real
        upstream (``proxai_replay_miss=forward`` and no recording)."""
        index = self.replay_index
        assert index is not None
        req = flow.request
        state = get_state(flow)
        body = req.get_content(strict=False) or b""
        if self.replay_miss == "forward" and index.find(req.method, req.path, body) is None:
            key = canonical_key(req.method, req.path, body)
            logger.info("proxai replay: no recording matches %s; forwarded upstream", key)
            if state is not None:
                state.replay = {"result": "forwarded", "key": key}
            return None
        server = self.replay_server
        if server is None or not server.running:
            return self._start_replay_then_redirect(flow)
        self._redirect_to_replay(flow, server)
        return None

    async def _start_replay_then_redirect(self, flow: http.HTTPFlow) -> None:
        server = await self._ensure_replay_server()
        if server is not None:
            self._redirect_to_replay(flow, server)

    @staticmethod
    def _redirect_to_replay(flow: http.HTTPFlow, server: ReplayServer) -> None:
        req = flow.request
        state = get_state(flow)
        upstream_url = req.pretty_url
        host_header = req.host_header
        req.url = f"http://127.0.0.1:{server.port}{req.path}"
        if host_header:
            req.host_header = host_header  # the recording shows the host the request was meant for
        if state is not None:
            state.replay = {"result": "sent", "upstream_url": upstream_url}

    def _read_json(self, flow: http.HTTPFlow) -> tuple[bytes, Any, str | None]:
        raw = flow.request.get_content(strict=False) or b""
        try:
            return raw, orjson.loads(raw), None
        except orjson.JSONDecodeError as e:
            return raw, _INVALID, str(e)

    def _generate(self, flow: http.HTTPFlow, ep: routing.Endpoint) -> Any:
        req = flow.request
        raw, body, jerr = self._read_json(flow)
        model = body.get("model") if isinstance(body, dict) else None
        model = model if isinstance(model, str) else None
        path = req.path.partition("?")[0]
        route = self.routes.find(req.host, path, model)
        client = ep.protocol
        assert client is not None
        if route is None:
            if not routing.looks_like_llm(body):
                return None
            _set_state(flow, FlowState(
                "generate", client, client, None, client_text=_text(raw), client_body=body,
                client_stream=bool(body.get("stream")), client_model=model,
                secrets=self._secrets(req.headers, None),
            ))
            return None
        if body is _INVALID and "json" not in req.headers.get("content-type", "").lower() \
                and raw.lstrip()[:1] not in (b"{", b"["):
            return None  # not an LLM request after all (no JSON at all)
        state = FlowState(
            "generate", client, route.protocol, route.name, client_text=_text(raw),
            client_body=body if isinstance(body, dict) else None,
            client_stream=bool(body.get("stream")) if isinstance(body, dict) else False,
            client_model=model, translated=route.protocol is not client,
            secrets=self._secrets(req.headers, route),
        )
        _set_state(flow, state)
        if body is _INVALID:
            return self._reply(flow, state, 400, "invalid_request_error",
                               f"request body is not valid JSON: {jerr}")
        if not isinstance(body, dict):
            return self._reply(flow, state, 400, "invalid_request_error", "request body must be a JSON object")
        sniffed = routing.sniff_protocol(body)
        if sniffed is not None and sniffed is not client:
            return self._reply(
                flow, state, 400, "invalid_request_error",
                f"this looks like a {sniffed.value} request body, but {path} expects {client.value}",
            )
        scheme, host, port, up_path = routing.upstream_target(
            ep, route.protocol, route.base_url, scheme=req.scheme, host=req.host, port=req.port
        )
        same_host = self._same_host(req, host, port)
        key, kerr = self._key(route, same_host, req.headers, host)
        if kerr:
            return self._reply(flow, state, 401, "authentication_error", kerr)
        try:
            up = translate_request(body, client, route.protocol, warnings=state.warnings)
        except Exception as exc:
            if not isinstance(exc, (TranslationError, ValueError, TypeError, KeyError, AttributeError)):
                logger.exception("proxai: translate_request failed")
            status, native = error_response(exc, client)
            return self._reply_body(flow, state, status, native)
        if up is body:
            up = dict(body)
        mapped = route.models.map(up.get("model") if isinstance(up.get("model"), str) else model)
        if mapped:
            up["model"] = mapped
        state.upstream_model = up.get("model") if isinstance(up.get("model"), str) else None
        try:
            payload = dumps(up)  # falls back to the stdlib past orjson's 254 levels
        except TranslationError as err:  # nesting deeper than even the stdlib writes
            status, native = error_response(err, client)
            return self._reply_body(flow, state, status, native)
        except TypeError as exc:
            err = TranslationError(f"body: the request cannot be re-encoded ({exc})", field="body")
            status, native = error_response(err, client)
            return self._reply_body(flow, state, status, native)
        self._retarget(flow, scheme, host, port, up_path)
        routing.rewrite_headers(req.headers, client=client, target=route.protocol, same_host=same_host,
                                key=key, upstream_host=host)
        req.content = payload
        return self._maybe_probe(flow, state, host, port)

    def _count_tokens(self, flow: http.HTTPFlow, ep: routing.Endpoint) -> Any:
        req = flow.request
        raw, body, jerr = self._read_json(flow)
        model = body.get("model") if isinstance(body, dict) else None
        model = model if isinstance(model, str) else None
        path = req.path.partition("?")[0]
        route = self.routes.find(req.host, path, model, alt_paths=ep.generate_paths)
        if route is None:
            return None
        state = FlowState("count_tokens", Protocol.ANTHROPIC, route.protocol, route.name,
                          client_text=_text(raw), client_body=body if isinstance(body, dict) else None,
                          client_model=model, translated=route.protocol is not Protocol.ANTHROPIC,
                          secrets=self._secrets(req.headers, route))
        _set_state(flow, state)
        if not isinstance(body, dict):
            return self._reply(flow, state, 400, "invalid_request_error",
                               f"request body is not a valid JSON object{': ' + jerr if jerr else ''}")
        if route.protocol is not Protocol.ANTHROPIC:
            # OpenAI protocols have no token counting endpoint: an honest local estimate
            n = estimate_tokens(body)
            state.warnings.append("input_tokens estimated locally (about 4 characters per token); "
                                  f"the {route.protocol.value} upstream has no token counting endpoint")
            state.synthetic = True
            flow.response = http.Response.make(
                200, orjson.dumps({"input_tokens": n}),
                {"content-type": "application/json", "x-proxai-estimate": "chars/4"},
            )
            return None
        scheme, host, port, up_path = routing.upstream_target(
            ep, route.protocol, route.base_url, scheme=req.scheme, host=req.host, port=req.port
        )
        same_host = self._same_host(req, host, port)
        key, kerr = self._key(route, same_host, req.headers, host)
        if kerr:
            return self._reply(flow, state, 401, "authentication_error", kerr)
        up = dict(body)
        mapped = route.models.map(model)
        if mapped:
            up["model"] = mapped
        state.upstream_model = mapped
        self._retarget(flow, scheme, host, port, up_path)
        routing.rewrite_headers(req.headers, client=Protocol.ANTHROPIC, target=route.protocol,
                                same_host=same_host, key=key, upstream_host=host)
        try:
            req.content = dumps(up)
        except (TranslationError, TypeError) as exc:
            status, native = error_response(TranslationError(f"body: the request cannot be re-encoded ({exc})",
                                                             field="body"), Protocol.ANTHROPIC)
            return self._reply_body(flow, state, status, native)
        return self._maybe_probe(flow, state, host, port)

    def _models(self, flow: http.HTTPFlow, ep: routing.Endpoint) -> Any:
        req = flow.request
        path = req.path.partition("?")[0]
        route = self.routes.find(req.host, path, ep.model_id, alt_paths=ep.generate_paths)
        if route is None:
            return None
        anthropic_client = "anthropic-version" in req.headers or "x-api-key" in req.headers
        client = Protocol.ANTHROPIC if anthropic_client else None
        state = FlowState(ep.kind, client, route.protocol, route.name, client_model=ep.model_id,
                          secrets=self._secrets(req.headers, route))
        state.extra = {"anthropic_client": anthropic_client, "model_id": ep.model_id}
        _set_state(flow, state)
        upstream_id = route.models.map(ep.model_id) if ep.model_id else None
        state.upstream_model = upstream_id
        scheme, host, port, up_path = routing.upstream_target(
            ep, route.protocol, route.base_url, scheme=req.scheme, host=req.host, port=req.port,
            model_id=upstream_id,
        )
        same_host = self._same_host(req, host, port)
        key, kerr = self._key(route, same_host, req.headers, host)
        if kerr:
            return self._reply(flow, state, 401, "authentication_error", kerr)
        self._retarget(flow, scheme, host, port, up_path)
        routing.rewrite_headers(req.headers, client=client, target=route.protocol, same_host=same_host,
                                key=key, upstream_host=host, body=False)
        return self._maybe_probe(flow, state, host, port)

    # ------------------------------------------------------------------------- request helpers
    @staticmethod
    def _same_host(req: http.Request, host: str, port: int) -> bool:
        return host.lower() == req.host.lower() and port == req.port

    @staticmethod
    def _retarget(flow: http.HTTPFlow, scheme: str, host: str, port: int, path: str) -> None:
        req = flow.request
        if (scheme, host, port) != (req.scheme, req.host, req.port):
            default = 443 if scheme == "https" else 80
            authority = host if port == default else f"{host}:{port}"
            if ":" in host and not host.startswith("["):
                authority = f"[{host}]" if port == default else f"[{host}]:{port}"
            req.url = f"{scheme}://{authority}{path}"
        else:
            req.path = path

    def _replay_only(self) -> bool:
        """Replay answers every upstream request (no key is needed: nothing leaves the machine)."""
        return self.replay_index is not None and self.replay_miss == "error"

    def _key(self, route: Route, same_host: bool, headers: Any, host: str) -> tuple[str | None, str | None]:
        """The credential to send upstream, or an error text (401) naming the variable."""
        if route.api_key_env:
            value = os.environ.get(route.api_key_env)
            if value:
                return value.strip(), None
            if self._replay_only():
                return REPLAY_PLACEHOLDER_KEY, None
            where = "proxai_key_env" if route.name == "default" else f"route {route.name!r} target.api_key_env"
            return None, (f"proxai: the upstream key is missing: environment variable {route.api_key_env} "
                          f"({where}) is not set in mitmproxy's environment")
        if same_host:
            return routing.client_credential(headers), None
        if self._replay_only():
            return REPLAY_PLACEHOLDER_KEY, None
        hint = "proxai_key_env" if route.name == "default" else f"target.api_key_env in route {route.name!r}"
        return None, (f"proxai: route {route.name!r} sends this request to {host}, not the host the client "
                      f"addressed, so the client's credentials are not forwarded; set {hint} to the name "
                      f"of an environment variable holding the upstream key")

    @staticmethod
    def _secrets(headers: Any, route: Route | None) -> tuple[str, ...]:
        out = []
        cred = routing.client_credential(headers)
        if cred and len(cred) >= 8:
            out.append(cred)
        if route is not None and route.api_key_env:
            v = os.environ.get(route.api_key_env, "").strip()
            if len(v) >= 8:
                out.append(v)
        return tuple(out)

    def _reply(self, flow: http.HTTPFlow, state: FlowState, status: int, etype: str, message: str,
               extra_headers: dict[str, str] | None = None) -> None:
        st, body = native_error(status, etype, message, state.client_protocol)
        self._reply_body(flow, state, st, body, extra_headers)

    def _reply_body(self, flow: http.HTTPFlow, state: FlowState, status: int, body: dict,
                    extra_headers: dict[str, str] | None = None) -> None:
        headers = {"content-type": "application/json", "x-should-retry": "false" if status < 500 else "true"}
        if extra_headers:
            headers.update(extra_headers)
        flow.response = http.Response.make(status, orjson.dumps(body), headers)
        state.synthetic = True
        if state.kind in ("generate", "count_tokens"):
            state.stop = error_stop_info(status, body)

    # unreachable upstreams: mitmproxy answers a failed connect itself (text/html 502) and gives the
    # addon no way to change that body. So an upstream that has not answered in SEEN_TTL seconds
    # (the first request to it, typically) or that failed within DEAD_TTL is probed with a TCP
    # connect first: when that fails the client gets a native 502. Steady traffic is never probed.
    def _maybe_probe(self, flow: http.HTTPFlow, state: FlowState, host: str, port: int) -> Any:
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
            self._reply(flow, state, 502, "api_error",
                        f"proxai: upstream {host}:{port} is unreachable: {reason}",
                        extra_headers={"x-should-retry": "true"})
            state.stop = stop_of_error(Error(kind="interrupted", message=f"upstream {host}:{port} unreachable: {reason}",
                                             status=502))
            return
        writer.close()
        self._dead.pop((host, port), None)
        self._seen[(host, port)] = time.monotonic()

    # ------------------------------------------------------------------------- response side
    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if not flow.live or flow.response is None:
            return
        state = get_state(flow)
        if state is None or state.synthetic:
            return
        resp = flow.response
        self._seen[(flow.request.host, flow.request.port)] = time.monotonic()
        # what the upstream answered, before the status and headers are rewritten for the client
        state.upstream_status = resp.status_code
        state.upstream_headers = [[k, v] for k, v in resp.headers.items(multi=True)
                                  if not k.lower().startswith("x-proxai-replay")]
        if state.replay is not None and MISS_HEADER in resp.headers:
            state.replay["result"] = resp.headers[MISS_HEADER]
            if resp.headers.get("x-proxai-replay-flow"):
                state.replay["flow"] = resp.headers["x-proxai-replay-flow"]
        if state.kind != "generate":
            return
        if resp.status_code >= 300 or "text/event-stream" not in resp.headers.get("content-type", "").lower():
            return
        client, upstream = state.client_protocol, state.upstream_protocol
        assert client is not None and upstream is not None
        if upstream is not client and not state.client_stream:
            return  # buffered: collected into one JSON answer in `response`
        if upstream is not client and resp.headers.get("content-length", "").strip() == "0":
            return  # an empty stream never reaches a stream callable: answered whole in `response`
        ce = resp.headers.get("content-encoding")
        passthrough = upstream is client
        try:
            translator = StreamTranslator(upstream, client, state.client_body)
        except Exception as exc:  # noqa: BLE001 - a missing codec must not break the flow
            logger.error("proxai: cannot create the stream translator: %s", exc)
            state.warnings.append(f"stream translator unavailable: {exc}")
            if passthrough:
                resp.stream = True
                return
            resp.stream = _ErrorOnce(native_error_frame(client, f"proxai cannot translate this stream: {exc}"))
            translator = None
        if translator is not None:
            handler = StreamHandler(translator, client, passthrough=passthrough, content_encoding=ce)
            state.handler = handler
            resp.stream = handler
            self.idle.add(flow, handler)
        if passthrough:
            return
        h = resp.headers
        for name in ("content-length", "content-encoding", "content-md5", "etag"):
            h.pop(name, None)
        h["content-type"] = "text/event-stream; charset=utf-8"
        h["cache-control"] = "no-cache"
        if flow.request.http_version == "HTTP/1.1":
            h["transfer-encoding"] = "chunked"
        else:
            h.pop("transfer-encoding", None)

    def response(self, flow: http.HTTPFlow) -> None:
        self.idle.discard(flow)
        _store_redacted(flow, self)
        if not flow.live:
            self._offline(flow)
            return
        state = get_state(flow)
        if state is None:
            return
        try:
            self._finish_response(flow, state)
        except Exception as exc:
            logger.exception("proxai: response handling failed")
            state.warnings.append(f"response handling failed: {type(exc).__name__}: {exc}")
            if state.route is not None and state.handler is None and flow.response is not None:
                st, body = native_error(502, "api_error", f"proxai failed to translate the response: {exc}",
                                        state.client_protocol)
                _set_body(flow.response, st, orjson.dumps(body), "application/json")
                if state.stop is None:
                    state.stop = error_stop_info(st, body)
        finally:
            annotate(flow, state)

    def _finish_response(self, flow: http.HTTPFlow, state: FlowState) -> None:
        resp = flow.response
        assert resp is not None
        if state.synthetic:
            return
        if state.handler is not None:
            self._from_handler(state, state.handler)
            self._keep_client_body(flow, state.handler.client_bytes)
            return
        if isinstance(resp.stream, _ErrorOnce):
            state.stop = stop_of_error(Error(kind="interrupted", message="stream translator unavailable", status=502))
            self._keep_client_body(flow, resp.stream.frame if resp.stream.sent else b"")
            return
        content = resp.get_content(strict=False)
        state.upstream_text = _text(content)
        if content is None:
            return
        client, upstream = state.client_protocol, state.upstream_protocol
        status = resp.status_code
        ctype = resp.headers.get("content-type", "").lower()
        if state.replay is not None and resp.headers.get(MISS_HEADER) == "miss":
            self._replay_miss(flow, state, content)
            return
        if state.kind in ("models", "model"):
            self._finish_models(flow, state, content)
            return
        if status >= 400:
            if state.kind != "count_tokens" or status >= 400:
                state.stop = error_stop_info(status, content) if state.kind == "generate" else None
            target = client or Protocol.CHAT
            if state.route is not None and (upstream is not client or not _is_json(content)):
                st, native = translate_error(status, content, upstream or target, target)
                _set_body(resp, st, orjson.dumps(native), "application/json")
            return
        if state.kind != "generate":
            return
        assert client is not None and upstream is not None
        if "text/event-stream" in ctype:
            if state.route is not None and upstream is not client and state.client_stream:
                # a stream that arrived whole (e.g. empty): translated at once, honest ending included
                t = StreamTranslator(upstream, client, state.client_body)
                sse = t.feed(content) + t.close()
                state.stop = t.stop
                state.warnings.extend(t.warnings)
                _set_body(resp, 200, sse, "text/event-stream; charset=utf-8")
                resp.headers["cache-control"] = "no-cache"
                return
            if state.route is not None and (upstream is not client or not state.client_stream):
                res = response_from_stream(content, upstream, client, state.client_body)
                self._take_result(state, res)
                _set_body(resp, res.status, dumps(res.body), "application/json")
            else:
                self._observe_sse(state, content, client)
            return
        try:
            obj = orjson.loads(content)
        except orjson.JSONDecodeError:
            state.warnings.append("upstream answered 2xx with a body that is not JSON")
            if state.route is not None and upstream is not client:
                st, native = native_error(502, "api_error", "upstream answered with a body that is not JSON", client)
                _set_body(resp, st, orjson.dumps(native), "application/json")
                state.stop = error_stop_info(st, native)
            return
        if not isinstance(obj, dict):
            state.warnings.append("upstream answered 2xx with JSON that is not an object")
            if state.route is not None and upstream is not client:
                st, native = native_error(502, "api_error", "upstream answered with JSON that is not an object",
                                          client)
                _set_body(resp, st, orjson.dumps(native), "application/json")
                state.stop = error_stop_info(st, native)
            return
        if upstream is not client:
            if state.client_stream:
                sse, stop, warnings = stream_from_response(obj, upstream, client, state.client_body)
                state.stop = stop
                state.warnings.extend(warnings)
                self._usage_of(state, obj, upstream)
                _set_body(resp, 200, sse, "text/event-stream; charset=utf-8")
                resp.headers["cache-control"] = "no-cache"
            else:
                res = translate_response_result(obj, upstream, client, state.client_body, status=status)
                self._take_result(state, res)
                _set_body(resp, res.status, dumps(res.body), "application/json")
            return
        res = translate_response_result(obj, upstream, upstream)
        self._take_result(state, res)

    @staticmethod
    def _keep_client_body(flow: http.HTTPFlow, data: bytes) -> None:
        """A streamed body is not stored by mitmproxy (unless store_streamed_bodies): keep what the
        client got, so the saved flow shows it. Headers stay as sent (content-encoding included)."""
        if flow.response is not None:
            flow.response.raw_content = data

    @staticmethod
    def _replay_miss(flow: http.HTTPFlow, state: FlowState, content: bytes) -> None:
        """The replay server has no recording: the client's native 404 naming the request."""
        resp = flow.response
        assert resp is not None
        target = state.client_protocol or Protocol.CHAT
        st, native = translate_error(404, content, Protocol.ANTHROPIC, target)
        _set_body(resp, st, orjson.dumps(native), "application/json")
        resp.headers["x-should-retry"] = "false"
        state.stop = error_stop_info(404, content) if state.kind in ("generate", "count_tokens") else None
        if state.replay is not None:
            state.replay["result"] = "miss"
            with contextlib.suppress(Exception):
                state.replay["key"] = orjson.loads(content)["error"]["key"]

    @staticmethod
    def _take_result(state: FlowState, res: Any) -> None:
        state.stop = res.stop
        state.usage = res.usage
        state.warnings.extend(res.warnings)
        if res.model and not state.upstream_model:
            state.upstream_model = res.model

    @staticmethod
    def _usage_of(state: FlowState, obj: dict, protocol: Protocol) -> None:
        try:
            res = translate_response_result(obj, protocol, protocol)
            state.usage = res.usage
            if res.model and not state.upstream_model:
                state.upstream_model = res.model
        except Exception:  # noqa: BLE001 - usage is best effort
            pass

    @staticmethod
    def _observe_sse(state: FlowState, content: bytes, protocol: Protocol) -> None:
        t = StreamTranslator(protocol, protocol, state.client_body)
        t.feed(content)
        t.close()
        state.stop = t.stop
        state.usage = t.usage
        state.warnings.extend(t.warnings)
        if t.model and not state.upstream_model:
            state.upstream_model = t.model

    @staticmethod
    def _from_handler(state: FlowState, handler: StreamHandler, interrupted: str | None = None) -> None:
        handler.finish(interrupted)
        state.upstream_text = _text(handler.upstream_bytes)
        state.upstream_chunks = [list(c) for c in handler.chunk_times]
        t = handler.translator
        state.stop = t.stop
        if state.stop is None and (interrupted or not handler.observe_ok):
            state.stop = stop_of_error(Error(kind="interrupted", message=interrupted or "stream not observed",
                                             status=502))
        state.usage = t.usage
        for w in handler.warnings:
            if w not in state.warnings:
                state.warnings.append(w)
        if t.model and not state.upstream_model:
            state.upstream_model = t.model

    def _finish_models(self, flow: http.HTTPFlow, state: FlowState, content: bytes) -> None:
        resp = flow.response
        assert resp is not None
        anthropic_client = bool(state.extra.get("anthropic_client"))
        client = Protocol.ANTHROPIC if anthropic_client else Protocol.CHAT
        upstream = state.upstream_protocol or Protocol.CHAT
        if resp.status_code >= 400:
            st, native = translate_error(resp.status_code, content, upstream, client)
            _set_body(resp, st, orjson.dumps(native), "application/json")
            return
        try:
            obj = orjson.loads(content)
        except orjson.JSONDecodeError:
            return
        route = next((r for r in self.routes if r.name == state.route), None)
        out = convert_models(obj, state.kind, anthropic_client, route, state.extra.get("model_id"))
        if out is not None:
            _set_body(resp, resp.status_code, orjson.dumps(out), "application/json")

    # ------------------------------------------------------------------------- errors
    def error(self, flow: http.HTTPFlow) -> None:
        self.idle.discard(flow)
        _store_redacted(flow, self)
        if not flow.live:
            self._offline(flow)
            return
        state = get_state(flow)
        if state is None or state.annotated:
            return
        msg = flow.error.msg if flow.error else "flow failed"
        if flow.response is not None and not state.synthetic:
            # the upstream connection broke inside the response (a client disconnect is not a cut)
            state.upstream_cut = "client" not in msg.lower()
        if state.handler is not None:
            self._from_handler(state, state.handler, interrupted=msg)
            self._keep_client_body(flow, state.handler.client_bytes)
        elif state.stop is None:
            state.stop = stop_of_error(Error(kind="interrupted", message=msg, status=502))
            if flow.response is None and _is_connect_error(msg):
                self._dead[(flow.request.host, flow.request.port)] = time.monotonic()
                state.warnings.append(
                    "the client got mitmproxy's own 502 page (a failed connect cannot be answered by an "
                    "addon); retries within 60 s get a native 502"
                )
        annotate(flow, state)

    # ------------------------------------------------------------------------- offline (-nr)
    def _offline(self, flow: http.HTTPFlow) -> None:
        state = get_state(flow)
        if state is not None:
            return
        meta = flow.metadata.get("proxai")
        if isinstance(meta, dict) and "client_protocol" in meta:
            # recorded through the addon: its metadata stays as it is
            stop = meta.get("stop")
            st = FlowState("generate", _proto(meta.get("client_protocol")), _proto(meta.get("upstream_protocol")),
                           meta.get("route"), annotated=True)
            st.client_model = _model_of(meta.get("client_request"))
            st.upstream_model = _model_of(flow.request.get_content(strict=False))
            if isinstance(stop, dict):
                from proxai_core import StopInfo

                st.stop = StopInfo.from_dict(stop)
            _set_state(flow, st)
            log_line(flow, st)
            return
        req = flow.request
        ep = routing.recognize(req.method, req.path, req.headers)
        if ep is None or ep.kind != "generate" or ep.websocket:
            return
        raw = req.get_content(strict=False) or b""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not routing.looks_like_llm(body):
            return
        proto = ep.protocol
        assert proto is not None
        state = FlowState("generate", proto, proto, None, client_text=_text(raw), client_body=body,
                          client_stream=bool(body.get("stream")),
                          client_model=body.get("model") if isinstance(body.get("model"), str) else None,
                          secrets=self._secrets(req.headers, None))
        _set_state(flow, state)
        try:
            resp = flow.response
            if resp is not None:
                content = resp.get_content(strict=False)
                state.upstream_text = _text(content)
                if content is None:
                    state.warnings.append("response body not stored (streamed without store_streamed_bodies)")
                elif resp.status_code >= 400:
                    state.stop = error_stop_info(resp.status_code, content)
                elif "text/event-stream" in resp.headers.get("content-type", "").lower():
                    self._observe_sse(state, content, proto)
                else:
                    obj = orjson.loads(content)
                    if isinstance(obj, dict):
                        self._take_result(state, translate_response_result(obj, proto, proto))
            if flow.error is not None and (state.stop is None or state.stop.ok):
                state.stop = stop_of_error(Error(kind="interrupted", message=flow.error.msg, status=502))
        except Exception as exc:  # noqa: BLE001 - annotation is best effort offline
            state.warnings.append(f"could not read the response: {type(exc).__name__}: {exc}")
        annotate(flow, state)


class _ErrorOnce:
    """Stream callable used when no translator can be built: one native error frame, then nothing."""

    def __init__(self, frame: bytes) -> None:
        self.frame = frame
        self.sent = False

    def __call__(self, data: bytes) -> Any:
        if self.sent:
            return []
        self.sent = True
        return [self.frame]


def _spawn(coro: Any) -> None:
    """Run a coroutine as a task on the running event loop, or drop it when there is none."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        coro.close()
        return
    task = loop.create_task(coro)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


_TASKS: set[asyncio.Task] = set()


def _store_redacted(flow: Any, addon: ProxAI) -> None:
    """Give ``flow`` a ``get_state`` that returns a redacted copy when ``proxai_redact`` is on (what
    ``-w`` / ``save.file`` / copies store); the live flow and the traffic keep their values."""
    if "get_state" in vars(flow):
        return
    flow.get_state = functools.partial(_redacted_state, flow, addon)


def _redacted_state(flow: Any, addon: ProxAI) -> Any:
    cls = type(flow)
    state = cls.get_state(flow)
    if not addon.redact:
        return state
    try:
        tmp = cls.from_state(copy.deepcopy(state))
        redact_flow(tmp)
        return cls.get_state(tmp)
    except Exception:  # never store an unredacted flow by accident
        logger.exception("proxai: redaction failed; the flow is stored without headers and bodies")
        for part in ("request", "response"):
            if isinstance(state.get(part), dict):
                state[part]["headers"] = ()
                state[part]["content"] = None
        state["metadata"] = {}
        return state


def _model_of(body: Any) -> str | None:
    """The ``model`` of a JSON request body (str or bytes), or None."""
    if not body:
        return None
    try:
        obj = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError):
        return None
    model = obj.get("model") if isinstance(obj, dict) else None
    return model if isinstance(model, str) else None


def _proto(v: Any) -> Protocol | None:
    try:
        return Protocol(v) if v else None
    except ValueError:
        return None


def _is_json(content: bytes) -> bool:
    try:
        orjson.loads(content)
        return True
    except orjson.JSONDecodeError:
        return False


def _is_connect_error(msg: str) -> bool:
    m = msg.lower()
    return any(s in m for s in ("connect", "errno", "resolve", "getaddrinfo", "name or service", "unreachable"))


def estimate_tokens(body: Any) -> int:
    """About 4 characters per token over every string value except the model name."""
    total = 0
    stack = [v for k, v in body.items() if k != "model"] if isinstance(body, dict) else [body]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return max(1, (total + 3) // 4)


def convert_models(obj: Any, kind: str, anthropic_client: bool, route: Route | None,
                   requested: str | None) -> dict | None:
    """A model list (or one model) from the upstream's format into the client's, with the client-side
    names of the route's model map added to the list."""
    if not isinstance(obj, dict):
        return None

    def one(mid: str, src: dict | None = None) -> dict:
        src = src or {}
        if anthropic_client:
            return {"type": "model", "id": mid, "display_name": src.get("display_name") or mid,
                    "created_at": src.get("created_at") or "1970-01-01T00:00:00Z"}
        created = src.get("created")
        return {"id": mid, "object": "model", "created": created if isinstance(created, int) else 0,
                "owned_by": src.get("owned_by") or "proxai"}

    if kind == "model":
        return one(requested or str(obj.get("id", "")), obj)
    data = obj.get("data")
    if not isinstance(data, list):
        return None
    items: list[dict] = []
    seen: set[str] = set()
    for name in (route.models.client_names() if route else []):
        if name not in seen:
            seen.add(name)
            items.append(one(name))
    for m in data:
        if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"] not in seen:
            seen.add(m["id"])
            items.append(one(m["id"], m))
    if anthropic_client:
        return {"data": items, "has_more": False, "first_id": items[0]["id"] if items else None,
                "last_id": items[-1]["id"] if items else None}
    return {"object": "list", "data": items}
