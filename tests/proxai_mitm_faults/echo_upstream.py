"""An echo upstream and a minimal asyncio HTTP/1.1 client, for fault, load and end-to-end
performance runs through mitmdump (loopback only).

``EchoUpstream`` (a ``FakeUpstream``): a request whose body contains ``ECHO[<token>]`` is answered
in the protocol its path names (exactly ``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``), streamed or
complete as the request asks, with the text :func:`echo_text` (the token repeated in every delta),
so a client can check it got exactly its own answer. It records, per token, the monotonic time
(``time.monotonic``, the host's CLOCK_MONOTONIC, comparable across processes) at which it wrote the
response head, the first body byte, and the last byte. Replies registered with ``on()`` still win.
Knobs: ``n_deltas``, ``delay`` (between events), ``first_delay`` (head → first event),
``head_delay`` (request → response head: slow headers), ``stall_after`` (stop writing after this
many events and hold the connection open for ``stall_for`` seconds: a dead stream).

``http_request`` is a bare HTTP/1.1 client (asyncio streams, chunked or content-length bodies)
that also reports when the first body byte arrived.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fake_upstream import (
    FakeUpstream,
    _anth_json,
    _anth_sse,
    _chat_json,
    _chat_sse,
    _enc_event,
    _resp_envelope,
    _resp_sse,
    _resp_text_events,
    _resp_usage,
    query_error,
)

__all__ = ["EchoUpstream", "HTTPResult", "echo_text", "http_request", "request_body", "PATHS"]

TOKEN_RX = re.compile(rb"ECHO\[([A-Za-z0-9_-]{1,64})\]")
PATHS = {"openai_chat_completions": "/v1/chat/completions", "openai_responses": "/v1/responses",
         "anthropic_messages": "/v1/messages"}


def echo_text_pieces(token: str, n: int) -> list[str]:
    return [f"Echo {token}:"] + [f" w{i}-{token}" for i in range(1, n)]


def echo_text(token: str, n: int) -> str:
    return "".join(echo_text_pieces(token, n))


def _proto_of(path: str) -> str | None:
    """The protocol of a real provider path (exactly: a path no provider serves echoes nothing)."""
    p = path.partition("?")[0]
    for proto, real in PATHS.items():
        if p == real:
            return proto
    return None


def _resp_usage_full() -> dict:
    u = _resp_usage()
    u["input_tokens_details"] = {"cached_tokens": 0, "cache_write_tokens": 0}  # current SDK types require it
    return u


def _fix_resp_usage(obj: Any) -> Any:
    if isinstance(obj, (list, tuple)) and len(obj) == 2 and isinstance(obj[1], dict):
        _fix_resp_usage(obj[1])
    elif isinstance(obj, dict):
        r = obj.get("response", obj)
        if isinstance(r, dict) and isinstance(r.get("usage"), dict):
            r["usage"] = _resp_usage_full()
    return obj


def build_reply(proto: str, token: str, n: int, stream: bool) -> tuple[list[bytes] | bytes, str]:
    pieces = echo_text_pieces(token, n)
    text = "".join(pieces)
    if proto == "openai_chat_completions":
        if stream:
            return [_enc_event(e) for e in _chat_sse([{"content": p} for p in pieces], "stop")], "text/event-stream"
        return json.dumps(_chat_json({"content": text}, "stop")).encode(), "application/json"
    if proto == "openai_responses":
        item_id = f"msg_{token}"
        item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}
        if stream:
            evs = [_fix_resp_usage(e) for e in _resp_sse([item], [_resp_text_events(item_id, pieces)])]
            return [_enc_event(e) for e in evs], "text/event-stream"
        return json.dumps(_resp_envelope("completed", [item], _resp_usage_full())).encode(), "application/json"
    if stream:
        evs = _anth_sse([({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])],
                        "end_turn")
        return [_enc_event(e) for e in evs], "text/event-stream"
    return json.dumps(_anth_json([{"type": "text", "text": text}], "end_turn")).encode(), "application/json"


@dataclass
class Stamps:
    head: float = 0.0
    first: float = 0.0
    done: float = 0.0
    events: int = 0


class EchoUpstream(FakeUpstream):
    def __init__(self, *, n_deltas: int = 8, delay: float = 0.0, first_delay: float = 0.0, head_delay: float = 0.0,
                 stall_after: int | None = None, stall_for: float = 0.0, keep_requests: bool = True,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.n_deltas = n_deltas
        self.delay = delay
        self.first_delay = first_delay
        self.head_delay = head_delay
        self.stall_after = stall_after
        self.stall_for = stall_for
        self.keep_requests = keep_requests
        self.stamps: dict[str, Stamps] = {}
        self.sent: dict[str, bytes] = {}  # token -> every body byte written (before chunk framing)
        self.count = 0

    async def _respond(self, rec: Any, writer: asyncio.StreamWriter) -> bool:
        path = rec.path.partition("?")[0]
        m = TOKEN_RX.search(rec.body or b"")
        proto = _proto_of(path)
        if (path.startswith("/__fake/") or self._rules or m is None or proto is None
                or query_error(path, rec.path.partition("?")[2]) is not None):
            return await super()._respond(rec, writer)
        if self.keep_requests:
            self.requests.append(rec)
        self.count += 1
        token = m.group(1).decode()
        try:
            req = json.loads(rec.body)
        except ValueError:
            req = {}
        stream = isinstance(req, dict) and req.get("stream") is True
        payload, ctype = build_reply(proto, token, self.n_deltas, stream)
        st = self.stamps[token] = Stamps()
        if self.head_delay:
            await asyncio.sleep(self.head_delay)
        if isinstance(payload, bytes):
            st.head = st.first = time.monotonic()
            self._write_head(writer, 200, [("content-type", ctype), ("content-length", str(len(payload)))])
            writer.write(payload)
            await writer.drain()
            st.done = time.monotonic()
            self.sent[token] = payload
            return True
        self._write_head(writer, 200, [("content-type", f"{ctype}; charset=utf-8"), ("cache-control", "no-cache"),
                                       ("transfer-encoding", "chunked")])
        await writer.drain()
        st.head = time.monotonic()
        if self.first_delay:
            await asyncio.sleep(self.first_delay)
        sent: list[bytes] = []
        for i, ev in enumerate(payload):
            if self.stall_after is not None and i >= self.stall_after:
                self.sent[token] = b"".join(sent)
                await asyncio.sleep(self.stall_for)
                return False
            if i and self.delay:
                await asyncio.sleep(self.delay)
            if i == 0:
                st.first = time.monotonic()
            writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            await writer.drain()
            sent.append(ev)
            st.events += 1
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        st.done = time.monotonic()
        self.sent[token] = b"".join(sent)
        return True


def request_body(client: str, token: str, stream: bool, model: str = "echo-model") -> dict:
    prompt = f"Please echo ECHO[{token}] back."
    if client == "openai_chat_completions":
        b: dict = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        return b
    if client == "openai_responses":
        return {"model": model, "input": prompt, "stream": stream}
    return {"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": prompt}], "stream": stream}


@dataclass
class HTTPResult:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    t_sent: float = 0.0
    t_head: float = 0.0
    t_first_body: float = 0.0
    t_done: float = 0.0
    error: str | None = None
    #: (monotonic time, bytes) of each body read, for "events arrive as they come" checks
    reads: list[tuple[float, int]] = field(default_factory=list)


async def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str] | None = None,
                       *, timeout: float = 30.0, method: str = "POST") -> HTTPResult:
    """One HTTP/1.1 request on a fresh connection (``connection: close``)."""
    res = HTTPResult()
    try:
        await asyncio.wait_for(_do(res, host, port, path, body, headers or {}, method), timeout)
    except TimeoutError:
        res.error = f"timeout after {timeout} s"
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def _do(res: HTTPResult, host: str, port: int, path: str, body: bytes, headers: dict[str, str],
              method: str) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    parts: list[bytes] = []
    try:
        hs = {"host": f"{host}:{port}", "content-type": "application/json", "content-length": str(len(body)),
              "connection": "close", **headers}
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hs.items()) + "\r\n"
        res.t_sent = time.monotonic()
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        raw_head = await reader.readuntil(b"\r\n\r\n")
        res.t_head = time.monotonic()
        lines = raw_head.decode("latin-1").split("\r\n")
        res.status = int(lines[0].split(" ", 2)[1])
        for ln in lines[1:]:
            if ln:
                k, _, v = ln.partition(":")
                res.headers[k.strip().lower()] = v.strip()
        if "chunked" in res.headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readline()
                if not size_line:
                    raise asyncio.IncompleteReadError(b"", None)
                size = int(size_line.strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    await reader.readline()
                    break
                chunk = await reader.readexactly(size)
                now = time.monotonic()
                if not res.t_first_body:
                    res.t_first_body = now
                res.reads.append((now, len(chunk)))
                parts.append(chunk)
                await reader.readline()
        elif "content-length" in res.headers:
            n = int(res.headers["content-length"])
            while n > 0:
                chunk = await reader.read(min(n, 65536))
                if not chunk:
                    raise asyncio.IncompleteReadError(b"".join(parts), n)
                now = time.monotonic()
                if not res.t_first_body:
                    res.t_first_body = now
                res.reads.append((now, len(chunk)))
                parts.append(chunk)
                n -= len(chunk)
        else:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                now = time.monotonic()
                if not res.t_first_body:
                    res.t_first_body = now
                res.reads.append((now, len(chunk)))
                parts.append(chunk)
        res.t_done = time.monotonic()
    finally:
        res.body = b"".join(parts)  # what arrived, also when the connection broke
        writer.close()


# ----------------------------------------------------------------------------- a proxy rig
SHORT = {"openai_chat_completions": "chat", "openai_responses": "responses", "anthropic_messages": "anthropic"}
UPSTREAM_KEY_ENV = "PROXAI_ECHO_KEY"
UPSTREAM_KEY = "sk-echo-upstream-key-5f1e2d3c"


def routes_toml(upstream_url: str) -> str:
    """Path-routed: ``/to-<protocol>/v1/...`` is translated to that protocol on the upstream; any
    other path passes through (reverse mode) and is only annotated."""
    out = []
    for p, s in SHORT.items():
        out.append(f'[[routes]]\nname = "to-{s}"\nmatch = {{ path = "/to-{s}/*" }}\n'
                   f'target = {{ protocol = "{p}", base_url = "{upstream_url}", api_key_env = "{UPSTREAM_KEY_ENV}" }}\n')
    return "\n".join(out)


def client_path(client: str, upstream: str | None) -> str:
    """The proxy path for a client of ``client`` translated to ``upstream`` (None: pass-through)."""
    return (f"/to-{SHORT[upstream]}" if upstream and upstream != client else "") + PATHS[client]


def proc_stat(pid: int) -> dict[str, float]:
    """CPU seconds (user+system, children excluded) and RSS / peak RSS (MB) of a process, from /proc."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / tick
    rss = hwm = 0.0
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                rss = int(ln.split()[1]) / 1024
            elif ln.startswith("VmHWM:"):
                hwm = int(ln.split()[1]) / 1024
    return {"cpu": cpu, "rss_mb": rss, "hwm_mb": hwm}


class Rig:
    """EchoUpstream + one mitmdump (reverse mode onto it) with the path routes above."""

    def __init__(self, *, save: bool = False, options: dict | None = None, extra_routes: str = "",
                 env: dict | None = None, verbosity: str = "info", **upstream_kw: Any) -> None:
        import tempfile
        from pathlib import Path

        from tests.mitm_harness import Mitmdump

        self.up = EchoUpstream(**upstream_kw).start()
        self._tmp = tempfile.TemporaryDirectory(prefix="proxai-rig-")
        self.routes = Path(self._tmp.name) / "routes.toml"
        self.routes.write_text(routes_toml(self.up.url) + "\n" + extra_routes.replace("{UP}", self.up.url)
                               .replace("{PORT}", str(self.up.port)))
        opts = {"proxai_config": str(self.routes), **(options or {})}
        self.m = Mitmdump(mode=f"reverse:{self.up.url}", options=opts,
                          env={UPSTREAM_KEY_ENV: UPSTREAM_KEY, **(env or {})}, save=save)
        if verbosity != "info":  # the harness sets info; mitmproxy refuses a second --set of it
            base = self.m.command
            self.m.command = lambda: [a.replace("termlog_verbosity=info", f"termlog_verbosity={verbosity}")
                                      for a in base()]

    def start(self) -> Rig:
        self.m.start()
        return self

    @property
    def port(self) -> int:
        return self.m.port

    @property
    def pid(self) -> int:
        assert self.m.proc is not None
        return self.m.proc.pid

    def close(self) -> None:
        self.m.cleanup()
        self.up.stop()
        self._tmp.cleanup()

    def __enter__(self) -> Rig:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
