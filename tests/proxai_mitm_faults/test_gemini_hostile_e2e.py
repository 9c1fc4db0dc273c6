"""Hostile Gemini stream events (issue 21, rows 1 and 2) through a real mitmdump, in front of a
strict loopback Gemini upstream: translated (an OpenAI Chat client, ``proxai_target`` Gemini) and
pass-through (a Gemini client, no target).

- one ~270-byte event whose ``partialArgs`` index is 60,000,000: the flow ends at once, the proxy's
  peak memory (VmHWM) grows by less than 64 MB, the Chat client gets the call without that piece;
- 30,000 ``willContinue`` pieces of 200 characters of one string in one 7 MB event: joined once
  (linear), the peak grows by less than 64 MB;
- 1,100 distinct 100 KB ``jsonPath``s: peak memory grows by less than 64 MB while the 110 MB stream
  runs, and nothing is kept after it (no process-wide cache of paths).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.loopback_server import LoopbackServer
from tests.mitm_harness import Mitmdump

from .echo_upstream import proc_stat

pytestmark = pytest.mark.e2e

MODEL = "gemini-2.5-flash"
STREAM_PATH = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
MB = 1024 * 1024
GROWTH_MB = 64


def _frame(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\r\n\r\n"


def _fc(fc: dict, finish: str | None = None) -> bytes:
    cand: dict = {"content": {"role": "model", "parts": [{"functionCall": fc}]}}
    if finish:
        cand["finishReason"] = finish
    return _frame({"candidates": [cand], "modelVersion": MODEL, "responseId": "resp-hostile"})


def _call(pieces: list[list[dict]]) -> list[bytes]:
    """A call ``f`` whose arguments arrive as these partialArgs lists, one event each, then STOP."""
    out = [_fc({"name": "f", "willContinue": True})]
    out += [_fc({"partialArgs": p, "willContinue": True}) for p in pieces]
    out.append(_fc({}, "STOP") + _frame({"candidates": [], "usageMetadata": {
        "promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8}, "modelVersion": MODEL}))
    return out


PIECE = "0123456789" * 20
N_PIECES = 30_000


def _attack(name: str):
    """The upstream's events for an attack (an iterator: the 110 MB one is made as it is sent)."""
    if name == "warm":
        return iter(_call([[{"jsonPath": "$.city", "stringValue": "Paris"}]]))
    if name == "far":
        return iter(_call([[{"jsonPath": "$.a[60000000]", "stringValue": "x"},
                            {"jsonPath": "$.b", "stringValue": "kept"}]]))
    if name == "pieces":
        one = [{"jsonPath": "$.text", "stringValue": PIECE, "willContinue": True} for _ in range(N_PIECES - 1)]
        one.append({"jsonPath": "$.text", "stringValue": "end"})
        return iter(_call([one]))
    if name == "paths":
        key = "k" * (100 * 1024)
        head, *middle, tail = _call([[{"jsonPath": "$.s", "stringValue": "str"}], []])

        def gen():
            yield head
            yield middle[0]
            for i in range(1100):  # (each path through the string: read, then takes nothing)
                yield _fc({"partialArgs": [{"jsonPath": f"$.s.{i:05d}{key}", "stringValue": "v",
                                            "willContinue": True}], "willContinue": True})
            yield tail
        return gen()
    raise AssertionError(name)


class GeminiUpstream(LoopbackServer):
    """HTTP/1.1 on loopback, as strict as Gemini where it matters here: only ``POST`` to exactly
    ``/v1beta/models/{MODEL}:streamGenerateContent?alt=sse`` with an ``x-goog-api-key`` and a JSON body
    with ``contents``; anything else is Gemini's JSON error. The attack is named by the last user text."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        super().__init__()

    @staticmethod
    def _error(writer: asyncio.StreamWriter, status: int, reason: str, message: str) -> None:
        body = json.dumps({"error": {"code": status, "message": message, "status": reason}}).encode()
        writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json; charset=UTF-8\r\n"
                     f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, *rest = head.decode("latin-1").split("\r\n")
            method, target, _ = line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in rest if ":" in ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method != "POST" or target != STREAM_PATH:
                self._error(writer, 404, "NOT_FOUND", f"no such method: {method} {target}")
                return
            if not headers.get("x-goog-api-key"):
                self._error(writer, 403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.")
                return
            try:
                req = json.loads(body)
                attack = req["contents"][-1]["parts"][-1]["text"]
                events = _attack(attack)
            except (ValueError, KeyError, IndexError, TypeError, AssertionError):
                self._error(writer, 400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
                return
            self.requests.append((target, attack))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for ev in events:
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _post(port: int, path: str, body: dict, headers: dict, timeout: float) -> tuple[int, bytes]:
    """The status and the whole (de-chunked) body; the client keeps only what it reads."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"accept-encoding: identity\r\nconnection: close\r\ncontent-length: {len(raw)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n")
    writer.write(head.encode() + raw)
    await writer.drain()
    try:
        resp = await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()
    top, _, rest = resp.partition(b"\r\n\r\n")
    status = int(top.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" not in top.lower():
        return status, rest
    out, i = bytearray(), 0  # (offsets: slicing the rest at every chunk would copy 110 MB each time)
    while i < len(rest):
        j = rest.index(b"\r\n", i)
        size = int(rest[i:j].split(b";")[0], 16)
        if size == 0:
            break
        out += rest[j + 2:j + 2 + size]
        i = j + 2 + size + 2
    return status, bytes(out)


def _sse_data(body: bytes) -> list[dict]:
    return [json.loads(ln[5:]) for ln in body.split(b"\n") if ln.startswith(b"data:") and ln[5:].strip() != b"[DONE]"]


@pytest.fixture(scope="module")
def upstream():
    up = GeminiUpstream()
    yield up
    up.close()


@pytest.fixture(scope="module", params=["translated", "pass-through"])
def proxy(request, upstream):
    base = f"http://127.0.0.1:{upstream.port}"
    opts = ({"proxai_target": "gemini_generate_content", "proxai_upstream": base + "/v1beta"}
            if request.param == "translated" else {})
    m = Mitmdump(mode=f"reverse:{base}", options=opts, save=False)
    m.start()
    m.kind = request.param  # type: ignore[attr-defined]
    yield m
    m.cleanup()


def _send(m: Mitmdump, attack: str, timeout: float = 120.0) -> tuple[int, bytes, float]:
    if m.kind == "translated":  # type: ignore[attr-defined]
        path, headers = "/v1/chat/completions", {"authorization": "Bearer k-hostile-0123456789"}
        body: dict = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": attack}]}
    else:
        path, headers = STREAM_PATH, {"x-goog-api-key": "k-hostile-0123456789"}
        body = {"contents": [{"role": "user", "parts": [{"text": attack}]}]}
    start = time.monotonic()
    status, data = asyncio.run(_post(m.port, path, body, headers, timeout))
    return status, data, time.monotonic() - start


def _chat_call(data: bytes) -> tuple[str, dict]:
    """The Chat client's one tool call (name, arguments) from its stream."""
    name, args = None, ""
    for ev in _sse_data(data):
        for ch in ev.get("choices") or []:
            for tc in (ch.get("delta") or {}).get("tool_calls") or []:
                fn = tc.get("function") or {}
                name = fn.get("name") or name
                args += fn.get("arguments") or ""
    assert name, data[:500]
    return name, json.loads(args)


def _check(m: Mitmdump, attack: str, data: bytes, expected_args: dict) -> None:
    if m.kind == "translated":  # type: ignore[attr-defined]
        assert _chat_call(data) == ("f", expected_args)
        assert b"tool_calls" in data and b"[DONE]" in data
    else:  # the Gemini client gets the upstream's own events, whole
        assert data == b"".join(_attack(attack))


def _warm(m: Mitmdump) -> float:
    """Ordinary flows first (imports, caches); then the proxy's peak RSS is reset to its RSS (the
    kernel's clear_refs 5), so the peak after an attack is what that attack took. Returns the base."""
    for _ in range(3):
        status, data, _ = _send(m, "warm")
        assert status == 200, data[:300]
        _check(m, "warm", data, {"city": "Paris"})
    pid = m.proc.pid  # type: ignore[union-attr]
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # (not allowed here: the peak since start, a looser bound)
        pass
    return proc_stat(pid)["hwm_mb"]


def test_far_partial_args_index_is_dropped_and_memory_stays_flat(proxy, upstream):
    base = _warm(proxy)
    assert len(list(_attack("far"))[1]) < 300  # (one small event)
    status, data, took = _send(proxy, "far")
    assert status == 200, data[:300]
    _check(proxy, "far", data, {"a": [], "b": "kept"})
    grown = proc_stat(proxy.proc.pid)["hwm_mb"] - base
    print(f"[{proxy.kind}] far index: {took:.2f} s, peak RSS +{grown:.1f} MB")
    assert grown < GROWTH_MB, grown  # (was 87 MB -> 1.1 GB and 10.9 s)
    assert took < 10, took
    assert proxy.proc.poll() is None


def test_30000_pieces_of_one_string_in_one_event(proxy, upstream):
    base = _warm(proxy)
    status, data, took = _send(proxy, "pieces")
    assert status == 200, data[:300]
    _check(proxy, "pieces", data, {"text": PIECE * (N_PIECES - 1) + "end"})
    grown = proc_stat(proxy.proc.pid)["hwm_mb"] - base
    print(f"[{proxy.kind}] 30,000 pieces ({len(PIECE)} chars): {took:.2f} s, peak RSS +{grown:.1f} MB")
    assert grown < GROWTH_MB, grown
    assert took < 8, took  # (joined by prev + value: 15 s here; once: about 1 s)


def test_1100_distinct_100kb_paths_keep_nothing(proxy, upstream):
    base = _warm(proxy)
    rss0 = proc_stat(proxy.proc.pid)["rss_mb"]
    status, data, took = _send(proxy, "paths", timeout=300)
    assert status == 200, data[:300]
    if proxy.kind == "translated":
        _check(proxy, "paths", data, {"s": "str"})
    else:
        assert len(data) > 1100 * 100 * 1024 and data.endswith(b"\r\n\r\n")
    del data
    _warm(proxy)
    stat = proc_stat(proxy.proc.pid)
    grown, kept = stat["hwm_mb"] - base, stat["rss_mb"] - rss0
    print(f"[{proxy.kind}] 1,100 x 100 KB paths: {took:.2f} s, peak RSS +{grown:.1f} MB, after +{kept:.1f} MB")
    assert grown < GROWTH_MB, grown  # (the old cache kept 483 MB after the flow)
    assert kept < GROWTH_MB, kept
