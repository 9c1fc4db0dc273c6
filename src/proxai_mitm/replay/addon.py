"""Replay: answer upstream LLM requests from recordings (option ``proxai_replay``).

``configure`` loads the :class:`~.replay.RecordingIndex`; ``running`` starts the loopback
:class:`~.replay_server.ReplayServer` (or the first request that needs it does); ``request`` (after the
router) points the upstream request at it, or leaves a miss for the real upstream
(``proxai_replay_miss=forward``); ``responseheaders`` notes hit / miss; ``response`` turns a miss into
the client's native 404; ``done`` stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
from mitmproxy import ctx, http

from proxai_core import Plan, error_stop_info, translate_error

from ..config.options import check_deferred, lazy_connections, options_error
from ..flow.record import read_body
from ..flow.replies import set_body
from ..flow.state import flow_state
from ..wire import routing
from ..wire.protocols import DEFAULT_PROTOCOL, miss_protocol
from .index import MISS_HEADER, RecordingIndex, canonical_key
from .server import ReplayServer

logger = logging.getLogger(__name__)

__all__ = ["REPLAY_MISS", "Replayer"]

REPLAY_MISS = ("error", "forward")
_TASKS: set[asyncio.Task] = set()


class Replayer:
    """Serves recorded upstream answers (see the module docstring)."""

    def __init__(self) -> None:
        self.index: RecordingIndex | None = None
        self._hooks(False)
        self.source = ""
        self.fast = False
        self.miss = "error"
        self.server: ReplayServer | None = None
        self._lock: asyncio.Lock | None = None

    def replay_only(self) -> bool:
        """Replay answers every upstream request (no key is needed: nothing leaves the machine)."""
        return self.index is not None and self.miss == "error"

    def active(self) -> bool:
        return self.index is not None

    # ------------------------------------------------------------------------- options
    def load(self, loader: Any) -> None:
        loader.add_option(
            "proxai_replay", str, "",
            "Answer upstream LLM requests from recordings: a .mitm file or a folder of them. Requests "
            "are matched on the upstream request (after translation) and the answers translated live "
            "for the client. Use with connection_strategy=lazy (set automatically).",
        )
        loader.add_option("proxai_replay_fast", bool, False,
                          "Replay streams as fast as possible instead of with the recorded pacing.")
        loader.add_option(
            "proxai_replay_miss", str, "error",
            "What a request without a recording gets in replay: 'error' (a 404 in the client's "
            "protocol naming the request) or 'forward' (sent to the real upstream).",
            choices=REPLAY_MISS,
        )
        check_deferred(bools=("proxai_replay_fast",))

    def configure(self, updated: set[str]) -> None:
        if not updated & {"proxai_replay", "proxai_replay_fast", "proxai_replay_miss"}:
            return
        opts = ctx.options
        miss = str(opts.proxai_replay_miss).strip().lower()
        if miss not in REPLAY_MISS:
            raise options_error(f"proxai_replay_miss: must be one of {', '.join(REPLAY_MISS)}, "
                                f"got {opts.proxai_replay_miss!r}")
        self.miss = miss
        self.fast = bool(opts.proxai_replay_fast)
        if self.server is not None:
            self.server.fast = self.fast
        if "proxai_replay" not in updated:
            return
        path = str(opts.proxai_replay).strip()
        index = None
        if path:
            try:
                index = RecordingIndex.load(path)
            except (FileNotFoundError, ValueError, OSError) as e:
                raise options_error(f"proxai_replay: {str(e).removeprefix('proxai replay: ')}") from None
            if len(index) == 0 and index.damaged:  # nothing readable at all: not a recording
                raise options_error(f"proxai_replay: {index.damaged[0]}")
        self._set_index(index, path)
        if index is not None:
            lazy_connections("replay answers from a loopback server")

    def _hooks(self, on: bool) -> None:
        """Flow hooks only while replaying: mitmproxy skips a hook that is None, so flows pay no
        dispatch for an addon that has nothing to do."""
        for name in ("request", "responseheaders", "response"):
            if on:
                self.__dict__.pop(name, None)
            else:
                setattr(self, name, None)

    def _set_index(self, index: RecordingIndex | None, source: str) -> None:
        self.index = index
        self._hooks(index is not None)
        self.source = source if index is not None else ""
        if index is None:
            if self.server is not None:
                server, self.server = self.server, None
                server.close()
                logger.info("proxai: replay off")
            return
        logger.info("proxai: replay %d recording(s) from %s (%s; misses: %s)", len(index), source,
                    "fast" if self.fast else "recorded pacing", self.miss)
        if len(index) == 0:
            logger.warning("proxai: %s holds no replayable flow (flows without a response are skipped)", source)
        if self.server is not None:
            self.server.index = index  # swapped in place; the server keeps its port

    # ------------------------------------------------------------------------- lifecycle
    # `running` and `done` are synchronous: mitmproxy calls them synchronously when a script is
    # (re)loaded or removed. The server starts in a task (or at the first request that needs it).
    def running(self) -> None:
        if self.index is not None and self.server is None:
            with contextlib.suppress(RuntimeError):  # no running loop: the first request starts it
                task = asyncio.get_running_loop().create_task(self._ensure_server())
                _TASKS.add(task)
                task.add_done_callback(_TASKS.discard)

    def done(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.close()

    async def _ensure_server(self) -> ReplayServer | None:
        if self.index is None:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.server is None:
                server = ReplayServer(self.index, fast=self.fast)
                await server.start()
                self.server = server
            return self.server

    # ------------------------------------------------------------------------- hooks
    def request(self, flow: http.HTTPFlow) -> Any:
        if self.index is None or not flow.live or flow.response or flow.error:
            return None
        state = flow_state(flow)
        ep = state.endpoint if state is not None else routing.recognize(
            flow.request.method, flow.request.path, flow.request.headers)
        if ep is None or ep.websocket or (ep.kind == "generate" and state is None):
            return None
        req = flow.request
        if self.miss == "forward":
            body = read_body(req) or b""
            if self.index.find(req.method, req.path, body) is None:
                key = canonical_key(req.method, req.path, body)
                logger.info("proxai replay: no recording matches %s; forwarded upstream", key)
                if state is not None:
                    state.replay = {"result": "forwarded", "key": key}
                return None
        if self.server is None or not self.server.running:
            return self._start_then_redirect(flow)
        self._redirect(flow, self.server)
        return None

    async def _start_then_redirect(self, flow: http.HTTPFlow) -> None:
        server = await self._ensure_server()
        if server is not None:
            self._redirect(flow, server)

    @staticmethod
    def _redirect(flow: http.HTTPFlow, server: ReplayServer) -> None:
        req = flow.request
        state = flow_state(flow)
        upstream_url = req.pretty_url
        host_header = req.host_header
        req.url = f"http://127.0.0.1:{server.port}{req.path}"
        if host_header:
            req.host_header = host_header  # the recording shows the host the request was meant for
        if state is not None:
            state.replay = {"result": "sent", "upstream_url": upstream_url}

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        state = flow_state(flow)
        resp = flow.response
        if state is None or state.replay is None or resp is None or MISS_HEADER not in resp.headers:
            return
        state.replay["result"] = resp.headers[MISS_HEADER]
        if resp.headers.get("x-proxai-replay-flow"):
            state.replay["flow"] = resp.headers["x-proxai-replay-flow"]

    def response(self, flow: http.HTTPFlow) -> None:
        """A miss (no recording): the client's native 404 naming the request."""
        state = flow_state(flow)
        resp = flow.response
        if state is None or state.replay is None or resp is None or state.synthetic \
                or resp.headers.get(MISS_HEADER) != "miss":
            return
        content = read_body(resp) or b""
        state.upstream_text = content.decode("utf-8", "replace")
        st, native = translate_error(404, content, miss_protocol(flow.request.path),
                                     state.client_protocol or DEFAULT_PROTOCOL)
        set_body(resp, st, orjson.dumps(native), "application/json")
        resp.headers["x-should-retry"] = "false"
        state.stop = error_stop_info(404, content) if state.kind in ("generate", "count_tokens") else None
        state.translation = Plan.ERROR
        state.synthetic = True  # nothing more to translate
        state.replay["result"] = "miss"
        with contextlib.suppress(Exception):
            state.replay["key"] = orjson.loads(content)["error"]["key"]
