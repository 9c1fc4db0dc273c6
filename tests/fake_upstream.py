"""A loopback HTTP/1.1 fake LLM upstream for end-to-end tests (asyncio, one background thread).

It serves recorded-like bodies of the four protocols (OpenAI Chat Completions, OpenAI Responses,
Anthropic Messages, Gemini generateContent: its streams as SSE or one JSON array, as the request's
``alt`` asks): complete JSON, SSE streams with delays between events, streams cut mid-way
(TCP reset, or the HTTP message ended before the SSE terminal), error statuses with JSON / HTML /
empty bodies and extra headers such as ``retry-after``. It records every request it received
(method, path, headers, body, time) so tests can assert what the proxy forwarded.

In-process use::

    up = FakeUpstream().start()
    up.on("/v1/messages", Reply.sse(RECORDED["anthropic_messages"]["text"]["sse"], delay=0.05))
    up.on("/v1/messages", Reply.json(RECORDED["anthropic_messages"]["text"]["json"]), stream=False)
    ... up.requests[-1].headers ... up.stop()

Control API (the same, over HTTP, for a subprocess ``python tests/fake_upstream.py --port N``):
``POST /__fake/on`` ``{"path": ..., "stream": true|false|null, "reply": {...Reply fields...}}``,
``GET /__fake/requests``, ``POST /__fake/reset``.

Replies are chosen by the exact path and by whether the request JSON has ``"stream": true``;
a reply registered with ``stream=None`` serves both. Without a registered reply the defaults serve
the "text" recording of the protocol, only on the exact paths the real providers serve
(``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``, ``/v1beta/models/{m}:generateContent``,
the Vertex AI form, …; ``use_defaults=True``); any other path is a 404, as from a real provider.
A query parameter the real endpoint does not take is that provider's 400 (Google's APIs reject
unknown parameters), whether a reply is registered or not.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["RECORDED", "FakeUpstream", "Recorded", "Reply", "sse_frame"]


# ----------------------------------------------------------------------------- SSE helpers
def sse_frame(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _enc_event(ev: Any) -> bytes:
    if isinstance(ev, bytes):
        return ev
    if isinstance(ev, str):  # a raw data payload such as "[DONE]"
        return sse_frame(ev)
    if isinstance(ev, (list, tuple)) and len(ev) == 2:
        return sse_frame(ev[1], ev[0])
    return sse_frame(ev)


# ----------------------------------------------------------------------------- replies
@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    #: complete body: bytes/str as-is, anything else JSON-encoded
    body: Any = None
    #: SSE events: bytes as-is, (event, data) pairs, data objects or str payloads (``data:`` only)
    events: list[Any] | None = None
    delay: float = 0.0  # between events
    first_delay: float = 0.0  # before the first event (after the headers)
    last_delay: float | None = None  # before the last event instead of ``delay``
    cut_after: int | None = None  # stop after this many events
    cut: str = "reset"  # "reset": abort the TCP connection | "clean": end the HTTP message early
    framing: str = "chunked"  # chunked | close | length (streams)
    encoding: str | None = None  # "gzip" compresses the body / each event (flushed)
    times: int | None = None  # serve this many times, then fall back to the next match
    #: a Gemini stream: SSE (``data:`` lines ended by CRLF CRLF) when the query has ``alt=sse``,
    #: else one JSON array written element by element; ``events`` are the chunk objects
    gemini: bool = False

    @classmethod
    def json(cls, obj: Any, status: int = 200, headers: list[tuple[str, str]] | None = None, **kw: Any) -> Reply:
        return cls(status=status, body=obj, headers=[("content-type", "application/json")] + list(headers or []),
                   **kw)

    @classmethod
    def sse(cls, events: list[Any], **kw: Any) -> Reply:
        headers = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]
        headers += list(kw.pop("headers", []) or [])
        return cls(events=list(events), headers=headers, **kw)

    @classmethod
    def gemini_stream(cls, chunks: list[Any], **kw: Any) -> Reply:
        """Gemini ``:streamGenerateContent``: SSE or a JSON array, as the request's ``alt`` asks."""
        return cls(events=list(chunks), gemini=True, headers=list(kw.pop("headers", []) or []), **kw)

    @classmethod
    def error(cls, status: int, body: Any = b"", content_type: str = "application/json",
              headers: list[tuple[str, str]] | None = None) -> Reply:
        hs = [("content-type", content_type)] if content_type else []
        return cls(status=status, body=body, headers=hs + list(headers or []))

    def to_json(self) -> dict:
        d = asdict(self)
        d["body"] = _jsonable(self.body)
        d["events"] = [_jsonable(e) for e in self.events] if self.events is not None else None
        return d

    @classmethod
    def from_json(cls, d: dict) -> Reply:
        d = dict(d)
        d["headers"] = [tuple(h) for h in d.get("headers") or []]
        return cls(**d)


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, tuple):
        return list(v)
    return v


@dataclass
class Recorded:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    time: float
    #: wall-clock time the last SSE event (or the body) was written, when the reply finished
    done_at: float | None = None

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def to_json(self) -> dict:
        return {"method": self.method, "path": self.path, "headers": [list(h) for h in self.headers],
                "body": self.body.decode("utf-8", "replace"), "time": self.time, "done_at": self.done_at}


# ----------------------------------------------------------------------------- server
class FakeUpstream:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, use_defaults: bool = True) -> None:
        self.host = host
        self.port = port
        self.use_defaults = use_defaults
        self.requests: list[Recorded] = []
        self._rules: list[tuple[str, bool | None, Reply, list[int]]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeUpstream:
        self._thread = threading.Thread(target=self._run, name="fake-upstream", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake upstream did not start")
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(asyncio.start_server(self._handle, self.host, self.port))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def _close() -> None:
            assert self._server is not None
            self._server.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()

        try:
            asyncio.run_coroutine_threadsafe(_close(), loop).result(5)
        except Exception:  # noqa: BLE001
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread:
            self._thread.join(5)
        self._loop = None

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # script --------------------------------------------------------------------------------------
    def on(self, path: str, reply: Reply, *, stream: bool | None = None) -> FakeUpstream:
        """Register a reply (newest first). ``stream``: only for requests with/without stream: true."""
        with self._lock:
            self._rules.insert(0, (path, stream, reply, [0]))
        return self

    def reset(self) -> None:
        with self._lock:
            self._rules.clear()
            self.requests.clear()

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[Recorded]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.requests) >= n:
                return self.requests
            time.sleep(0.01)
        raise AssertionError(f"expected {n} request(s), got {len(self.requests)}")

    def last(self, path: str | None = None) -> Recorded:
        for r in reversed(self.requests):
            if path is None or r.path.partition("?")[0] == path:
                return r
        raise AssertionError(f"no request for {path}")

    def _pick(self, path: str, streaming: bool) -> Reply | None:
        with self._lock:
            for rule_path, rule_stream, reply, count in self._rules:
                if rule_path != path or (rule_stream is not None and rule_stream != streaming):
                    continue
                if reply.times is not None and count[0] >= reply.times:
                    continue
                count[0] += 1
                return reply
        if self.use_defaults:
            return default_reply(path, streaming)
        return None

    # HTTP ------------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: list[tuple[str, str]] = []
                for ln in lines[1:]:
                    if ln:
                        k, _, v = ln.partition(":")
                        headers.append((k.strip(), v.strip()))
                hd = {k.lower(): v for k, v in headers}
                body = b""
                if "content-length" in hd:
                    body = await reader.readexactly(int(hd["content-length"]))
                elif "chunked" in hd.get("transfer-encoding", "").lower():
                    while True:
                        size = int((await reader.readline()).strip().split(b";")[0], 16)
                        if size == 0:
                            await reader.readline()
                            break
                        body += await reader.readexactly(size)
                        await reader.readline()
                rec = Recorded(method, target, headers, body, time.time())
                keep = await self._respond(rec, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass

    async def _respond(self, rec: Recorded, writer: asyncio.StreamWriter) -> bool:
        path = rec.path.partition("?")[0]
        if path.startswith("/__fake/"):
            return await self._control(rec, path, writer)
        self.requests.append(rec)
        try:
            req = json.loads(rec.body) if rec.body else {}
        except ValueError:
            req = {}
        # Gemini keeps the stream flag in the URL
        streaming = (isinstance(req, dict) and req.get("stream") is True) or path.endswith(":streamGenerateContent")
        reply = query_error(path, rec.path.partition("?")[2]) or self._pick(path, streaming)
        if reply is None:
            reply = Reply.json({"error": {"message": f"fake upstream: no reply for {path}", "type": "not_found"}},
                               status=404)
        if reply.events is not None and reply.gemini:
            reply = _gemini_framed(reply, "alt=sse" in rec.path.partition("?")[2])
        if reply.events is not None:
            return await self._send_stream(rec, reply, writer)
        body = reply.body
        if body is None:
            data = b""
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        headers = list(reply.headers)
        if reply.encoding == "gzip":
            data = gzip.compress(data)
            headers.append(("content-encoding", "gzip"))
        self._write_head(writer, reply.status, headers + [("content-length", str(len(data)))])
        writer.write(data)
        await writer.drain()
        rec.done_at = time.time()
        return True

    @staticmethod
    def _write_head(writer: asyncio.StreamWriter, status: int, headers: list[tuple[str, str]]) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
                  500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
                  529: "Overloaded"}.get(status, "Status")
        out = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))

    async def _send_stream(self, rec: Recorded, reply: Reply, writer: asyncio.StreamWriter) -> bool:
        events = [_enc_event(e) for e in reply.events or []]
        headers = list(reply.headers)
        comp = None
        if reply.encoding == "gzip":
            comp = zlib.compressobj(wbits=31)
            headers.append(("content-encoding", "gzip"))

        def enc(b: bytes) -> bytes:
            return b if comp is None else comp.compress(b) + comp.flush(zlib.Z_SYNC_FLUSH)

        framing = reply.framing
        if framing == "length":
            whole = b"".join(events)
            if comp is not None:
                whole = gzip.compress(whole)
            headers.append(("content-length", str(len(whole))))
        elif framing == "close":
            headers.append(("connection", "close"))
        else:
            headers.append(("transfer-encoding", "chunked"))
        self._write_head(writer, reply.status, headers)
        await writer.drain()
        if reply.first_delay:
            await asyncio.sleep(reply.first_delay)
        if framing == "length":
            whole_iter = [whole[i:i + max(1, len(whole) // max(1, len(events)))]
                          for i in range(0, len(whole), max(1, len(whole) // max(1, len(events))))]
            for i, part in enumerate(whole_iter):
                if i:
                    await asyncio.sleep(reply.delay)
                writer.write(part)
                await writer.drain()
            rec.done_at = time.time()
            return True
        n = len(events)
        for i, ev in enumerate(events):
            if reply.cut_after is not None and i >= reply.cut_after:
                rec.done_at = time.time()
                if reply.cut == "reset":
                    writer.transport.abort()
                    return False
                break  # clean: end the HTTP message without the rest
            if i:
                d = reply.last_delay if (reply.last_delay is not None and i == n - 1) else reply.delay
                if d:
                    await asyncio.sleep(d)
            data = enc(ev)
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if framing == "chunked" else data)
            await writer.drain()
        if comp is not None:
            tail = comp.flush()
            if tail:
                writer.write(b"%x\r\n%s\r\n" % (len(tail), tail) if framing == "chunked" else tail)
        rec.done_at = time.time()
        if framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        await writer.drain()
        return False

    async def _control(self, rec: Recorded, path: str, writer: asyncio.StreamWriter) -> bool:
        out: Any = {"ok": True}
        if path == "/__fake/on":
            d = json.loads(rec.body)
            self.on(d["path"], Reply.from_json(d["reply"]), stream=d.get("stream"))
        elif path == "/__fake/reset":
            self.reset()
        elif path == "/__fake/requests":
            out = [r.to_json() for r in self.requests]
        else:
            out = {"ok": False, "error": f"unknown control path {path}"}
        data = json.dumps(out).encode()
        self._write_head(writer, 200, [("content-type", "application/json"), ("content-length", str(len(data)))])
        writer.write(data)
        await writer.drain()
        return True


def _gemini_framed(reply: Reply, sse: bool) -> Reply:
    """A Gemini stream reply in the framing the request asked for (as the real API writes them)."""
    chunks = [c if isinstance(c, (bytes, str)) else json.dumps(c, separators=(",", ":")) for c in reply.events or []]
    chunks = [c.decode() if isinstance(c, bytes) else c for c in chunks]
    if sse:
        events = [f"data: {c}\r\n\r\n".encode() for c in chunks]
        ctype = "text/event-stream"
    else:
        events = [("[" if i == 0 else ",\r\n") .encode() + c.encode() for i, c in enumerate(chunks)]
        events.append(b"]")
        ctype = "application/json; charset=UTF-8"
    d = asdict(reply)
    d.update(events=events, gemini=False, headers=[("content-type", ctype)] + list(reply.headers))
    return Reply(**d)


# ----------------------------------------------------------------------------- recorded-like bodies
# Written after the shapes of real provider responses (ids, usage blocks, event order), small.
CHAT_MODEL = "gpt-4o-2024-08-06"
RESP_MODEL = "gpt-5-2025-08-07"
CLAUDE_MODEL = "claude-sonnet-4-5-20250929"
TOOL_ARGS = '{"city":"Paris","unit":"celsius"}'
REFUSAL = "I'm sorry, but I can't help with that."
TEXT = ["Hello", "! The", " weather", " is", " sunny."]


def _chat_usage(prompt: int = 21, completion: int = 9) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def _chat_json(message: dict, finish: str) -> dict:
    return {"id": "chatcmpl-CfQ1x9kz3Vb2", "object": "chat.completion", "created": 1764700000, "model": CHAT_MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": None,
                                                 "annotations": [], **message},
                         "logprobs": None, "finish_reason": finish}],
            "usage": _chat_usage(), "service_tier": "default", "system_fingerprint": "fp_cbf1785567"}


def _chat_sse(deltas: list[dict], finish: str) -> list[Any]:
    base = {"id": "chatcmpl-CfQ1x9kz3Vb2", "object": "chat.completion.chunk", "created": 1764700000,
            "model": CHAT_MODEL, "service_tier": "default", "system_fingerprint": "fp_cbf1785567"}
    out: list[Any] = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "",
                                                                  "refusal": None},
                                            "logprobs": None, "finish_reason": None}], "usage": None}]
    for d in deltas:
        out.append({**base, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}],
                    "usage": None})
    out.append({**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
                "usage": None})
    out.append({**base, "choices": [], "usage": _chat_usage()})
    out.append("[DONE]")
    return out


def _resp_envelope(status: str, output: list, usage: dict | None) -> dict:
    return {"id": "resp_68f9a1b2c3d4e5f6", "object": "response", "created_at": 1764700000, "status": status,
            "background": False, "error": None, "incomplete_details": None, "instructions": None,
            "max_output_tokens": None, "model": RESP_MODEL, "output": output, "parallel_tool_calls": True,
            "previous_response_id": None, "reasoning": {"effort": "medium", "summary": None},
            "service_tier": "default", "store": True, "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto", "tools": [],
            "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None, "metadata": {}}


def _resp_usage() -> dict:
    return {"input_tokens": 21, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 30}


def _resp_sse(items: list[dict], item_events: list[list[tuple[str, dict]]]) -> list[Any]:
    seq = 0
    out: list[Any] = []

    def ev(name: str, data: dict) -> None:
        nonlocal seq
        out.append((name, {"type": name, "sequence_number": seq, **data}))
        seq += 1

    ev("response.created", {"response": _resp_envelope("in_progress", [], None)})
    ev("response.in_progress", {"response": _resp_envelope("in_progress", [], None)})
    for idx, (item, evs) in enumerate(zip(items, item_events)):
        start = dict(item, status="in_progress")
        if item["type"] == "message":
            start["content"] = []
        elif item["type"] == "function_call":
            start["arguments"] = ""
        ev("response.output_item.added", {"output_index": idx, "item": start})
        for name, data in evs:
            ev(name, {"output_index": idx, **data})
        ev("response.output_item.done", {"output_index": idx, "item": item})
    ev("response.completed", {"response": _resp_envelope("completed", items, _resp_usage())})
    return out


def _resp_text_events(item_id: str, pieces: list[str], kind: str = "output_text") -> list[tuple[str, dict]]:
    evs: list[tuple[str, dict]] = []
    empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []} if kind == "output_text" \
        else {"type": "refusal", "refusal": ""}
    evs.append(("response.content_part.added", {"item_id": item_id, "content_index": 0, "part": empty}))
    full = "".join(pieces)
    if kind == "output_text":
        for p in pieces:
            evs.append(("response.output_text.delta", {"item_id": item_id, "content_index": 0, "delta": p,
                                                       "logprobs": []}))
        evs.append(("response.output_text.done", {"item_id": item_id, "content_index": 0, "text": full,
                                                  "logprobs": []}))
        part = {"type": "output_text", "text": full, "annotations": [], "logprobs": []}
    else:
        for p in pieces:
            evs.append(("response.refusal.delta", {"item_id": item_id, "content_index": 0, "delta": p}))
        evs.append(("response.refusal.done", {"item_id": item_id, "content_index": 0, "refusal": full}))
        part = {"type": "refusal", "refusal": full}
    evs.append(("response.content_part.done", {"item_id": item_id, "content_index": 0, "part": part}))
    return evs


def _anth_usage(out: int = 9) -> dict:
    return {"input_tokens": 21, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": out, "service_tier": "standard"}


def _anth_json(content: list, stop: str, stop_details: dict | None = None) -> dict:
    d = {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "model": CLAUDE_MODEL,
         "content": content, "stop_reason": stop, "stop_sequence": None, "usage": _anth_usage()}
    if stop_details is not None:
        d["stop_details"] = stop_details
    return d


def _anth_sse(blocks: list[tuple[dict, list[dict]]], stop: str, stop_details: dict | None = None) -> list[Any]:
    msg = {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "model": CLAUDE_MODEL,
           "content": [], "stop_reason": None, "stop_sequence": None, "usage": _anth_usage(1)}
    out: list[Any] = [("message_start", {"type": "message_start", "message": msg}),
                      ("ping", {"type": "ping"})]
    for i, (start, deltas) in enumerate(blocks):
        out.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        for d in deltas:
            out.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta: dict = {"stop_reason": stop, "stop_sequence": None}
    if stop_details is not None:
        delta["stop_details"] = stop_details
    out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 9}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


GEMINI_MODEL = "gemini-2.5-flash"


def _gem_chunk(parts: list[dict] | None, finish: str | None = None, out: int = 9) -> dict:
    cand: dict = {"index": 0}
    if parts is not None:
        cand["content"] = {"parts": parts, "role": "model"}
    if finish:
        cand["finishReason"] = finish
    return {"candidates": [cand],
            "usageMetadata": {"promptTokenCount": 21, "candidatesTokenCount": out, "totalTokenCount": 21 + out},
            "modelVersion": GEMINI_MODEL, "responseId": "gem-resp-0Pq7aBc"}


_GEM_CALL = {"functionCall": {"name": "get_weather", "args": json.loads(TOOL_ARGS)}}

_ANTH_REFUSAL_DETAILS = {"type": "refusal", "category": "cyber",
                         "explanation": "This request was blocked by Anthropic's usage policy."}

RECORDED: dict[str, dict[str, dict[str, Any]]] = {
    "openai_chat_completions": {
        "text": {"json": _chat_json({"content": "".join(TEXT)}, "stop"),
                 "sse": _chat_sse([{"content": p} for p in TEXT], "stop")},
        "tool": {"json": _chat_json({"tool_calls": [{"id": "call_Wx3kq8", "type": "function",
                                                     "function": {"name": "get_weather", "arguments": TOOL_ARGS}}]},
                                    "tool_calls"),
                 "sse": _chat_sse([{"tool_calls": [{"index": 0, "id": "call_Wx3kq8", "type": "function",
                                                    "function": {"name": "get_weather", "arguments": ""}}]},
                                   {"tool_calls": [{"index": 0, "function": {"arguments": TOOL_ARGS[:12]}}]},
                                   {"tool_calls": [{"index": 0, "function": {"arguments": TOOL_ARGS[12:]}}]}],
                                  "tool_calls")},
        "refusal": {"json": _chat_json({"refusal": REFUSAL}, "stop"),
                    "sse": _chat_sse([{"refusal": REFUSAL[:10]}, {"refusal": REFUSAL[10:]}], "stop")},
        "max": {"json": _chat_json({"content": "Hello! The wea"}, "length"),
                "sse": _chat_sse([{"content": "Hello! The wea"}], "length")},
    },
    "openai_responses": {
        "text": {"json": _resp_envelope("completed", [
                    {"id": "msg_68f9a1b2aa", "type": "message", "status": "completed", "role": "assistant",
                     "content": [{"type": "output_text", "text": "".join(TEXT), "annotations": [], "logprobs": []}]}],
                    _resp_usage()),
                 "sse": _resp_sse([{"id": "msg_68f9a1b2aa", "type": "message", "status": "completed",
                                    "role": "assistant",
                                    "content": [{"type": "output_text", "text": "".join(TEXT), "annotations": [],
                                                 "logprobs": []}]}],
                                  [_resp_text_events("msg_68f9a1b2aa", TEXT)])},
        "tool": {"json": _resp_envelope("completed", [
                    {"id": "fc_68f9a1b2bb", "type": "function_call", "status": "completed",
                     "call_id": "call_Wx3kq8", "name": "get_weather", "arguments": TOOL_ARGS}], _resp_usage()),
                 "sse": _resp_sse([{"id": "fc_68f9a1b2bb", "type": "function_call", "status": "completed",
                                    "call_id": "call_Wx3kq8", "name": "get_weather", "arguments": TOOL_ARGS}],
                                  [[("response.function_call_arguments.delta",
                                     {"item_id": "fc_68f9a1b2bb", "delta": TOOL_ARGS[:12]}),
                                    ("response.function_call_arguments.delta",
                                     {"item_id": "fc_68f9a1b2bb", "delta": TOOL_ARGS[12:]}),
                                    ("response.function_call_arguments.done",
                                     {"item_id": "fc_68f9a1b2bb", "arguments": TOOL_ARGS})]])},
        "refusal": {"json": _resp_envelope("completed", [
                        {"id": "msg_68f9a1b2cc", "type": "message", "status": "completed", "role": "assistant",
                         "content": [{"type": "refusal", "refusal": REFUSAL}]}], _resp_usage()),
                    "sse": _resp_sse([{"id": "msg_68f9a1b2cc", "type": "message", "status": "completed",
                                       "role": "assistant", "content": [{"type": "refusal", "refusal": REFUSAL}]}],
                                     [_resp_text_events("msg_68f9a1b2cc", [REFUSAL[:10], REFUSAL[10:]],
                                                        "refusal")])},
    },
    "anthropic_messages": {
        "text": {"json": _anth_json([{"type": "text", "text": "".join(TEXT)}], "end_turn"),
                 "sse": _anth_sse([({"type": "text", "text": ""},
                                    [{"type": "text_delta", "text": p} for p in TEXT])], "end_turn")},
        "tool": {"json": _anth_json([{"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9",
                                      "name": "get_weather", "input": json.loads(TOOL_ARGS)}], "tool_use"),
                 "sse": _anth_sse([({"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9",
                                     "name": "get_weather", "input": {}},
                                    [{"type": "input_json_delta", "partial_json": TOOL_ARGS[:12]},
                                     {"type": "input_json_delta", "partial_json": TOOL_ARGS[12:]}])], "tool_use")},
        "refusal": {"json": _anth_json([], "refusal", _ANTH_REFUSAL_DETAILS),
                    "sse": _anth_sse([], "refusal", _ANTH_REFUSAL_DETAILS)},
        "max": {"json": _anth_json([{"type": "text", "text": "Hello! The wea"}], "max_tokens"),
                "sse": _anth_sse([({"type": "text", "text": ""}, [{"type": "text_delta", "text": "Hello! The wea"}])],
                                 "max_tokens")},
    },
}

RECORDED["gemini_generate_content"] = {
    "text": {"json": _gem_chunk([{"text": "".join(TEXT)}], "STOP"),
             "sse": [_gem_chunk([{"text": p}], out=i + 1) for i, p in enumerate(TEXT[:-1])]
             + [_gem_chunk([{"text": TEXT[-1]}], "STOP")]},
    "tool": {"json": _gem_chunk([_GEM_CALL], "STOP"), "sse": [_gem_chunk([_GEM_CALL], "STOP")]},
    "max": {"json": _gem_chunk([{"text": "Hello! The wea"}], "MAX_TOKENS"),
            "sse": [_gem_chunk([{"text": "Hello! The wea"}], "MAX_TOKENS")]},
}

#: the generation, token-counting and model paths the real providers serve (OpenAI, Anthropic,
#: the Gemini API in both versions, Vertex AI): the defaults answer these and nothing else, so a
#: request the proxy sent to a path no provider serves gets the provider's 404
_GEMINI_METHOD = r":(?:generateContent|streamGenerateContent|countTokens)"
_REAL_PATHS: tuple[tuple[re.Pattern[str], str | None], ...] = tuple((re.compile(rx), proto) for rx, proto in (
    (r"/v1/chat/completions", "openai_chat_completions"),
    (r"/v1/responses", "openai_responses"),
    (r"/v1/responses/input_tokens", None),
    (r"/v1/messages", "anthropic_messages"),
    (r"/v1/messages/count_tokens", None),
    (r"/v1(?:beta)?/models/[^/:]+" + _GEMINI_METHOD, "gemini_generate_content"),
    # Vertex AI: a project and location, or express mode (an API key, no project)
    (r"/v1(?:beta1)?(?:/projects/[^/]+/locations/[^/]+)?/publishers/google/models/[^/:]+" + _GEMINI_METHOD,
     "gemini_generate_content"),
    (r"/v1(?:beta)?/models", None),
    (r"/v1(?:beta)?/models/[^/:]+", None),
))

#: the query parameters each real endpoint accepts (Google's APIs reject any other with a 400;
#: OpenAI's generation endpoints take none; Anthropic's Messages takes ``beta``)
_QUERY_ALLOWED = (("/chat/completions", frozenset()), ("/responses", frozenset()),
                  ("/messages", frozenset({"beta"})), ("/count_tokens", frozenset({"beta"})),
                  (":generateContent", frozenset({"alt", "key", "$alt"})),
                  (":streamGenerateContent", frozenset({"alt", "key", "$alt"})),
                  (":countTokens", frozenset({"alt", "key", "$alt"})))


def real_path(path: str) -> tuple[bool, str | None]:
    """(whether a real provider serves ``path``, the protocol of its default reply or None)."""
    for rx, proto in _REAL_PATHS:
        if rx.fullmatch(path):
            return True, proto
    return False, None


def query_error(path: str, query: str) -> Reply | None:
    """The real provider's 400 for a query parameter its endpoint does not take, else None."""
    if not query:
        return None
    rule = next(((suffix, allowed) for suffix, allowed in _QUERY_ALLOWED if path.endswith(suffix)), None)
    if rule is None:
        return None
    suffix, allowed = rule
    bad = sorted({k for k, _ in parse_qsl(query, keep_blank_values=True)} - allowed)
    if not bad:
        return None
    msg = f"fake upstream: unknown query parameter(s) {', '.join(bad)} for {path}"
    if suffix.startswith(":"):
        return Reply.json({"error": {"code": 400, "message": msg, "status": "INVALID_ARGUMENT"}}, status=400)
    return Reply.json({"error": {"message": msg, "type": "invalid_request_error"}}, status=400)


def default_reply(path: str, streaming: bool, scenario: str = "text") -> Reply | None:
    served, proto = real_path(path)
    if not served:
        return None
    if proto is not None:
        rec = RECORDED[proto][scenario]
        if proto == "gemini_generate_content":
            if path.endswith(":countTokens"):
                return Reply.json({"totalTokens": 21})
            return Reply.gemini_stream(rec["sse"]) if streaming else Reply.json(rec["json"])
        return Reply.sse(rec["sse"]) if streaming else Reply.json(rec["json"])
    if path.endswith("/models"):
        return Reply.json({"object": "list", "data": [{"id": CHAT_MODEL, "object": "model", "created": 1,
                                                       "owned_by": "system"}]})
    return None


def main() -> None:  # pragma: no cover - manual use
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=18001)
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    up = FakeUpstream(a.host, a.port).start()
    print(f"fake upstream listening at {up.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        up.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
