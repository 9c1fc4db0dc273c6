"""Flows, bodies and stream feeding shared by the addon tests (taddons / tflow, no network)."""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import http
from mitmproxy.test import tflow, tutils

from tests.fake_upstream import RECORDED, _enc_event

CHAT, RESP, ANTH = "openai_chat_completions", "openai_responses", "anthropic_messages"
PATHS = {CHAT: "/v1/chat/completions", RESP: "/v1/responses", ANTH: "/v1/messages"}
BODIES = {
    CHAT: {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    RESP: {"model": "gpt-5", "input": "hi"},
    ANTH: {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
}


def sse_bytes(proto: str, scenario: str = "text") -> bytes:
    return b"".join(_enc_event(e) for e in RECORDED[proto][scenario]["sse"])


def json_bytes(proto: str, scenario: str = "text") -> bytes:
    return json.dumps(RECORDED[proto][scenario]["json"]).encode()


def make_flow(proto: str, *, stream: bool = False, host: str = "api.example.com", port: int = 443,
              headers: list[tuple[str, str]] | None = None, body: Any = None, path: str | None = None,
              method: str = "POST", http_version: str = "HTTP/1.1") -> http.HTTPFlow:
    b = dict(BODIES[proto]) if body is None else body
    if isinstance(b, dict) and stream:
        b["stream"] = True
    content = b if isinstance(b, bytes) else json.dumps(b).encode()
    hs = [("content-type", "application/json"), ("authorization", "Bearer sk-client-secret-123")]
    hs += headers or []
    req = tutils.treq(method=method.encode(), scheme=b"https", host=host, port=port,
                      path=(path or PATHS[proto]).encode(), content=content, http_version=http_version.encode(),
                      headers=http.Headers([(k.encode(), v.encode()) for k, v in hs]))
    return tflow.tflow(req=req)


def respond(f: http.HTTPFlow, status: int, content: bytes | None, ctype: str,
            extra: list[tuple[str, str]] | None = None) -> None:
    hs = [("content-type", ctype)] + (extra or [])
    if content is not None:
        hs.append(("content-length", str(len(content))))
    f.response = tutils.tresp(status_code=status, headers=http.Headers([(k.encode(), v.encode()) for k, v in hs]),
                              content=content)


def feed(f: http.HTTPFlow, data: bytes, step: int = 7) -> bytes:
    out: list[bytes] = []
    for i in range(0, len(data), step):
        r = f.response.stream(data[i:i + step])
        assert r != b"", "never b'' mid-stream"
        out += [r] if isinstance(r, bytes) else list(r)
    r = f.response.stream(b"")
    out += [r] if isinstance(r, bytes) else list(r)
    return b"".join(out)


def run(tctx: Any, res: Any) -> None:
    if res is not None and hasattr(res, "__await__"):
        tctx.master.event_loop.run_until_complete(res)


# ----------------------------------------------------------------------------- options


def compress(data: bytes, encoding: str) -> bytes:
    """``data`` in one of the four content-encodings."""
    import gzip
    import zlib

    import brotli
    from backports import zstd  # mitmproxy's own dependency on 3.12

    if encoding == "gzip":
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        return brotli.compress(data)
    return zstd.compress(data)


def bomb(encoding: str, size: int = 64 * 1024 * 1024) -> bytes:
    """A small body that inflates to ``size`` bytes (a JSON-looking prefix, then spaces)."""
    return compress(b'{"model": "m", "messages": [' + b" " * size, encoding)


ENCODINGS = ("gzip", "deflate", "br", "zstd")


def stream_exchange(upstream: Any, client: Any) -> Any:
    """A streamed exchange of a ``client`` request answered by an ``upstream`` SSE stream (what the
    translation addon hands to a StreamHandler)."""
    from proxai_core import Exchange

    ex = Exchange(client, None, stream=True)
    ex.respond(upstream, 200, "text/event-stream")
    return ex
