"""An upstream that streams without end, clients reading: the proxy's memory stays flat.

LONG TEST (about 75 s): a translated stream (Chat client, Anthropic upstream) and a pass-through
stream (Anthropic client and upstream) run together for 60 s (55 s) through one mitmdump recording with
``-w``; every upstream event is 2 KB of text, sent as fast as the proxy takes it. The proxy's RSS
may grow by less than 64 MB (the recording keeps the head of each stream up to
``proxai_record_limit`` plus a truncation note), and the recorded flows say they were truncated.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest

from proxai_mitm.flow.record import FlowRecord
from tests.loopback_server import LoopbackServer
from tests.mitm_harness import Mitmdump

from .echo_upstream import proc_stat

pytestmark = pytest.mark.e2e

DURATION = float(os.environ.get("PROXAI_ENDLESS_SECONDS", "60"))
TEXT = "endless " * 256  # 2 KB per delta


def _event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


HEAD = (_event("message_start", {"type": "message_start", "message": {
    "id": "msg_endless", "type": "message", "role": "assistant", "model": "endless-model", "content": [],
    "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}})
        + _event("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}}))
DELTA = _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                       "delta": {"type": "text_delta", "text": TEXT}})
TAIL = (_event("content_block_stop", {"type": "content_block_stop", "index": 0})
        + _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                   "usage": {"output_tokens": 7}})
        + _event("message_stop", {"type": "message_stop"}))


class EndlessUpstream(LoopbackServer):
    """HTTP/1.1 on loopback: every ``POST /v1/messages`` gets an Anthropic event stream that never
    ends (or ``x-finite: N`` events then the terminal ones); any other path is a 404."""

    def __init__(self) -> None:
        self.sent = 0
        super().__init__()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (ln.decode().partition(":") for ln in head.split(b"\r\n")[1:] if b":" in ln)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            target = head.split(b" ", 2)[1].partition(b"?")[0]
            if target != b"/v1/messages":  # Anthropic serves its Messages stream there only
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2"
                             b"\r\n\r\n{}")
                await writer.drain()
                return
            finite = int(headers.get("x-finite", "0") or 0)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%s\r\n" % (len(HEAD), HEAD))
            batch = DELTA * 16
            n = 0
            while not finite or n < finite:
                writer.write(b"%x\r\n%s\r\n" % (len(batch), batch))
                self.sent += len(batch)
                n += 16
                await writer.drain()
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(TAIL), TAIL))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _read_stream(port: int, path: str, body: dict, headers: dict, seconds: float) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n" \
           f"content-length: {len(raw)}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    writer.write(head.encode() + raw)
    await writer.drain()
    total, first = 0, b""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                data = await asyncio.wait_for(reader.read(256 * 1024), timeout=max(0.1, end - time.monotonic()))
            except TimeoutError:
                break
            if not data:
                break
            total += len(data)
            if len(first) < 4096:
                first += data[:4096]
    finally:
        writer.close()
    return total, first


CHAT_BODY = {"model": "endless-model", "stream": True, "messages": [{"role": "user", "content": "go"}]}
ANTH_BODY = {"model": "endless-model", "stream": True, "max_tokens": 100000,
             "messages": [{"role": "user", "content": "go"}]}


def test_endless_streams_for_60s_keep_memory_flat():
    up = EndlessUpstream()
    m = Mitmdump(mode=f"reverse:http://127.0.0.1:{up.port}", options={"proxai_target": "anthropic_messages"})
    try:
        m.start()
        pid = m.proc.pid

        async def warm() -> None:  # imports, caches and one recording of each kind
            await asyncio.gather(
                _read_stream(m.port, "/v1/chat/completions", CHAT_BODY, {"x-finite": "64", "x-api-key": "k-1"}, 10),
                _read_stream(m.port, "/v1/messages", ANTH_BODY, {"x-finite": "64", "x-api-key": "k-1"}, 10))

        asyncio.run(warm())
        time.sleep(0.5)
        base = proc_stat(pid)["rss_mb"]
        samples: list[float] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(2.0):
                samples.append(proc_stat(pid)["rss_mb"])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        async def run() -> list[tuple[int, bytes]]:
            return await asyncio.gather(
                _read_stream(m.port, "/v1/chat/completions", CHAT_BODY, {"authorization": "Bearer k-1"}, DURATION),
                # ends 5 s earlier: one flow is finalized (annotated, recorded) at a time
                _read_stream(m.port, "/v1/messages", ANTH_BODY, {"x-api-key": "k-1"}, DURATION - 5))

        (chat_total, chat_first), (anth_total, anth_first) = asyncio.run(run())
        time.sleep(3.0)  # the flows end (client disconnect), are annotated and written
        stop.set()
        sampler.join(5)
        after = proc_stat(pid)
        grown = max(samples + [after["rss_mb"]]) - base
        print(f"\nendless streams {DURATION:.0f} s: client got {chat_total / 1e6:.0f} MB translated + "
              f"{anth_total / 1e6:.0f} MB pass-through (upstream sent {up.sent / 1e6:.0f} MB); proxy RSS "
              f"{base:.0f} MB -> max {max(samples + [after['rss_mb']]):.0f} MB (VmHWM {after['hwm_mb']:.0f} MB)")
        assert chat_first.startswith(b"HTTP/1.1 200") and b"chat.completion.chunk" in chat_first
        assert anth_first.startswith(b"HTTP/1.1 200") and b"message_start" in anth_first
        assert chat_total > 20e6 and anth_total > 20e6, (chat_total, anth_total)
        assert grown < 64, f"RSS grew {grown:.0f} MB"
        assert m.proc.poll() is None and "Traceback" not in m.log
        flows = [f for f in m.flows() if FlowRecord.of(f) is not None]
        long = [f for f in flows if (FlowRecord.of(f).truncated or [])]
        assert len(long) >= 2, [FlowRecord.of(f).truncated for f in flows]
        for f in long:
            assert b"recording truncated after" in (f.response.raw_content or b"")
            parts = [t.part for t in FlowRecord.of(f).truncated]
            assert len(parts) == len(set(parts)), parts  # each cut copy recorded once
    finally:
        m.cleanup()
        up.close()
